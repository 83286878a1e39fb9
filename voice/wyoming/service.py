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
- `handle` (the assistant, `voice.wyoming.assistant`): a `transcript` is a question, answered by
  the turn engine in the session its conversation id names.
`describe` is answered with `voice.wyoming.info`.
Every event is read and typed by `voice.wyoming.events`. Anything else a client sends, and any
event with a field missing or wrong, is answered with an `error` event whose code says what is
wrong (`unknown_event`, `bad_request` and the field), and the connection goes on.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial

from wyoming.asr import Transcribe, Transcript, TranscriptChunk, TranscriptStart, TranscriptStop
from wyoming.audio import AudioChunk, AudioChunkConverter, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event, Eventable
from wyoming.info import Describe
from wyoming.server import AsyncEventHandler, AsyncTcpServer
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped

from fitting.errors import ParlourError
from voice.text.sentences import Sentences
from voice.turns.service import Service
from voice.wyoming import assistant
from voice.wyoming.events import BadEvent, LostFraming, parse, read_event
from voice.wyoming.info import describe

log = logging.getLogger("parlour")
CHUNK_SAMPLES = 1024  # per audio-chunk sent, as wyoming-piper does


class WyomingHandler(AsyncEventHandler):
    """One Wyoming client connection; each event is answered as the module docstring says."""

    def __init__(self, service: Service, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        super().__init__(reader, writer)
        self.service = service
        self.audio: bytearray | None = None  # 16-bit mono PCM of the question being spoken
        self.rate = 16_000
        self.converter = AudioChunkConverter(width=2, channels=1)
        self.streaming: Sentences | None = None  # text arriving as synthesize-chunk events

    async def run(self) -> None:
        """The package's loop with Parlour's reader (voice.wyoming.events): a line that cannot be
        read is answered with an `error` and skipped; one whose framing is lost ends the connection."""
        self._is_running = True
        try:
            while self._is_running:
                try:
                    event = await read_event(self.reader)
                except BadEvent as bad:
                    await self._error(str(bad), bad.code)
                    continue
                except LostFraming as lost:
                    log.warning("wyoming: closing a connection that sent %s", lost)
                    break
                if event is None or not await self.handle_event(event):
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away
        finally:
            await self.disconnect()
            self.writer.close()

    async def handle_event(self, event: Event) -> bool:
        try:
            await self._answer(parse(event))
        except ParlourError as problem:  # a bad event, or an error the service tells its clients
            await self._error(str(problem), problem.code)
        except (ConnectionError, asyncio.IncompleteReadError):
            return False
        except Exception as error:  # a failing engine or a bug: said in-band, the connection goes on
            log.exception("wyoming %s failed", event.type)
            await self._error(f"{event.type}: {error}", "internal_error")
        return True

    async def _answer(self, event: Eventable) -> None:
        match event:
            case Describe():
                await self.write_event(describe(self.service).event())
            case Transcribe():
                pass  # the model is fixed; what matters comes with the audio
            case AudioStart():
                self.audio, self.rate = bytearray(), event.rate
            case AudioChunk():
                await self._audio_chunk(event)
            case AudioStop():
                await self._audio_stop()
            case Synthesize():
                if self.streaming is None:  # during a stream, Home Assistant's copy of the text is ignored
                    await self._speak(event.text)
            case SynthesizeStart():
                self.streaming = Sentences(first_words=0)
            case SynthesizeChunk():
                await self._synthesize_chunk(event.text)
            case SynthesizeStop():
                await self._synthesize_stop()
            case Transcript():
                await assistant.answer(self.service, event, self.write_event)

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


async def start(service: Service, host: str, port: int) -> AsyncTcpServer:
    """Listen for Wyoming clients; the caller stops the returned server."""
    server = AsyncTcpServer(host, port)
    await server.start(partial(WyomingHandler, service))
    return server
