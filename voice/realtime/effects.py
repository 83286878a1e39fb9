"""What `voice.realtime.protocol` asks the connection to do: each effect is a small frozen record,
carried out in order by `voice.realtime.connection`. Work that takes long (a transcription, a
response, a listing of an MCP server's tools) is reported back to the protocol when it ends
(`transcribed`, `drafted`, `response_ended`, `speech_detected`, `mcp_tools_listed`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from voice.realtime.turn_detection import VadSettings
from voice.tools.mcp import McpServer
from voice.tools.toolbox import Toolbox


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
    toolbox: Toolbox | None = None  # the MCP tools the client brought, as listed; None: it brought none
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
    toolbox: Toolbox | None = None


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
class ListMcpTools:
    """List the tools of a session's MCP server in the background (its `mcp_list_tools` item is
    `item_id`), and report them, or the failure, with `mcp_tools_listed`."""
    server: McpServer
    item_id: str


@dataclass(frozen=True)
class AnswerApproval:
    """The client's answer to an approval request (an `mcp_approval_response` item): run the call
    with `toolbox` if `approve`, store its result (or that the user declined) and announce it."""
    item_id: str
    approval_request_id: str
    approve: bool
    reason: str | None
    toolbox: Toolbox | None
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
    ListMcpTools | AnswerApproval | RetrieveItem | DeleteItem | TruncateItem | DetectSpeech
