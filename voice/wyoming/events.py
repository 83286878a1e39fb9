"""Wyoming events read off the wire and typed with the `wyoming` package's own event classes.

A Wyoming event is a JSON header line, then `data_length` bytes of JSON data and `payload_length`
bytes of payload. `read_event` reads one; `parse` types it (`Synthesize`, `AudioChunk`, ...) or
raises `BadEvent` naming the field at fault, answered in-band as an `error` event. The package's
own reader ends the connection on a line that is not JSON and raises on one that is JSON but not
an object, so Parlour reads the framing itself:
- a header that is not a JSON object with a `type` is skipped (`BadEvent`): the next line may be
  a good event again;
- a header whose lengths cannot be read loses the framing, since where the next event begins is
  unknown (`LostFraming`): the connection closes, with one line in the log.
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus

import pydantic
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event, Eventable
from wyoming.info import Describe
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from fitting.errors import ParlourError
from voice.validation import explain, json_value

# The events Parlour's three programs (asr, tts, handle) and `describe` are served.
SERVED: dict[str, type[Eventable]] = {
    "describe": Describe, "transcribe": Transcribe, "audio-start": AudioStart, "audio-chunk": AudioChunk,
    "audio-stop": AudioStop, "synthesize": Synthesize, "synthesize-start": SynthesizeStart,
    "synthesize-chunk": SynthesizeChunk, "synthesize-stop": SynthesizeStop, "transcript": Transcript,
}
_TYPED = {kind: pydantic.TypeAdapter(cls) for kind, cls in SERVED.items()}
MAX_DATA = 1 << 20  # bytes of JSON data after a header
MAX_PAYLOAD = 16 << 20  # bytes of payload (an audio chunk is a few KiB)
RATES = range(1_000, 384_001)
WIDTHS = (1, 2, 3, 4)  # bytes a sample, as the package's converter reads them
CHANNELS = (1, 2)  # its converter makes mono of stereo, of nothing wider


class BadEvent(ParlourError, ValueError):
    """An event that cannot be served; `code` and the message go back in an `error` event."""

    code, status = "bad_request", HTTPStatus.BAD_REQUEST

    def __init__(self, message: str, code: str | None = None):
        super().__init__(message, code=code)


class LostFraming(ValueError):
    """A header whose lengths cannot be read: the stream cannot be followed past it. Not a
    ParlourError: the client is told nothing, the connection closes."""


async def read_event(reader: asyncio.StreamReader) -> Event | None:
    """The next event, or None at the end of the stream."""
    try:
        line = await reader.readline()
    except ValueError:  # over the reader's line limit: part of the line is still unread
        raise LostFraming("a header line longer than the reader's limit") from None
    if not line:
        return None
    try:
        header = json_value(line)
    except ValueError as error:
        raise BadEvent(f"a line that is not a JSON event was skipped: {error}"[:200]) from None
    if not isinstance(header, dict):
        raise BadEvent("an event's header must be a JSON object")
    data_length = _length(header, "data_length", MAX_DATA)
    payload_length = _length(header, "payload_length", MAX_PAYLOAD)
    more = await reader.readexactly(data_length) if data_length else b""
    payload = await reader.readexactly(payload_length) if payload_length else None
    kind, data = header.get("type"), header.get("data")
    if not isinstance(kind, str):
        raise BadEvent("an event needs a type")
    if not isinstance(data, (dict, type(None))):
        raise BadEvent(f"{kind}: data must be an object")
    data = dict(data or {})
    if more:
        try:
            extra = json_value(more)
        except ValueError as error:
            raise BadEvent(f"{kind}: its data is not JSON: {error}"[:200]) from None
        if not isinstance(extra, dict):
            raise BadEvent(f"{kind}: data must be an object")
        data.update(extra)
    return Event(type=kind, data=data, payload=payload)


def _length(header: dict, name: str, limit: int) -> int:
    value = header.get(name)
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= limit:
        raise LostFraming(f"{name} {str(value)[:40]} is not a length from 0 to {limit}")
    return value


def parse(event: Event) -> Eventable:
    """`event` as the package's class for its type, checked, or `BadEvent`."""
    typed = _TYPED.get(event.type)
    if typed is None:
        raise BadEvent(f"unsupported event: {event.type[:80]}", "unknown_event")
    data = {**event.data, "audio": event.payload or b""} if event.type == "audio-chunk" else event.data
    try:
        value = typed.validate_python(data)
    except pydantic.ValidationError as error:
        raise BadEvent(f"{event.type}: {explain(error, 'data')}") from None
    if isinstance(value, (AudioStart, AudioChunk)):
        _check_format(event.type, value)
    return value


def _check_format(kind: str, audio: AudioStart | AudioChunk) -> None:
    if audio.rate not in RATES:
        raise BadEvent(f"{kind}: rate must be from {RATES.start} to {RATES.stop - 1} Hz")
    if audio.width not in WIDTHS or audio.channels not in CHANNELS:
        raise BadEvent(f"{kind}: width must be one of {WIDTHS} bytes and channels one of {CHANNELS}")
    if isinstance(audio, AudioChunk) and len(audio.audio) % (audio.width * audio.channels):
        raise BadEvent(f"{kind}: the payload is not a whole number of {audio.width * audio.channels}-byte frames")
