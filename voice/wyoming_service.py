"""Home Assistant's way in: the Wyoming protocol over TCP, beside the websocket.

`parlour serve --wyoming-port PORT` serves three Wyoming programs from the engines, store and turn
engine the websocket already uses (no model is loaded twice):
- `asr` (whisper): `transcribe`, `audio-start`, `audio-chunk`..., `audio-stop` are answered with
  `transcript-start`, `transcript-chunk`, `transcript-stop` and `transcript`. Audio of any rate,
  sample width and channel count is converted to 16-bit mono and resampled with soxr.
- `tts` (Piper): `synthesize` is answered with `audio-start`, `audio-chunk`s, `audio-stop`. Text
  streamed from an LLM as `synthesize-start`, `synthesize-chunk`..., `synthesize-stop` is spoken a
  sentence at a time as each completes, each as its own `audio-start` ... `audio-stop`, and ends with
  `synthesize-stopped`; a plain `synthesize` sent during such a stream (Home Assistant sends both)
  is ignored.
- `handle` (the assistant): a `transcript` is a question. Its `context.conversation_id` names a
  Parlour session (the same id always maps to the same stored session, across restarts), so the
  assistant remembers; the reply streams as `handled-start`, `handled-chunk`..., `handled-stop` and
  ends with `handled`. A busy model answers `not-handled` with the reason.
Anything else a client sends is answered with an `error` event, and the connection goes on.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import threading
from functools import partial
from importlib.metadata import version

from wyoming.asr import Transcribe, Transcript, TranscriptChunk, TranscriptStart, TranscriptStop
from wyoming.audio import AudioChunk, AudioChunkConverter, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event
from wyoming.handle import Handled, HandledChunk, HandledStart, HandledStop, NotHandled
from wyoming.info import (
    AsrModel, AsrProgram, Attribution, Describe, HandleModel, HandleProgram, Info, TtsProgram, TtsVoice,
)
from wyoming.server import AsyncEventHandler, AsyncTcpServer
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped

from fitting import FitError
from models.reply import ContextOverflow
from models.remote_llm import ModelServerError
from voice.speech import Sentences
from voice.turns import ServerBusy

log = logging.getLogger("parlour")
CHUNK_SAMPLES = 1024  # per audio-chunk sent, as wyoming-piper does


def session_for(conversation_id: str) -> str:
    """The Parlour session a Home Assistant conversation lives in: the same id, the same session."""
    return "wyoming_" + hashlib.sha256(conversation_id.encode()).hexdigest()[:24]


@functools.cache
def _version(package: str) -> str:
    """Read from the installed package's metadata once: a file read is no work for the event loop."""
    return version(package)


def describe(service) -> Info:
    """Honest names of the three programs and the models behind them."""
    ours = _version("parlour")
    parlour = Attribution(name="Parlour", url=f"http://{service.config.host}:{service.port}/")  # its own page
    whisper = AsrModel(name=service.stt.path.name, description="faster-whisper (CTranslate2, int8)",
                       attribution=Attribution("OpenAI Whisper via faster-whisper", "https://github.com/SYSTRAN/faster-whisper"),
                       installed=True, version=_version("faster-whisper"), languages=[service.stt.language])
    voice = TtsVoice(name=service.tts.name, description=f"Piper voice {service.tts.name}",
                     attribution=Attribution("Piper", "https://github.com/OHF-Voice/piper1-gpl"),
                     installed=True, version=_version("piper-tts"), languages=[service.tts.name.split("-")[0]])
    assistant = HandleModel(name=service.llm.name, description="the language model, with memory",
                            attribution=parlour, installed=True, version=ours, languages=["en"])
    return Info(
        asr=[AsrProgram(name="parlour-asr", description="Parlour speech-to-text", attribution=parlour,
                        installed=True, version=ours, models=[whisper], supports_transcript_streaming=True)],
        tts=[TtsProgram(name="parlour-tts", description="Parlour speech", attribution=parlour, installed=True,
                        version=ours, voices=[voice], supports_synthesize_streaming=True)],
        handle=[HandleProgram(name="parlour", description="Parlour, a local assistant that remembers",
                              attribution=parlour, installed=True, version=ours, models=[assistant],
                              supports_handled_streaming=True)],
    )


