"""What `voice.realtime.protocol` asks the connection to do: each effect is a small frozen record,
carried out in order by `voice.realtime.connection`. Work that takes long (a transcription, a
response) is reported back to the protocol when it ends (`transcribed`, `drafted`,
`response_ended`, `speech_detected`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from voice.realtime.turn_detection import VadSettings


@dataclass
class AskedResponse:
    """What one `response.create` asked for (with the session's defaults filled in), and the switch
    that stops it. The protocol makes it; `voice.realtime.response_stream` streams it."""

    id: str
    item_id: str  # the assistant message's id, if the reply has words
    modalities: list[str]
    instructions: str | None
    max_tokens: int | None
    tools: list[dict]
    tool_choice: str | dict | None
    metadata: dict | None
    speed: float = 1.0  # of its speech
    cancel: threading.Event = field(default_factory=threading.Event)  # set to stop it

    @property
    def audio(self) -> bool:
        return self.modalities == ["audio"]


@dataclass(frozen=True)
class Send:
    """Send this server event."""
    event: dict


@dataclass(frozen=True)
class SaveInstructions:
    """Store the session's instructions."""
    text: str


@dataclass(frozen=True)
class Transcribe:
    """Transcribe committed audio (24 kHz PCM16), store it as the user item `item_id` and announce
    it; report back with `transcribed(ok)`. A `draft` of its start may stand for the transcript if
    the rest, and the draft's own last moments, hold no speech."""
    audio: bytes
    item_id: str
    draft: Draft | None = None


@dataclass(frozen=True)
class Draft:
    """What whisper heard in the first `covered` bytes of the input audio buffer; `settled` if its
    last moments are silent (voice.realtime.transcription)."""
    text: str
    covered: int
    settled: bool = False


@dataclass(frozen=True)
class Preempt:
    """Research what a draft heard, and evaluate its turn's prompt ahead, before the commit
    (voice.turns.preemption): the evidence alone while the user may still be speaking, the
    question too once the draft is `settled`. Nothing is stored, announced or spoken."""
    question: str
    spoken: bool
    tools: list[dict]
    tool_choice: str | dict
    settled: bool = True


@dataclass(frozen=True)
class TranscribeDraft:
    """Push-to-talk, key still held: transcribe the buffer so far in the background, and report it
    with `drafted(generation, draft)`. A settled `earlier` draft followed only by silence is the
    draft again, without whisper."""
    audio: bytes
    generation: int
    earlier: Draft | None = None


@dataclass(frozen=True)
class Respond:
    """Start this response (response.created at once) if there is something to answer; report its
    end with `response_ended()`, whether it ran or was refused."""
    response: AskedResponse


@dataclass(frozen=True)
class Cancel:
    """Stop the running response; it ends with `response.done` cancelled, its reply stored as heard."""
    response: AskedResponse


@dataclass(frozen=True)
class AddItem:
    """Store a conversation item (a chat message) and announce it."""
    message: dict
    item_id: str | None
    after: str | None
    event_id: str | None


@dataclass(frozen=True)
class RetrieveItem:
    item_id: str
    event_id: str | None


@dataclass(frozen=True)
class DeleteItem:
    item_id: str
    event_id: str | None


@dataclass(frozen=True)
class TruncateItem:
    item_id: str
    content_index: int
    audio_end_ms: int
    event_id: str | None


@dataclass(frozen=True)
class DetectSpeech:
    """Hands-free: run voice activity detection with `settings` over this appended audio, and
    report what changed with `speech_detected`."""
    chunk: bytes
    settings: VadSettings


Effect = Send | SaveInstructions | Transcribe | TranscribeDraft | Preempt | Respond | Cancel | AddItem | \
    RetrieveItem | DeleteItem | TruncateItem | DetectSpeech
