"""One client connection speaking the Realtime protocol subset over a websocket.

The connection reads client events in order and answers each; a response runs as its own task so
that `response.cancel` (and anything else) is read while it streams. Bad input never closes the
connection: it gets an `error` event naming the problem. If the client goes away mid-reply, the
reply is stopped and stored as interrupted with what had been sent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from contextlib import aclosing

from websockets.exceptions import ConnectionClosed

from fitting import FitError
from models.audio import AudioError
from models.llm import ContextOverflow
from models.remote_llm import ModelServerError
from voice import events
from voice.audio_turn import speak_reply, transcribe_commit
from voice.speech import AudioBuffer, heard_text
from voice.store import new_id
from voice.turns import NothingToAnswer, ServerBusy

log = logging.getLogger("parlour")
MODALITIES = ({"text"}, {"audio"})
SEND_TIMEOUT = 15  # seconds a client may leave an event unread before it counts as gone


class BadEvent(ValueError):
    """A client event that cannot be served; the message goes back in an `error` event."""

    def __init__(self, message: str, code: str = "invalid_request", param: str | None = None):
        super().__init__(message)
        self.code, self.param = code, param


class Connection:
    def __init__(self, websocket, service, session_id: str):
        self.ws, self.service, self.session_id = websocket, service, session_id
        self.modalities = ["audio"]
        self.speed = 1.0
        self.audio = AudioBuffer(service.config.max_audio_seconds)
        self.spoken: dict = {}  # the last commit's timing, for the spoken reply that follows it
        self.response: asyncio.Task | None = None
        self.response_item: str | None = None
        self.opened: str | None = None  # the response whose response.created was sent
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
        return events.session(self.session_id, instructions, self.modalities, self.speed, self.service.voice_name)

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
            if self.response and not self.response.done():
                self.cancel.set()
                await asyncio.gather(self.response, return_exceptions=True)

    async def dispatch(self, raw: str | bytes) -> None:
        client_event_id = None
        try:
            if isinstance(raw, bytes):
                raise BadEvent("binary frames are not supported: send JSON text events", "invalid_json")
            try:
                data = json.loads(raw)
            except json.JSONDecodeError as error:
                raise BadEvent(f"the event is not valid JSON: {error}", "invalid_json") from None
            if not isinstance(data, dict):
                raise BadEvent("an event must be a JSON object", "invalid_event")
            client_event_id = data.get("event_id") if isinstance(data.get("event_id"), str) else None
            kind = data.get("type")
            if not isinstance(kind, str):
                raise BadEvent("the event has no 'type'", "missing_field", "type")
            handler = self.handlers().get(kind)
            if handler is None:
                raise BadEvent(f"unknown or unsupported event type '{kind}'", "unknown_event", "type")
            await handler(data)
        except BadEvent as bad:
            await self.send(events.error(str(bad), bad.code, event_id=client_event_id, param=bad.param))

    def handlers(self) -> dict:
        return {
            "session.update": self.on_session_update,
            "conversation.item.create": self.on_item_create,
            "response.create": self.on_response_create,
            "response.cancel": self.on_response_cancel,
            "input_audio_buffer.append": self.on_audio_append,
            "input_audio_buffer.commit": self.on_audio_commit,
            "input_audio_buffer.clear": self.on_audio_clear,
            "conversation.item.truncate": self.on_item_truncate,
        }

    # Client events ---------------------------------------------------------------------------
    async def on_session_update(self, data: dict) -> None:
        update = _field(data, "session", dict)
        if "instructions" in update:
            instructions = update["instructions"]
            if not isinstance(instructions, str):
                raise BadEvent("session.instructions must be a string", "invalid_value", "session.instructions")
            await asyncio.to_thread(self.service.store.set_instructions, self.session_id, instructions)
        if "output_modalities" in update:
            self.modalities = self.checked_modalities(update["output_modalities"], "session.output_modalities")
        speed = ((update.get("audio") or {}).get("output") or {}).get("speed")
        if speed is not None:
            if not isinstance(speed, (int, float)) or not 0.25 <= speed <= 4.0:
                raise BadEvent("session.audio.output.speed must be a number from 0.25 to 4", "invalid_value",
                               "session.audio.output.speed")
            self.speed = float(speed)
        # Everything else a client may send (voice names, turn detection, tools...) is ignored.
        await self.send(events.event("session.updated", session=await self.session_object()))

    def checked_modalities(self, value, param: str) -> list[str]:
        if not isinstance(value, list) or set(value) not in MODALITIES:
            raise BadEvent(f"{param} must be [\"text\"] or [\"audio\"]", "invalid_value", param)
        return list(value)

    async def on_item_create(self, data: dict) -> None:
        item = _field(data, "item", dict)
        if item.get("type", "message") != "message" or item.get("role") != "user":
            raise BadEvent("only user messages can be added: item.type 'message', item.role 'user'",
                           "invalid_value", "item.role")
        content = item.get("content")
        if not isinstance(content, list) or not content:
            raise BadEvent("item.content must be a list of input_text parts", "missing_field", "item.content")
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "input_text" or not isinstance(part.get("text"), str):
                raise BadEvent("each content part must be {\"type\": \"input_text\", \"text\": ...}",
                               "invalid_value", "item.content")
            texts.append(part["text"])
        text = "\n".join(texts)
        if not text.strip():
            raise BadEvent("the message is empty", "invalid_value", "item.content")
        limit = self.service.config.max_text_chars
        if len(text) > limit:
            raise BadEvent(f"the message has {len(text)} characters; the limit is {limit}", "text_too_long",
                           "item.content")
        await self.add_user_message(text)

    async def add_user_message(self, text: str, audio: bool = False, item_id: str | None = None) -> None:
        """Store the question now, before any reply, and announce it."""
        previous = await asyncio.to_thread(self.service.store.messages, self.session_id)
        stored = await asyncio.to_thread(self.service.store.append, self.session_id, {"role": "user", "content": text},
                                         item_id=item_id)
        payload = events.item(stored, audio=audio)
        previous_id = previous[-1].item_id if previous else None
        await self.send(events.event("conversation.item.added", previous_item_id=previous_id, item=payload))
        await self.send(events.event("conversation.item.done", previous_item_id=previous_id, item=payload))

    async def on_response_create(self, data: dict) -> None:
        if self.response and not self.response.done():
            raise BadEvent("a response is already in progress", "conversation_already_has_active_response")
        options = data.get("response") or {}
        if not isinstance(options, dict):
            raise BadEvent("response must be an object", "invalid_value", "response")
        modalities = self.modalities
        if "output_modalities" in options:
            modalities = self.checked_modalities(options["output_modalities"], "response.output_modalities")
        instructions = options.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            raise BadEvent("response.instructions must be a string", "invalid_value", "response.instructions")
        max_tokens = options.get("max_output_tokens")
        if max_tokens == "inf":
            max_tokens = None
        elif max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool)
                                         or max_tokens < 1):
            raise BadEvent("response.max_output_tokens must be a positive whole number or \"inf\"",
                           "invalid_value", "response.max_output_tokens")
        messages = await asyncio.to_thread(self.service.store.messages, self.session_id)
        if not messages or messages[-1].message["role"] != "user":
            raise BadEvent("there is no new user message to respond to", "no_user_message")
        self.cancel = threading.Event()
        self.response_item = None
        self.response = asyncio.get_running_loop().create_task(self.respond(modalities, instructions, max_tokens))

    async def on_response_cancel(self, data: dict) -> None:
        if not self.response or self.response.done():
            raise BadEvent("there is no response in progress to cancel", "response_cancel_not_active")
        self.cancel.set()

    async def on_audio_append(self, data: dict) -> None:
        try:
            self.audio.append(data.get("audio"))
        except AudioError as error:
            raise BadEvent(str(error), "invalid_audio", "audio") from None

    async def on_audio_commit(self, data: dict) -> None:
        if self.response and not self.response.done():
            raise BadEvent("a response is in progress: cancel it before committing more audio",
                           "conversation_already_has_active_response")
        audio = self.audio.take()
        if len(audio) < 100 * 48:  # under 100 ms: nothing anyone could have said
            raise BadEvent(f"the input audio buffer holds {len(audio) // 48} ms of audio; commit at least 100 ms",
                           "input_audio_buffer_commit_empty")
        await transcribe_commit(self, audio)

    async def on_audio_clear(self, data: dict) -> None:
        self.audio.clear()
        await self.send(events.event("input_audio_buffer.cleared"))

    async def on_item_truncate(self, data: dict) -> None:
        item_id = _field(data, "item_id", str)
        audio_end_ms = data.get("audio_end_ms")
        if not isinstance(audio_end_ms, int) or isinstance(audio_end_ms, bool) or audio_end_ms < 0:
            raise BadEvent("audio_end_ms must be a whole number of milliseconds, 0 or more", "invalid_value",
                           "audio_end_ms")
        if self.response and not self.response.done() and self.response_item == item_id:
            await asyncio.shield(self.response)  # truncate what was stored once the reply has stopped
        stored = await asyncio.to_thread(self.service.store.message, self.session_id, item_id)
        if stored is None or stored.message["role"] != "assistant":
            raise BadEvent(f"no assistant item {item_id} in this session", "item_not_found", "item_id")
        timeline = stored.figures.get("timeline")
        if not timeline:
            raise BadEvent(f"item {item_id} has no audio to truncate", "invalid_value", "item_id")
        # A reply heard to its end keeps its text; otherwise (cut short by the listener, or by a
        # cancel before all of it was spoken) it keeps the sentences that were actually heard.
        if audio_end_ms < timeline[-1][2] or stored.status != "complete":
            await asyncio.to_thread(self.service.store.update, self.session_id, item_id,
                                    heard_text(timeline, audio_end_ms), "interrupted")
        await self.send(events.event("conversation.item.truncated", item_id=item_id,
                                     content_index=data.get("content_index", 0)
                                     if isinstance(data.get("content_index"), int) else 0,
                                     audio_end_ms=audio_end_ms))

    # Responses -------------------------------------------------------------------------------
    async def respond(self, modalities: list[str], instructions: str | None, max_tokens: int | None) -> None:
        response_id, item_id = new_id("resp"), new_id("item")
        self.response_item = item_id
        try:
            if modalities == ["audio"]:
                await speak_reply(self, response_id, item_id, instructions, max_tokens)
            else:
                await self.text_turn(response_id, item_id, instructions, max_tokens)
        except ServerBusy as busy:
            await self.send(events.error(f"the server is busy: {busy}", "server_busy", "server_error"))
        except (NothingToAnswer, FitError, ContextOverflow) as problem:
            await self.send(events.error(str(problem), "cannot_respond"))
        except ModelServerError as failure:
            await self.fail_response(response_id, modalities, str(failure), "model_server_error")
        except Exception as failure:  # a bug or a broken engine: said in-band, the connection goes on
            log.exception("a response failed")
            await self.fail_response(response_id, modalities, f"the response failed: {failure}", "internal_error")

    async def fail_response(self, response_id: str, modalities: list[str], message: str, code: str) -> None:
        """`error`, then `response.done` with status `failed` (after `response.created` if not yet sent)."""
        failure = {"type": "server_error", "code": code, "message": message}
        await self.send(events.error(message, code, "server_error"))
        if self.opened != response_id:
            await self.send(events.event("response.created", response=events.response(
                response_id, self.session_id, "in_progress", modalities, [])))
        await self.send(events.event("response.done", response=events.response(
            response_id, self.session_id, "failed", modalities, [], failure=failure)))

    async def open_output(self, response_id: str, item_id: str, audio: bool) -> None:
        """response.created, then the reply's item and its one content part.

        Sent once the turn holds the model, so a busy server answers with one error and no response.
        """
        modalities = ["audio"] if audio else ["text"]
        self.opened = response_id
        await self.send(events.event("response.created", response=events.response(
            response_id, self.session_id, "in_progress", modalities, [])))
        await self.send(events.event("response.output_item.added", response_id=response_id, output_index=0,
                                     item=events.assistant_item(item_id, "", "in_progress", audio)))
        part = {"type": "audio", "transcript": ""} if audio else {"type": "text", "text": ""}
        await self.send(events.event("response.content_part.added", response_id=response_id, item_id=item_id,
                                     output_index=0, content_index=0, part=part))

    async def announce_research(self, stored_messages) -> None:
        for stored in stored_messages:
            for payload in events.items(stored):
                await self.send(events.event("conversation.item.added", item=payload))
                await self.send(events.event("conversation.item.done", item=payload))

    async def stream_turn(self, response_id: str, item_id: str, instructions: str | None,
                          max_tokens: int | None, audio: bool, on_delta, row=None) -> tuple[str, dict] | None:
        """Run the turn: research is announced, the output opened with the first step, and
        `on_delta(text)` awaited for each piece of the reply. Returns the text and the figures, or
        None if the turn never began (the engine raised before holding the model). A spoken turn
        passes the `row` it stores its reply through (voice.reply_row)."""
        text, figures, opened = "", None, False
        turn = self.service.engine.respond(self.session_id, self.cancel, instructions, max_tokens, item_id, row)
        async with aclosing(turn):
            async for step in turn:
                if step.kind == "research":
                    await self.announce_research(step.stored)
                    continue
                if not opened:
                    await self.open_output(response_id, item_id, audio)
                    opened = True
                if step.kind == "delta":
                    text += step.text
                    await on_delta(step.text)
                elif step.kind == "done":
                    figures = dict(step.figures)
        return (text, figures) if opened and figures is not None else None

    async def text_turn(self, response_id: str, item_id: str, instructions: str | None,
                        max_tokens: int | None) -> None:
        ids = {"response_id": response_id, "item_id": item_id, "output_index": 0, "content_index": 0}

        async def send_delta(text: str) -> None:
            await self.send(events.event("response.output_text.delta", **ids, delta=text))

        result = await self.stream_turn(response_id, item_id, instructions, max_tokens, False, send_delta)
        if result:
            await self.finish_response(response_id, item_id, *result, ["text"])

    async def finish_response(self, response_id: str, item_id: str, text: str, figures: dict,
                              modalities: list[str]) -> None:
        audio = modalities == ["audio"]
        ids = {"response_id": response_id, "item_id": item_id, "output_index": 0, "content_index": 0}
        cancelled = figures.get("status") == "interrupted"
        if audio:
            await self.send(events.event("response.output_audio.done", **ids))
            await self.send(events.event("response.output_audio_transcript.done", **ids, transcript=text))
            part = {"type": "audio", "transcript": text}
        else:
            await self.send(events.event("response.output_text.done", **ids, text=text))
            part = {"type": "text", "text": text}
        await self.send(events.event("response.content_part.done", **ids, part=part))
        final = events.assistant_item(item_id, text, "incomplete" if cancelled else "completed", audio)
        await self.send(events.event("response.output_item.done", response_id=response_id, output_index=0, item=final))
        await self.send(events.event("response.done", response=events.response(
            response_id, self.session_id, "cancelled" if cancelled else "completed", modalities, [final],
            figures, reason="client_cancelled" if cancelled else None)))


def _field(data: dict, name: str, kind: type):
    value = data.get(name)
    if not isinstance(value, kind):
        raise BadEvent(f"the event needs '{name}' as {'an object' if kind is dict else kind.__name__}",
                       "missing_field", name)
    return value
