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

from fitting import FitError
from models.reply import ContextOverflow
from models.remote_llm import ModelServerError
from voice.figures import TurnFigures
from voice.realtime import events, items
from voice.realtime.audio_turn import speak_reply, transcribe_commit
from voice.realtime.client_events import BadEvent
from voice.realtime.effects import (AddItem, Cancel, DeleteItem, DetectSpeech, Effect, Respond, RetrieveItem,
                                    SaveInstructions, Send, Transcribe, TranscribeDraft, TruncateItem)
from voice.realtime.protocol import RealtimeProtocol
from voice.realtime.responses import Response, delta_ids, finish, stream_turn
from voice.realtime.turn_detection import SpeechDetector
from voice.turns import ServerBusy

log = logging.getLogger("parlour")
SEND_TIMEOUT = 15  # seconds a client may leave an event unread before it counts as gone
MAX_UNREAD = 4  # client events read from the socket but not yet handled; then the client waits


class Connection:
    def __init__(self, websocket, service, session_id: str):
        self.ws, self.service, self.session_id = websocket, service, session_id
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
        except (ConnectionClosed, asyncio.TimeoutError):
            # Nobody is listening (gone, or not reading at all): stop the reply, keep what was sent.
            self.closed = True
            self._stop_response()
            self.ws.transport.abort()

    def _stop_response(self) -> None:
        if self.protocol is not None and self.protocol.response is not None:
            self.protocol.response.cancel.set()

    # The loop --------------------------------------------------------------------------------------
    async def run(self) -> None:
        config = self.service.config
        instructions = await asyncio.to_thread(self.service.store.instructions, self.session_id)
        self.protocol = RealtimeProtocol(self.session_id, instructions, self.service.voice_name,
                                         config.max_audio_seconds, config.max_text_chars)
        reader = asyncio.get_running_loop().create_task(self._read())
        try:
            await self.carry_out(self.protocol.opened())
            while (happening := await self.inbox.get()) is not None:
                await self._handle(happening)
        finally:
            self.closed = True
            reader.cancel()
            self._stop_response()
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
                self.inbox.put_nowait(raw)
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
                effects = self.protocol.receive(happening)
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
            case Respond(response):
                await self._respond(response)
            case Cancel(response):
                response.cancel.set()
            case AddItem(message, item_id, after):
                await items.add(self, message, item_id, after)
            case RetrieveItem(item_id):
                await items.retrieve(self, item_id)
            case DeleteItem(item_id):
                await items.delete(self, item_id)
            case TruncateItem(item_id, content_index, audio_end_ms):
                await items.truncate(self, item_id, content_index, audio_end_ms)
            case DetectSpeech(chunk, settings):
                if self.detector is None or self.detector.settings is not settings:
                    self.detector = SpeechDetector(settings)
                changes = await asyncio.to_thread(self.detector.feed, chunk)
                if self.detector.speaking:
                    self.service.engine.hearing()
                await self.carry_out(self.protocol.speech_detected(changes, self.detector.speaking))
            case _:
                raise TypeError(f"no way to carry out {effect!r}")

    async def _transcribe(self, effect: Transcribe) -> None:
        ok = False
        try:
            await transcribe_commit(self, effect.audio, effect.item_id, effect.draft)
            ok = True
        except BadEvent as bad:  # nothing heard: said, and the conversation goes on
            await self.send(events.error(str(bad), bad.code))
        except Exception as failure:
            log.exception("a transcription failed")
            await self.send(events.error(f"the audio could not be transcribed: {failure}", "internal_error",
                                         "server_error"))
        finally:
            self._report(functools.partial(self.protocol.transcribed, ok))

    async def _draft(self, effect: TranscribeDraft) -> None:
        """Whisper on the audio so far, unless more events already wait: a client sending audio
        faster than it is spoken (a file, not a held key) would only find whisper busy at commit."""
        text = None
        self.service.engine.hearing()
        try:
            if self.inbox.empty():
                text = (await asyncio.to_thread(self.service.transcribe, effect.audio)).text
        except Exception:  # a draft only saves time: the commit is transcribed in full instead
            log.exception("a draft transcription failed")
        finally:
            self._report(functools.partial(self.protocol.drafted, effect.generation, text, len(effect.audio)))

    async def _respond(self, response: Response) -> None:
        if self.closed:  # asked for before the client left: nobody would hear it
            await self.carry_out(self.protocol.response_ended())
            return
        messages = await asyncio.to_thread(self.service.store.messages, self.session_id)
        # The output follows the conversation's last item. With no new user message the reply
        # answers from the instructions and the conversation so far, as the GA API does (a greeting).
        response.previous_item_id = events.items(messages[-1])[-1]["id"] if messages else None
        # Created at once, before research or a wait for the model: clients time out waiting for it.
        await self.send(events.event("response.created", response=events.response(
            response.id, self.session_id, "in_progress", response.modalities, [], metadata=response.metadata)))
        self._start(self._run_response(response))

    # Responses -------------------------------------------------------------------------------------
    async def _run_response(self, response: Response) -> None:
        # The response to a commit is that turn's: its clock started at the commit, whether it
        # answers in speech or text. Any other response's starts now.
        response.figures, self.transcribed = self.transcribed or TurnFigures(), None
        try:
            if response.audio:
                await speak_reply(self, response)
            else:
                await self._text_turn(response)
        except ServerBusy as busy:
            await self._fail(response, f"the server is busy: {busy}", "server_busy")
        except (FitError, ContextOverflow) as problem:
            await self._fail(response, str(problem), "cannot_respond")
        except ModelServerError as failure:
            await self._fail(response, str(failure), "model_server_error")
        except Exception as failure:  # a bug or a broken engine: said in-band, the connection goes on
            log.exception("a response failed")
            await self._fail(response, f"the response failed: {failure}", "internal_error")
        finally:
            self._report(self.protocol.response_ended)

    async def _fail(self, response: Response, message: str, code: str) -> None:
        """`error`, then `response.done` with status `failed` and the error in its details."""
        failure = {"type": "server_error", "code": code, "message": message}
        await self.send(events.error(message, code, "server_error"))
        await self.send(events.event("response.done", response=events.response(
            response.id, self.session_id, "failed", response.modalities, response.output, failure=failure,
            metadata=response.metadata)))

    async def _text_turn(self, response: Response) -> None:
        async def send_delta(text: str) -> None:
            await self.send(events.event("response.output_text.delta", **delta_ids(response), delta=text))

        await finish(self, response, await stream_turn(self, response, send_delta))