class WyomingHandler(AsyncEventHandler):
    """One Wyoming client connection; each event is answered as the module docstring says."""

    def __init__(self, service, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        super().__init__(reader, writer)
        self.service = service
        self.audio: bytearray | None = None  # 16-bit mono PCM of the question being spoken
        self.rate = 16_000
        self.converter = AudioChunkConverter(width=2, channels=1)
        self.streaming: Sentences | None = None  # text arriving as synthesize-chunk events

    async def handle_event(self, event: Event) -> bool:
        try:
            await self._answer(event)
        except (ConnectionError, asyncio.IncompleteReadError):
            return False
        except Exception as error:  # bad input or a failing engine: said in-band, the connection goes on
            log.exception("wyoming %s failed", event.type)
            await self._error(f"{event.type}: {error}", "internal_error")
        return True

    async def _answer(self, event: Event) -> None:
        if Describe.is_type(event.type):
            await self.write_event(describe(self.service).event())
        elif Transcribe.is_type(event.type):
            pass  # the model is fixed; what matters comes with the audio
        elif AudioStart.is_type(event.type):
            self.audio, self.rate = bytearray(), AudioStart.from_event(event).rate
        elif AudioChunk.is_type(event.type):
            await self._audio_chunk(AudioChunk.from_event(event))
        elif AudioStop.is_type(event.type):
            await self._audio_stop()
        elif Synthesize.is_type(event.type):
            if self.streaming is None:  # during a stream, Home Assistant's copy of the text is ignored
                await self._speak(Synthesize.from_event(event).text)
        elif SynthesizeStart.is_type(event.type):
            self.streaming = Sentences(first_words=0)
        elif SynthesizeChunk.is_type(event.type):
            await self._synthesize_chunk(SynthesizeChunk.from_event(event).text)
        elif SynthesizeStop.is_type(event.type):
            await self._synthesize_stop()
        elif Transcript.is_type(event.type):
            await self._handle(Transcript.from_event(event))
        else:
            await self._error(f"unsupported event: {event.type}", "unknown_event")

    async def _error(self, text: str, code: str) -> None:
        await self.write_event(Error(text=text, code=code).event())

    # asr ----------------------------------------------------------------------------------------
    async def _audio_chunk(self, chunk: AudioChunk) -> None:
        if self.audio is None:
            await self._error("audio-chunk before audio-start", "audio_not_started")
            return
        if chunk.rate != self.rate:
            await self._error(f"audio-chunk at {chunk.rate} Hz after audio-start at {self.rate} Hz", "invalid_audio")
            return
        self.audio += self.converter.convert(chunk).audio
        self.service.engine.hearing()
        if len(self.audio) > self.service.config.max_audio_seconds * self.rate * 2:
            self.audio = None
            await self._error(f"more than {self.service.config.max_audio_seconds} s of audio", "audio_too_long")

    async def _audio_stop(self) -> None:
        if self.audio is None:
            await self._error("audio-stop before audio-start", "audio_not_started")
            return
        audio, self.audio = bytes(self.audio), None
        transcript = await asyncio.to_thread(self.service.transcribe, audio, self.rate)
        for reply in (TranscriptStart(), TranscriptChunk(text=transcript.text), TranscriptStop(),
                      Transcript(text=transcript.text)):
            await self.write_event(reply.event())

    # tts ----------------------------------------------------------------------------------------
    async def _speak(self, text: str) -> None:
        """One audio-start ... audio-stop of `text`, at the voice's own rate (no resampling)."""
        rate = self.service.tts.native_rate
        pcm = await asyncio.to_thread(lambda: b"".join(self.service.tts.synthesize(text, rate=rate)))
        await self.write_event(AudioStart(rate=rate, width=2, channels=1).event())
        for start in range(0, len(pcm), CHUNK_SAMPLES * 2):
            await self.write_event(AudioChunk(rate=rate, width=2, channels=1,
                                              audio=pcm[start:start + CHUNK_SAMPLES * 2]).event())
        await self.write_event(AudioStop().event())

    async def _synthesize_chunk(self, text: str) -> None:
        if self.streaming is None:
            await self._error("synthesize-chunk before synthesize-start", "synthesize_not_started")
            return
        for sentence in self.streaming.feed(text):
            await self._speak(sentence)

    async def _synthesize_stop(self) -> None:
        if self.streaming is None:
            await self._error("synthesize-stop before synthesize-start", "synthesize_not_started")
            return
        rest, self.streaming = self.streaming.flush(), None
        if rest:
            await self._speak(rest)
        await self.write_event(SynthesizeStopped().event())

    # handle -------------------------------------------------------------------------------------
    async def _handle(self, transcript: Transcript) -> None:
        store, context = self.service.store, transcript.context or {}
        conversation = str(context.get("conversation_id") or "")
        session_id = session_for(conversation) if conversation else None
        if session_id is None or not await asyncio.to_thread(store.exists, session_id):
            session_id = await asyncio.to_thread(store.create, self.service.config.instructions, session_id=session_id)
        if not transcript.text.strip():
            await self.write_event(NotHandled(text="nothing was said", context=context).event())
            return
        await asyncio.to_thread(store.append, session_id, {"role": "user", "content": transcript.text})
        await self.write_event(HandledStart(context=context).event())
        said: list[str] = []
        try:
            async for turn in self.service.engine.respond(session_id, threading.Event(), spoken=True):
                if turn.kind == "delta":
                    said.append(turn.text)
                    await self.write_event(HandledChunk(text=turn.text).event())
        except (ServerBusy, ModelServerError, FitError, ContextOverflow) as problem:  # the reply could not begin
            await self.write_event(HandledStop().event())
            await self.write_event(NotHandled(text=str(problem), context=context).event())
            return
        await self.write_event(HandledStop().event())
        await self.write_event(Handled(text="".join(said).strip(), context=context).event())


async def start(service, host: str, port: int) -> AsyncTcpServer:
    """Listen for Wyoming clients; the caller stops the returned server."""
    server = AsyncTcpServer(host, port)
    await server.start(partial(WyomingHandler, service))
    return server
