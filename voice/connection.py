"""One client connection speaking the Realtime protocol over a websocket.

The connection reads client events in order, each parsed into the `openai` package's typed model
(voice.client_events), and answers each; a response runs as its own task so that
`response.cancel` (and anything else) is read while it streams. Bad input never closes the
connection: it gets an `error` event naming the problem and the field. Every response that was
created ends with `response.done`: `completed`, `cancelled`, `incomplete` (the output limit) or
`failed`, with the error in `status_details`. If the client goes away mid-reply, the reply is
stopped and stored as interrupted with what had been sent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading

from websockets.exceptions import ConnectionClosed

from fitting import FitError
from models.audio import AudioError
from models.llm import ContextOverflow
from models.remote_llm import ModelServerError
from voice import events, items
from voice.audio_turn import speak_reply, transcribe_commit
from voice.client_events import BadEvent, parse
from voice.speech import AudioBuffer
from voice.responses import Response, delta_ids, finish, stream_turn
from voice.store import new_id
from voice.turn_detection import SpeechDetector, VadSettings
from voice.turns import NothingToAnswer, ServerBusy

log = logging.getLogger("parlour")
MODALITIES = ({"text"}, {"audio"})
SEND_TIMEOUT = 15  # seconds a client may leave an event unread before it counts as gone


class Connection:
    def __init__(self, websocket, service, session_id: str):
        self.ws, self.service, self.session_id = websocket, service, session_id
        self.modalities = ["audio"]
        self.speed = 1.0
        self.tools: list[dict] = []  # the client's functions, as OpenAI chat tool specs
        self.tool_choice: str | dict = "auto"
        self.audio = AudioBuffer(service.config.max_audio_seconds)
        self.detector: SpeechDetector | None = None  # hands-free (server_vad); None: push-to-talk
        self.speech_item: str | None = None  # the item the speech being heard will become
        self.spoken: dict = {}  # the last commit's timing, for the spoken reply that follows it
        self.response: asyncio.Task | None = None
        self.response_item: str | None = None
        self.after_response: list[tuple] = []  # items created while a response ran (voice.items)
        self.cancel = threading.Event()
        self.closed = False

    # Sending ---------------------------------------------------------------------------------
    async def send(self, payload: dict) -> None:
        if self.closed:
            return
        try:
            await asyncio.wait_for(self.ws.send(json.dumps(payload)), SEND_TIMEOUT)
        except (ConnectionClosed, asyncio.TimeoutError):
            # Nobody is listening (gone, or not reading at all): stop the reply, keep what was sent.
            self.closed = True
            self.cancel.set()
            self.ws.transport.abort()

    async def session_object(self) -> dict:
        instructions = await asyncio.to_thread(self.service.store.instructions, self.session_id)
        session = events.session(self.session_id, instructions, self.modalities, self.speed, self.service.voice_name,
                                 self.detector.settings.as_event() if self.detector else None)
        session["tools"] = [{"type": "function", **tool["function"]} for tool in self.tools]
        session["tool_choice"] = self.tool_choice
        return session

    def responding(self) -> bool:
        return self.response is not None and not self.response.done()

    # The event loop of one connection --------------------------------------------------------
    async def run(self) -> None:
        await self.send(events.event("session.created", session=await self.session_object()))
        try:
            async for raw in self.ws:
                await self.dispatch(raw)
        except ConnectionClosed:
            pass
        finally:
            self.closed = True
            if self.responding():
                self.cancel.set()
                await asyncio.gather(self.response, return_exceptions=True)

    async def dispatch(self, raw: str | bytes) -> None:
        event = None
        try:
            event = parse(raw)
            await self.handlers()[event.type](event)
        except BadEvent as bad:
            event_id = bad.event_id or getattr(event, "event_id", None)
            await self.send(events.error(str(bad), bad.code, event_id=event_id, param=bad.param))
        except Exception as failure:  # a bug: said in-band, and the connection goes on
            log.exception("a client event failed")
            await self.send(events.error(f"the event could not be handled: {failure}", "internal_error",
                                         "server_error", event_id=getattr(event, "event_id", None)))

    def handlers(self) -> dict:
        return {
            "session.update": self.on_session_update,
            "conversation.item.create": lambda e: items.create(self, e),
            "conversation.item.retrieve": lambda e: items.retrieve(self, e),
            "conversation.item.delete": lambda e: items.delete(self, e),
            "conversation.item.truncate": lambda e: items.truncate(self, e),
            "response.create": self.on_response_create,
            "response.cancel": self.on_response_cancel,
            "input_audio_buffer.append": self.on_audio_append,
            "input_audio_buffer.commit": self.on_audio_commit,
            "input_audio_buffer.clear": self.on_audio_clear,
            "output_audio_buffer.clear": self.on_output_audio_clear,
        }

    # Client events ---------------------------------------------------------------------------
    async def on_session_update(self, event) -> None:
        update = event.session
        if update.type != "realtime":
            raise BadEvent("only realtime sessions are served (not transcription sessions)", "invalid_value",
                           "session.type")
        if update.instructions is not None:
            await asyncio.to_thread(self.service.store.set_instructions, self.session_id, update.instructions)
        if update.output_modalities is not None:
            self.modalities = checked_modalities(update.output_modalities, "session.output_modalities")
        speed = update.audio.output.speed if update.audio and update.audio.output else None
        if speed is not None:
            if not 0.25 <= speed <= 4.0:
                raise BadEvent("session.audio.output.speed must be a number from 0.25 to 4", "invalid_value",
                               "session.audio.output.speed")
            self.speed = float(speed)
        audio_input = update.audio.input if update.audio else None
        if audio_input is not None and "turn_detection" in audio_input.model_fields_set:
            self.detector = speech_detector(audio_input.turn_detection)
            self.audio.clear()
        if update.tools is not None:
            self.tools = function_tools(update.tools, "session.tools")
        if update.tool_choice is not None:
            self.tool_choice = checked_choice(update.tool_choice, "session.tool_choice")
        # Voice names and transcription options are not settable: one voice, one whisper model.
        await self.send(events.event("session.updated", session=await self.session_object()))

    async def on_response_create(self, event) -> None:
        if self.responding():
            raise BadEvent("a response is already in progress", "conversation_already_has_active_response")
        options = event.response
        modalities, tools, choice = self.modalities, self.tools, self.tool_choice
        instructions, max_tokens, metadata = None, None, None
        if options is not None:
            if options.conversation not in (None, "auto") or options.input is not None:
                raise BadEvent("out-of-band responses (conversation or input) are not supported", "invalid_value",
                               "response.conversation" if options.conversation not in (None, "auto")
                               else "response.input")
            if options.output_modalities is not None:
                modalities = checked_modalities(options.output_modalities, "response.output_modalities")
            if options.tools is not None:
                tools = function_tools(options.tools, "response.tools")
            if options.tool_choice is not None:
                choice = checked_choice(options.tool_choice, "response.tool_choice")
            instructions, metadata = options.instructions, options.metadata
            max_tokens = options.max_output_tokens
            if max_tokens == "inf":
                max_tokens = None
            elif max_tokens is not None and max_tokens < 1:
                raise BadEvent("response.max_output_tokens must be a positive whole number or \"inf\"",
                               "invalid_value", "response.max_output_tokens")
        messages = await asyncio.to_thread(self.service.store.messages, self.session_id)
        if not messages or messages[-1].message["role"] not in ("user", "tool"):
            raise BadEvent("there is no new user message or function output to respond to", "no_user_message")
        await self.start_response(Response(new_id("resp"), new_id("item"), modalities, instructions, max_tokens,
                                           tools, choice, metadata))

    async def start_response(self, response: Response) -> None:
        self.cancel = threading.Event()
        self.response_item = response.item_id
        # Created at once, before research or a wait for the model: clients time out waiting for it.
        await self.send(events.event("response.created", response=events.response(
            response.id, self.session_id, "in_progress", response.modalities, [], metadata=response.metadata)))
        self.response = asyncio.get_running_loop().create_task(self.respond(response))

    async def on_response_cancel(self, event) -> None:
        if not self.responding():
            raise BadEvent("there is no response in progress to cancel", "response_cancel_not_active")
        self.cancel.set()

    async def on_audio_append(self, event) -> None:
        try:
            chunk = self.audio.append(event.audio)
        except AudioError as error:
            raise BadEvent(str(error), "invalid_audio", "audio") from None
        if self.detector is not None:
            await self.detect_turns(chunk)

    async def detect_turns(self, chunk: bytes) -> None:
        """Hands-free: speech starting may interrupt the reply; speech ending commits and answers it."""
        detector = self.detector
        for change, at_ms in await asyncio.to_thread(detector.feed, chunk):
            if change == "started":
                self.speech_item = new_id("item")
                await self.send(events.event("input_audio_buffer.speech_started", audio_start_ms=at_ms,
                                             item_id=self.speech_item))
                if self.responding() and detector.settings.interrupt_response:
                    self.cancel.set()  # the listener talks over the reply: it stops, stored as sent
            else:
                await self.send(events.event("input_audio_buffer.speech_stopped", audio_end_ms=at_ms,
                                             item_id=self.speech_item))
                if self.responding():
                    await asyncio.shield(self.response)  # the interrupted reply is stored before the question
                try:
                    await transcribe_commit(self, self.audio.take(), self.speech_item)
                except BadEvent as bad:  # a noise taken for speech: said, and listening goes on
                    await self.send(events.error(str(bad), bad.code))
                    continue
                if detector.settings.create_response:
                    await self.start_response(Response(new_id("resp"), new_id("item"), self.modalities, None, None,
                                                       self.tools, self.tool_choice, None))
        if not detector.speaking:  # keep only the padding that goes before speech
            self.audio.keep_last(detector.settings.prefix_padding_ms)

    async def on_audio_commit(self, event) -> None:
        if self.responding():
            raise BadEvent("a response is in progress: cancel it before committing more audio",
                           "conversation_already_has_active_response")
        audio = self.audio.take()
        if len(audio) < 100 * 48:  # under 100 ms: nothing anyone could have said
            raise BadEvent(f"the input audio buffer holds {len(audio) // 48} ms of audio; commit at least 100 ms",
                           "input_audio_buffer_commit_empty")
        await transcribe_commit(self, audio)

    async def on_audio_clear(self, event) -> None:
        self.audio.clear()
        await self.send(events.event("input_audio_buffer.cleared"))

    async def on_output_audio_clear(self, event) -> None:
        raise BadEvent("output_audio_buffer.clear is for WebRTC connections; over a websocket the client holds "
                       "the audio: cancel the response and truncate the item", "unsupported_event", "type")

    async def add_user_message(self, text: str, audio: bool = False, item_id: str | None = None) -> None:
        """Store a spoken question now, before any reply, and announce it."""
        await items.add(self, {"role": "user", "content": text}, item_id, audio=audio)

    # Responses -------------------------------------------------------------------------------
    async def respond(self, response: Response) -> None:
        try:
            if response.audio:
                await speak_reply(self, response)
            else:
                await self.text_turn(response)
        except ServerBusy as busy:
            await self.fail(response, f"the server is busy: {busy}", "server_busy")
        except (NothingToAnswer, FitError, ContextOverflow) as problem:
            await self.fail(response, str(problem), "cannot_respond")
        except ModelServerError as failure:
            await self.fail(response, str(failure), "model_server_error")
        except Exception as failure:  # a bug or a broken engine: said in-band, the connection goes on
            log.exception("a response failed")
            await self.fail(response, f"the response failed: {failure}", "internal_error")
        finally:
            waiting, self.after_response = self.after_response, []
            for message, item_id, after in waiting:  # items created while it ran come after its reply
                try:
                    await items.add(self, message, item_id, after)
                except BadEvent as bad:
                    await self.send(events.error(str(bad), bad.code, param=bad.param))

    async def fail(self, response: Response, message: str, code: str) -> None:
        """`error`, then `response.done` with status `failed` and the error in its details."""
        failure = {"type": "server_error", "code": code, "message": message}
        await self.send(events.error(message, code, "server_error"))
        await self.send(events.event("response.done", response=events.response(
            response.id, self.session_id, "failed", response.modalities, response.output, failure=failure,
            metadata=response.metadata)))

    async def text_turn(self, response: Response) -> None:
        async def send_delta(text: str) -> None:
            await self.send(events.event("response.output_text.delta", **delta_ids(response), delta=text))

        text, figures = await stream_turn(self, response, send_delta)
        await finish(self, response, text, figures)

SEMANTIC_SILENCE_MS = {"low": 1_000, "medium": 600, "auto": 600, "high": 300}


def speech_detector(turn_detection) -> SpeechDetector | None:
    if turn_detection is None:
        return None
    given = {name: getattr(turn_detection, name, None) for name in (
        "threshold", "prefix_padding_ms", "silence_duration_ms", "create_response", "interrupt_response")}
    if turn_detection.type == "semantic_vad":
        # No model judges whether a sentence is finished here: the eagerness becomes a silence length
        # (the Agents SDK asks for semantic_vad by default).
        given["silence_duration_ms"] = SEMANTIC_SILENCE_MS[turn_detection.eagerness or "auto"]
    settings = VadSettings(**{name: value for name, value in given.items() if value is not None})
    if not 0 < settings.threshold < 1 or settings.prefix_padding_ms < 0 or settings.silence_duration_ms < 32:
        raise BadEvent("turn_detection: threshold must be between 0 and 1, prefix_padding_ms at least 0 and "
                       "silence_duration_ms at least 32", "invalid_value", "session.audio.input.turn_detection")
    return SpeechDetector(settings)


def checked_modalities(value: list[str], param: str) -> list[str]:
    if set(value) not in MODALITIES:
        raise BadEvent(f"{param} must be [\"text\"] or [\"audio\"]", "invalid_value", param)
    return list(value)


def function_tools(tools: list, param: str) -> list[dict]:
    """Realtime function tools as OpenAI chat tool specs; other kinds (MCP) are not served."""
    specs = []
    for n, tool in enumerate(tools):
        if getattr(tool, "type", None) not in (None, "function") or not getattr(tool, "name", None):
            raise BadEvent(f"{param}[{n}]: only function tools with a name are supported", "invalid_value",
                           f"{param}.{n}")
        spec = {"name": tool.name, "description": tool.description or "",
                "parameters": tool.parameters if isinstance(tool.parameters, dict) else {"type": "object",
                                                                                        "properties": {}}}
        specs.append({"type": "function", "function": spec})
    return specs


def checked_choice(choice, param: str) -> str | dict:
    if isinstance(choice, str):
        return choice
    if getattr(choice, "type", None) == "function" and getattr(choice, "name", None):
        return {"type": "function", "name": choice.name}
    raise BadEvent(f"{param} must be auto, none, required or a function", "invalid_value", param)
