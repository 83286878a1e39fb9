"""One client connection over a websocket: it reads, writes, and carries out what the protocol asks.

`voice.realtime.protocol` decides; this module does. One loop takes, in order, the client's events
(from a reader task) and the reports of work the connection started (a transcription or a
response, each a task so that events are read while it runs), hands each to the protocol, and
carries out the effects it returns one at a time, so the store sees them in the protocol's order.

Nothing a client sends closes the connection: a bad event gets `error`, and so does a bug. Every
response that was created ends with `response.done`: `completed`, `cancelled`, `incomplete` (the
output limit) or `failed`, with the error in `status_details`. If the client goes away mid-reply,
the reply is stopped and stored as interrupted with what had been sent.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging

from websockets.exceptions import ConnectionClosed

from fitting.errors import ParlourError
from voice.realtime import approvals, client_events, events
from voice.realtime.client_events import BadEvent
from voice.realtime.effects import (
    AddItem,
    AnswerApproval,
    AskedResponse,
    Cancel,
    DeleteItem,
    DetectSpeech,
    Effect,
    ListMcpTools,
    Preempt,
    Respond,
    RetrieveItem,
    SaveInstructions,
    Send,
    Transcribe,
    TranscribeDraft,
    TruncateItem,
)
from voice.realtime.items import Items
from voice.realtime.protocol import RealtimeProtocol
from voice.realtime.response_stream import ResponseStream
from voice.realtime.transcription import Transcription
from voice.realtime.turn_detection import SpeechDetector, VadSettings
from voice.tools.mcp import McpFailure, McpTool, list_tools
from voice.turns.engine import ServerBusy
from voice.turns.events import TurnRequest
from voice.turns.figures import TurnFigures
from voice.turns.service import Service

log = logging.getLogger("parlour")
SEND_TIMEOUT = 15  # seconds a client may leave an event unread before it counts as gone
MAX_UNREAD = 4  # client events read from the socket but not yet handled; then the client waits


def response_failure(problem: ParlourError) -> tuple[str, str]:
    """What a client is told of a problem that ended its response: the message and the code the
    problem carries."""
    busy = "the server is busy: " if isinstance(problem, ServerBusy) else ""
    return f"{busy}{problem}", problem.code


class Connection:
    def __init__(self, websocket, service: Service, session_id: str):
        self.ws, self.service, self.session_id = websocket, service, session_id
        self.items = Items(service.store, session_id, self.send)
        self.transcription = Transcription(service.stt, service.transcribe, self.items)
        self.protocol: RealtimeProtocol | None = None
        self.inbox: asyncio.Queue = asyncio.Queue()  # client events, and reports of finished work
        self.unread = asyncio.Semaphore(MAX_UNREAD)
        self.detector: SpeechDetector | None = None  # hands-free, for the protocol's current settings
        self.transcribed: TurnFigures | None = None  # the last commit's figures, for the response to it
        self.work: set[asyncio.Task] = set()
        self.closed = False

    async def send(self, payload: dict) -> None:
        if self.closed:
            return
        try:
            await asyncio.wait_for(self.ws.send(json.dumps(payload)), SEND_TIMEOUT)
        except (TimeoutError, ConnectionClosed):
            # Nobody is listening (gone, or not reading at all): stop the reply, keep what was sent.
            self.closed = True
            self._stop_response()
            self.ws.transport.abort()

    @property
    def _started_protocol(self) -> RealtimeProtocol:
        """The protocol, made as `run` begins: before any event is read or any work started."""
        if self.protocol is None:
            raise RuntimeError("the connection's protocol is used before run() made it")
        return self.protocol

    def _stop_response(self) -> None:
        if self.protocol is not None and self.protocol.response is not None:
            self.protocol.response.cancel.set()

    # The loop --------------------------------------------------------------------------------------
    async def run(self) -> None:
        config = self.service.config
        instructions = await asyncio.to_thread(self.service.store.instructions, self.session_id)
        # A session starts hands-free, with server VAD, as the GA API's do: a client left at its
        # defaults (Pipecat's) otherwise waits for a commit it never sends.
        self.protocol = RealtimeProtocol(self.session_id, instructions, self.service.voice_name,
                                         config.max_audio_seconds, config.max_text_chars, VadSettings(),
                                         config.mcp_allowed_urls)
        reader = asyncio.get_running_loop().create_task(self._read())
        try:
            await self.carry_out(self.protocol.opened())
            while (happening := await self.inbox.get()) is not None:
                await self._handle(happening)
        finally:
            self.closed = True
            reader.cancel()
            self._stop_response()
            self.service.engine.forget_guesses(self.session_id)
            await self._settle()
            await asyncio.gather(reader, return_exceptions=True)

    async def _settle(self) -> None:
        """The client has gone: work already started finishes, and what it had said before leaving
        (a commit being transcribed, items deferred behind the reply) is stored. No new response starts."""
        while True:
            while not self.inbox.empty():
                happening = self.inbox.get_nowait()
                if callable(happening):
                    await self._handle(happening)
            if not self.work:
                return
            await asyncio.wait(set(self.work))

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                await self.unread.acquire()
                # Validated (and audio decoded) in a worker thread, in order: one message at a time.
                self.inbox.put_nowait(await asyncio.to_thread(client_events.read, raw))
        except ConnectionClosed:
            pass
        finally:
            self.inbox.put_nowait(None)

    async def _handle(self, happening) -> None:
        try:
            if callable(happening):  # a report from work this connection started
                effects = happening()
            else:
                self.unread.release()
                effects = self._started_protocol.receive(happening)
            await self.carry_out(effects)
        except Exception as failure:  # a bug: said in-band, and the connection goes on
            log.exception("a client event failed")
            await self.send(events.error(f"the event could not be handled: {failure}", "internal_error",
                                         "server_error"))

    def _report(self, call) -> None:
        self.inbox.put_nowait(call)

    def _start(self, work) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self.work.add(task)
        task.add_done_callback(self.work.discard)

    # Effects ---------------------------------------------------------------------------------------
    async def carry_out(self, effects: list[Effect]) -> None:
        for effect in effects:
            try:
                await self._carry_out(effect)
            except BadEvent as bad:  # the store refused (an unknown or taken id): said to the client
                await self.send(events.error(str(bad), bad.code, event_id=getattr(effect, "event_id", None),
                                             param=bad.param))

    async def _carry_out(self, effect: Effect) -> None:
        store = self.service.store
        match effect:
            case Send(event):
                await self.send(event)
            case SaveInstructions(text):
                await asyncio.to_thread(store.set_instructions, self.session_id, text)
            case Transcribe():
                self._start(self._transcribe(effect))
            case TranscribeDraft():
                self._start(self._draft(effect))
            case Preempt(question, spoken, tools, tool_choice, settled, toolbox):
                self.service.engine.preempt(TurnRequest(self.session_id, tools=tools, tool_choice=tool_choice,
                                                        spoken=spoken, toolbox=toolbox), question, settled)
            case Respond(asked):
                await self._respond(asked)
            case Cancel(asked):
                asked.cancel.set()
            case AddItem(message, item_id, after):
                await self.items.add(message, item_id, after)
            case ListMcpTools():
                self._start(self._list_mcp_tools(effect))
            case AnswerApproval():
                await approvals.answer(effect, self.items)
            case RetrieveItem(item_id):
                await self.items.retrieve(item_id)
            case DeleteItem(item_id):
                await self.items.delete(item_id)
            case TruncateItem(item_id, content_index, audio_end_ms):
                await self.items.truncate(item_id, content_index, audio_end_ms)
            case DetectSpeech(chunk, settings):
                if self.detector is None or self.detector.settings is not settings:
                    # Its first use in the process loads Silero's model: a worker thread does that.
                    self.detector = await asyncio.to_thread(SpeechDetector, settings)
                changes = await asyncio.to_thread(self.detector.feed, chunk)
                if self.detector.speaking:
                    self.service.engine.hearing()
                await self.carry_out(self._started_protocol.speech_detected(changes, self.detector.speaking))
            case _:
                raise TypeError(f"no way to carry out {effect!r}")

    async def _transcribe(self, effect: Transcribe) -> None:
        ok = False
        try:
            self.transcribed = await self.transcription.commit(effect.audio, effect.item_id, effect.draft)
            ok = True
        except BadEvent as bad:  # nothing heard: said, and the conversation goes on
            await self.send(events.error(str(bad), bad.code))
        except Exception as failure:
            log.exception("a transcription failed")
            await self.send(events.error(f"the audio could not be transcribed: {failure}", "internal_error",
                                         "server_error"))
        finally:
            self._report(functools.partial(self._started_protocol.transcribed, ok))

    async def _list_mcp_tools(self, effect: ListMcpTools) -> None:
        found: list[McpTool] | McpFailure
        try:
            found = await list_tools(effect.server)
        except McpFailure as failure:
            found = failure
        self._report(functools.partial(self._started_protocol.mcp_tools_listed, effect.server.label,
                                       effect.item_id, found))

    async def _draft(self, effect: TranscribeDraft) -> None:
        """Whisper on the audio so far, unless more events already wait: a client sending audio
        faster than it is spoken (a file, not a held key) would only find whisper busy at commit."""
        draft = None
        self.service.engine.hearing()
        try:
            if self.inbox.empty():
                with self.service.engine.drafting():
                    draft = await self.transcription.draft(effect.audio, effect.earlier)
        except Exception:  # a draft only saves time: the commit is transcribed in full instead
            log.exception("a draft transcription failed")
        finally:
            self._report(functools.partial(self._started_protocol.drafted, effect.generation, draft))

    async def _respond(self, asked: AskedResponse) -> None:
        if self.closed:  # asked for before the client left: nobody would hear it
            await self.carry_out(self._started_protocol.response_ended())
            return
        # The response to a commit is that turn's: its clock started at the commit, whether it
        # answers in speech or text. Any other response's starts now.
        stream = ResponseStream(asked, self.service.engine, self.items, self.service.tts, self.send, self.transcribed)
        self.transcribed = None
        await stream.begin()
        self._start(self._run_response(stream))

    async def _run_response(self, stream: ResponseStream) -> None:
        try:
            await stream.run()
        except ParlourError as problem:
            await stream.fail(*response_failure(problem))
        except Exception as failure:  # a bug or a broken engine: said in-band, the connection goes on
            log.exception("a response failed")
            await stream.fail(f"the response failed: {failure}", "internal_error")
        finally:
            self._report(self._started_protocol.response_ended)
