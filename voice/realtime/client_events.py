"""Client events parsed with the `openai` package's own Realtime models.

`parse(raw)` turns one websocket message into the typed event its `type` names
(`SessionUpdateEvent`, `ConversationItemCreateEvent`, ...), or raises `BadEvent` whose message,
`code` and `param` (the field path, such as `session.audio.output.speed`) go back to the client
in an `error` event with the client's `event_id`. Nothing a client sends gets past here untyped.
`read(raw)` does that and decodes an audio append's audio too: the connection's reader runs it in
a worker thread, so validating and decoding never hold up the event loop.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from http import HTTPStatus

import pydantic
from openai.types.realtime import realtime_client_event
from openai.types.realtime.realtime_client_event import RealtimeClientEvent

from fitting.errors import ParlourError
from models.audio import AudioError
from voice.speech.audio import decode_audio
from voice.validation import explain, json_value

_UNION = typing.get_args(typing.get_args(realtime_client_event.RealtimeClientEvent)[0])
EVENT_TYPES: dict[str, type[RealtimeClientEvent]] = {
    typing.get_args(model.model_fields["type"].annotation)[0]: model for model in _UNION
}


class BadEvent(ParlourError, ValueError):
    """A client event that cannot be served; the message and `code` go back in an `error` event."""

    code, status = "invalid_request", HTTPStatus.BAD_REQUEST

    def __init__(self, message: str, code: str | None = None, param: str | None = None,
                 event_id: str | None = None):
        super().__init__(message, code=code)
        self.param, self.event_id = param, event_id


@dataclass(frozen=True)
class Received:
    """One websocket message, read: its typed `event`, or the `problem` with it; an audio append's
    `audio` decoded."""

    event: RealtimeClientEvent | None
    problem: BadEvent | None = None
    audio: bytes | None = None


def read(raw: str | bytes) -> Received:
    try:
        event = parse(raw)
    except BadEvent as bad:
        return Received(None, bad)
    if event.type != "input_audio_buffer.append":
        return Received(event)
    try:
        return Received(event, audio=decode_audio(event.audio))
    except AudioError as error:
        return Received(event, BadEvent(str(error), error.code, "audio"))


def parse(raw: str | bytes) -> RealtimeClientEvent:
    if isinstance(raw, bytes):
        raise BadEvent("binary frames are not supported: send JSON text events", "invalid_json")
    try:
        data = json_value(raw)
    except ValueError as error:
        raise BadEvent(f"the event is not valid JSON: {error}", "invalid_json") from None
    if not isinstance(data, dict):
        raise BadEvent("an event must be a JSON object", "invalid_event")
    event_id = data.get("event_id") if isinstance(data.get("event_id"), str) else None
    kind = data.get("type")
    if not isinstance(kind, str):
        raise BadEvent("the event has no 'type'", "missing_field", "type", event_id)
    model = EVENT_TYPES.get(kind)
    if model is None:
        raise BadEvent(f"unknown or unsupported event type '{kind}'"[:200], "unknown_event", "type", event_id)
    if kind == "session.update" and isinstance(data.get("session"), dict) and "type" not in data["session"]:
        # Beta-era clients leave out the session's type; a websocket session is a realtime one.
        data = {**data, "session": {"type": "realtime", **data["session"]}}
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as error:
        problem = explain(error, "event")
        raise BadEvent(f"{kind}: {problem}", "missing_field" if problem.missing else "invalid_value",
                       problem.param, event_id) from None
    except (ValueError, TypeError, RecursionError) as error:  # pathological input pydantic could not even read
        raise BadEvent(f"{kind}: the event cannot be read: {error}"[:300], "invalid_event", None, event_id) from None

