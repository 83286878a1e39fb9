"""One connection's Realtime protocol, without I/O, in the manner of h11.

`RealtimeProtocol` takes what happens and returns effects, in order, for the connection to carry
out: client events (`receive`, raw JSON) and the reports of the work it asked for
(`transcribed`, `response_ended`, `speech_detected`, `mcp_tools_listed`). It never reads a socket,
a model, an MCP server or the store; everything it knows comes in through those calls.

The response lifecycle is `LIFECYCLE`, one table from (state, what happened) to (action, next
state). What the table does not list is refused with the error in `REFUSALS`. Each client event
type's handler is in `CLIENT_EVENTS`, one table too. Conversation input that arrives while a
commit is transcribed or a response runs (audio commits, created items, a new response after a
cancel, a truncate of the reply) is deferred and taken in arrival order once the protocol is idle
again, so the stored conversation follows what the client said: a running reply is stored before
the question that came during it. A commit is one record, `AudioCommit`, wherever it waits; the
held key's drafts are another, `Drafts`.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from models.audio import BYTES_PER_MS, AudioError
from voice.realtime import events, options
from voice.realtime.client_events import EVENT_TYPES, BadEvent, Received, read
from voice.realtime.effects import (
    AddItem,
    AnswerApproval,
    AskedResponse,
    Cancel,
    DeleteItem,
    DetectSpeech,
    Draft,
    Effect,
    Preempt,
    Respond,
    RetrieveItem,
    SaveInstructions,
    Send,
    Transcribe,
    TranscribeDraft,
    TruncateItem,
)
from voice.realtime.mcp_servers import SessionServers
from voice.realtime.turn_detection import VadSettings
from voice.speech.audio import AudioBuffer
from voice.store.sessions import new_id
from voice.tools.mcp import McpFailure, McpServer, McpTool

MIN_COMMIT_BYTES = 100 * BYTES_PER_MS  # 100 ms: less is nothing anyone could have said
# While the key is held, the buffer is transcribed again whenever it has grown by this much (and no
# draft is running), up to whisper's 30 s window: at release, a draft that ends in silence is the
# transcript, and nothing is left to decode.
DRAFT_STEP_BYTES = 500 * BYTES_PER_MS
DRAFT_MAX_BYTES = 30_000 * BYTES_PER_MS


class State(enum.Enum):
    IDLE = "idle"
    TRANSCRIBING = "transcribing"  # a commit is being transcribed
    RESPONDING = "responding"
    CANCELLING = "cancelling"  # cancel asked; the response ends with response.done soon


IDLE, TRANSCRIBING, RESPONDING, CANCELLING = State


@dataclass(frozen=True)
class AudioCommit:
    """The input audio buffer as committed: its audio, the user item it becomes, which generation
    of the buffer it was and that generation's last draft, and (hands-free) the response to start
    once it is transcribed."""

    audio: bytes
    item_id: str
    generation: int
    draft: Draft | None
    respond_after: AskedResponse | None = None

    def transcription(self, newer_draft: Draft | None = None) -> Transcribe:
        return Transcribe(self.audio, self.item_id, newer_draft or self.draft)


@dataclass
class Drafts:
    """Push-to-talk, while the key is held: the drafts of the input audio buffer. A commit or a
    clear starts the buffer's next generation; a draft of an earlier one is not kept."""

    generation: int = 0  # of the input audio buffer
    latest: Draft | None = None  # the last finished draft of this generation
    running: int | None = None  # the generation a running draft belongs to
    running_covers: int = 0  # and how many bytes of the buffer it holds
    waiting: AudioCommit | None = None  # a commit whose draft is still running

    def next_generation(self) -> None:
        self.generation += 1
        self.latest = None

    def start(self, held: bytearray) -> TranscribeDraft | None:
        """A draft of the audio held so far, if it has grown a step past the last draft and no
        draft is running."""
        drafted = self.latest.covered if self.latest else 0
        if self.running is not None or len(held) > DRAFT_MAX_BYTES or len(held) - drafted < DRAFT_STEP_BYTES:
            return None
        self.running, self.running_covers = self.generation, len(held)
        return TranscribeDraft(bytes(held), self.generation, self.latest)

    def worth_waiting_for(self, commit: AudioCommit) -> bool:
        """Whether a draft of nearly all of the commit is running: waiting for it may save the whole
        decode."""
        return self.running == commit.generation and len(commit.audio) - self.running_covers <= DRAFT_STEP_BYTES

    def finish(self, generation: int) -> AudioCommit | None:
        """The running draft ended: the commit that waits for it, if any, is waiting no more."""
        self.running = None
        waiting = self.waiting
        if waiting is None or waiting.generation != generation:
            return None
        self.waiting = None
        return waiting

    def keep(self, generation: int, draft: Draft | None) -> bool:
        """Keep a finished draft as the latest, if it is of the buffer as it is now."""
        if generation != self.generation or draft is None:
            return False
        self.latest = draft
        return True


class RealtimeProtocol:
    """The protocol state of one connection: the session's settings, the input audio buffer, the
    lifecycle state and the input deferred until it is idle."""

    def __init__(self, session_id: str, instructions: str, voice: str, max_audio_seconds: int, max_text_chars: int,
                 vad: VadSettings | None = None, mcp_allowed_urls: list[str] | None = None):
        self.session_id, self.instructions, self.voice = session_id, instructions, voice
        self.max_text_chars = max_text_chars
        self.mcp_allowed_urls = mcp_allowed_urls or []  # what a client's mcp tools may reach
        self.mcp = SessionServers()
        self.modalities = ["audio"]
        self.speed = 1.0
        self.tools: list[dict] = []  # the client's functions, as OpenAI chat tool specs
        self.tool_choice: str | dict = "auto"
        self.vad = vad  # hands-free; None is push-to-talk
        self.audio = AudioBuffer(max_audio_seconds)
        self.state = IDLE
        self.response: AskedResponse | None = None  # the running (or cancelling) response
        self.deferred: deque[tuple[str, object]] = deque()
        self.speech_item: str | None = None  # the item the speech being heard will become
        self.transcribing: AudioCommit | None = None  # the commit being transcribed
        self.drafts = Drafts()

    # What happens ----------------------------------------------------------------------------------
    def opened(self) -> list[Effect]:
        return [Send(events.event("session.created", session=self._session()))]

    def receive(self, raw: str | bytes | Received) -> list[Effect]:
        """A client event (as it came, or already `read`): what to do about it. Anything wrong with
        it is answered with `error`."""
        received = raw if isinstance(raw, Received) else read(raw)
        event = received.event
        try:
            if received.problem is not None:
                raise received.problem
            assert event is not None  # `read` gives the event or its problem
            if received.audio is not None:
                return self._append_audio(received.audio)
            return CLIENT_EVENTS[event.type](self, event)
        except BadEvent as bad:
            return [Send(events.error(str(bad), bad.code, event_id=bad.event_id or getattr(event, "event_id", None),
                                      param=bad.param))]

    def transcribed(self, ok: bool) -> list[Effect]:
        """The commit was transcribed and stored (`ok`), or failed (its error already sent)."""
        follow = self.transcribing.respond_after if self.transcribing else None
        self.transcribing = None
        if ok and follow is not None:  # hands-free: the answer comes before anything deferred
            self.deferred.appendleft(("response.create", follow))
        return self._happen("transcribed")

    def drafted(self, generation: int, draft: Draft | None) -> list[Effect]:
        """A draft finished (None: it heard nothing, failed or was skipped). A commit waiting for
        it is transcribed now. Each draft of the held key's audio is researched and its evidence
        prefilled ahead; a settled one is guessed to be the whole question (`Preempt`)."""
        waiting = self.drafts.finish(generation)
        if waiting is not None:
            return [waiting.transcription(draft)]
        if draft is not None and self.drafts.keep(generation, draft):
            return [Preempt(draft.text, self.modalities == ["audio"], self.tools, self.tool_choice, draft.settled,
                            self.mcp.session_toolbox)]
        return []

    def mcp_tools_listed(self, label: str, item_id: str, found: list[McpTool] | McpFailure) -> list[Effect]:
        """A session's MCP server was listed (`ListMcpTools`): its tools, or why it could not be."""
        return self.mcp.listed(label, item_id, found)

    def response_ended(self) -> list[Effect]:
        """The running response sent its `response.done` (or was refused before it began)."""
        return self._happen("response.ended")

    def speech_detected(self, changes: list[tuple[str, int]], speaking: bool) -> list[Effect]:
        """Hands-free: voice activity changes in the audio fed so far, and whether speech goes on."""
        vad = self.vad
        if vad is None:  # no longer hands-free: what the detector heard commits nothing
            return []
        effects: list[Effect] = []
        for change, at_ms in changes:
            if change == "started":
                self.speech_item = new_id("item")
                effects.append(Send(events.event("input_audio_buffer.speech_started", audio_start_ms=at_ms,
                                                 item_id=self.speech_item)))
                if self.state is RESPONDING and vad.interrupt_response:  # talking over the reply stops it
                    effects += self._happen("barge_in")
            else:
                effects.append(Send(events.event("input_audio_buffer.speech_stopped", audio_end_ms=at_ms,
                                                  item_id=self.speech_item)))
                assert self.speech_item is not None  # speech stops only after it started
                follow = self._new_response(None)[0] if vad.create_response else None
                effects += self._happen("commit", self._commit(self.speech_item, follow))
        if not speaking:  # keep only the padding that goes before speech
            self.audio.keep_last(vad.prefix_padding_ms)
        return effects

    # The lifecycle ---------------------------------------------------------------------------------
    def _happen(self, happening: str, payload: object = None) -> list[Effect]:
        row = LIFECYCLE.get((self.state, happening))
        if row is None:
            message, code = REFUSALS[happening]
            raise BadEvent(message, code)
        action, self.state = row
        return action(self, happening, payload)

    def _defer(self, happening: str, payload: object) -> list[Effect]:
        self.deferred.append((happening, payload))
        return []

    def _nothing(self, happening: str, payload: object) -> list[Effect]:
        return []

    def _resume(self, happening: str, payload: object) -> list[Effect]:
        """Idle again: take what was deferred, in order, until something makes the protocol busy."""
        self.response = None
        effects: list[Effect] = []
        while self.state is IDLE and self.deferred:
            happening, payload = self.deferred.popleft()
            try:
                effects += self._happen(happening, payload)
            except BadEvent as bad:
                effects.append(Send(events.error(str(bad), bad.code)))
        return effects

    def _transcribe(self, happening: str, commit: AudioCommit) -> list[Effect]:
        self.transcribing = commit
        if self.drafts.worth_waiting_for(commit):
            self.drafts.waiting = commit
            return []
        return [commit.transcription()]

    def _respond(self, happening: str, response: AskedResponse) -> list[Effect]:
        self.response = response
        return [Respond(response)]

    def _cancel(self, happening: str, payload: object) -> list[Effect]:
        assert self.response is not None  # only RESPONDING cancels, and a response is running then
        return [Cancel(self.response)]

    def _add_item(self, happening: str, effect: AddItem | AnswerApproval) -> list[Effect]:
        return [effect]

    def _truncate(self, happening: str, effect: TruncateItem) -> list[Effect]:
        return [effect]

    # Client events ---------------------------------------------------------------------------------
    def _on_session_update(self, event) -> list[Effect]:
        update = event.session
        if update.type != "realtime":
            raise BadEvent("only realtime sessions are served (not transcription sessions)", "invalid_value",
                           "session.type")
        # Every field is checked before any is applied: a refused update changes nothing.
        modalities = (options.modalities(update.output_modalities, "session.output_modalities")
                      if update.output_modalities is not None else self.modalities)
        output = update.audio.output if update.audio else None
        speed = options.speed(output.speed) if output is not None and output.speed is not None else self.speed
        audio_input = update.audio.input if update.audio else None
        detection = audio_input.turn_detection if audio_input is not None else None
        detection_given = audio_input is not None and "turn_detection" in audio_input.model_fields_set
        vad = options.turn_detection(detection) if detection_given else self.vad
        tools, servers = (options.tools(update.tools, "session.tools", self.mcp_allowed_urls, self.mcp.known)
                          if update.tools is not None else (self.tools, None))
        choice = (options.tool_choice(update.tool_choice, "session.tool_choice")
                  if update.tool_choice is not None else self.tool_choice)
        self.modalities, self.speed, self.tools, self.tool_choice = modalities, speed, tools, choice
        if detection_given:
            self.vad = vad
            self.audio.clear()
            self.drafts.next_generation()
        effects: list[Effect] = []
        if update.instructions is not None:
            self.instructions = update.instructions
            effects.append(SaveInstructions(update.instructions))
        listing = self.mcp.use(servers) if servers is not None else []
        # Voice names and transcription options are not settable: one voice, one whisper model.
        return effects + [Send(events.event("session.updated", session=self._session()))] + listing

    def _on_response_create(self, event) -> list[Effect]:
        response, servers = self._new_response(event.response)
        effects = self._happen("response.create", response)
        return self.mcp.define(servers) + effects  # defined once the response is taken

    def _on_response_cancel(self, event) -> list[Effect]:
        return self._happen("response.cancel")

    def _append_audio(self, decoded: bytes) -> list[Effect]:
        try:
            chunk = self.audio.append(decoded)
        except AudioError as error:
            raise BadEvent(str(error), "invalid_audio", "audio") from None
        if self.vad is not None:
            return [DetectSpeech(chunk, self.vad)]
        draft = self.drafts.start(self.audio.data)
        return [draft] if draft is not None else []

    def _on_input_audio_buffer_commit(self, event) -> list[Effect]:
        if len(self.audio.data) < MIN_COMMIT_BYTES:
            held = len(self.audio.take()) // BYTES_PER_MS
            self.drafts.next_generation()
            raise BadEvent(f"the input audio buffer holds {held} ms of audio; commit at least 100 ms",
                           "input_audio_buffer_commit_empty")
        return self._happen("commit", self._commit(new_id("item"), None))

    def _on_input_audio_buffer_clear(self, event) -> list[Effect]:
        self.audio.clear()
        self.drafts.next_generation()
        return [Send(events.event("input_audio_buffer.cleared"))]

    def _commit(self, item_id: str, respond_after: AskedResponse | None) -> AudioCommit:
        """The buffer's audio as committed; the buffer starts again, empty, as the next generation."""
        commit = AudioCommit(self.audio.take(), item_id, self.drafts.generation, self.drafts.latest, respond_after)
        self.drafts.next_generation()
        return commit

    def _on_output_audio_buffer_clear(self, event) -> list[Effect]:
        raise BadEvent("output_audio_buffer.clear is for WebRTC connections; over a websocket the client holds "
                       "the audio: cancel the response and truncate the item", "unsupported_event", "type")

    def _on_conversation_item_create(self, event) -> list[Effect]:
        item = event.item
        if item.type == "mcp_approval_response":
            return self._happen("item.create", AnswerApproval(item.id, item.approval_request_id, item.approve,
                                                              item.reason, self.mcp.session_toolbox, event.event_id))
        message = options.chat_message(item, self.max_text_chars)
        return self._happen("item.create", AddItem(message, event.item.id, event.previous_item_id, event.event_id))

    def _on_conversation_item_retrieve(self, event) -> list[Effect]:
        return [RetrieveItem(event.item_id, event.event_id)]

    def _on_conversation_item_delete(self, event) -> list[Effect]:
        if self.response is not None and event.item_id == self.response.item_id:
            message, code = REFUSALS["delete.reply"]
            raise BadEvent(message, code, "item_id")
        return [DeleteItem(event.item_id, event.event_id)]

    def _on_conversation_item_truncate(self, event) -> list[Effect]:
        if event.audio_end_ms < 0:
            raise BadEvent("audio_end_ms must be 0 or more", "invalid_value", "audio_end_ms")
        truncate = TruncateItem(event.item_id, event.content_index, event.audio_end_ms, event.event_id)
        if self.response is not None and event.item_id == self.response.item_id:
            return self._happen("truncate.reply", truncate)  # once the reply has stopped and is stored
        return [truncate]

    # Building --------------------------------------------------------------------------------------
    def _new_response(self, asked) -> tuple[AskedResponse, list[McpServer]]:
        """A response from `response.create`'s options (None: the session's defaults), and the MCP
        servers its own tools name. It uses the tools they listed so far."""
        modalities, tools, choice = self.modalities, self.tools, self.tool_choice
        toolbox, servers = self.mcp.session_toolbox, list[McpServer]()
        instructions = max_tokens = metadata = None
        if asked is not None:
            if asked.conversation not in (None, "auto") or asked.input is not None:
                raise BadEvent("out-of-band responses (conversation or input) are not supported", "invalid_value",
                               "response.conversation" if asked.conversation not in (None, "auto")
                               else "response.input")
            if asked.output_modalities is not None:
                modalities = options.modalities(asked.output_modalities, "response.output_modalities")
            if asked.tools is not None:
                tools, servers = options.tools(asked.tools, "response.tools", self.mcp_allowed_urls, self.mcp.known)
                # A server new to the session is listed once the response is taken: too late for it.
                known = [server.label for server in servers if self.mcp.known.get(server.label) == server]
                toolbox = self.mcp.toolbox(known) if servers else None
            if asked.tool_choice is not None:
                choice = options.tool_choice(asked.tool_choice, "response.tool_choice")
            instructions, metadata = asked.instructions, asked.metadata
            max_tokens = options.max_output_tokens(asked.max_output_tokens)
        return AskedResponse(new_id("resp"), new_id("item"), modalities, instructions, max_tokens, tools, choice,
                             metadata, self.speed, toolbox=toolbox), servers

    def _session(self) -> dict:
        session = events.session(self.session_id, self.instructions, self.modalities, self.speed, self.voice,
                                 self.vad.as_event() if self.vad else None)
        session["tools"] = [{"type": "function", **tool["function"]} for tool in self.tools] + self.mcp.shown()
        session["tool_choice"] = self.tool_choice
        return session


# The dispatch tables ------------------------------------------------------------------------------
Action = Callable[[RealtimeProtocol, str, Any], list[Effect]]  # what the lifecycle does; it gets the payload
LIFECYCLE: dict[tuple[State, str], tuple[Action, State]] = {
    (IDLE, "commit"): (RealtimeProtocol._transcribe, TRANSCRIBING),
    (IDLE, "response.create"): (RealtimeProtocol._respond, RESPONDING),
    (IDLE, "item.create"): (RealtimeProtocol._add_item, IDLE),
    (IDLE, "truncate.reply"): (RealtimeProtocol._truncate, IDLE),  # deferred until the reply had stopped
    (TRANSCRIBING, "commit"): (RealtimeProtocol._defer, TRANSCRIBING),
    (TRANSCRIBING, "response.create"): (RealtimeProtocol._defer, TRANSCRIBING),
    (TRANSCRIBING, "item.create"): (RealtimeProtocol._defer, TRANSCRIBING),
    (TRANSCRIBING, "transcribed"): (RealtimeProtocol._resume, IDLE),
    (RESPONDING, "commit"): (RealtimeProtocol._defer, RESPONDING),
    (RESPONDING, "item.create"): (RealtimeProtocol._defer, RESPONDING),
    (RESPONDING, "truncate.reply"): (RealtimeProtocol._defer, RESPONDING),
    (RESPONDING, "response.cancel"): (RealtimeProtocol._cancel, CANCELLING),
    (RESPONDING, "barge_in"): (RealtimeProtocol._cancel, CANCELLING),
    (RESPONDING, "response.ended"): (RealtimeProtocol._resume, IDLE),
    (CANCELLING, "commit"): (RealtimeProtocol._defer, CANCELLING),
    (CANCELLING, "item.create"): (RealtimeProtocol._defer, CANCELLING),
    (CANCELLING, "truncate.reply"): (RealtimeProtocol._defer, CANCELLING),
    (CANCELLING, "response.create"): (RealtimeProtocol._defer, CANCELLING),
    (CANCELLING, "response.cancel"): (RealtimeProtocol._nothing, CANCELLING),
    (CANCELLING, "barge_in"): (RealtimeProtocol._nothing, CANCELLING),
    (CANCELLING, "response.ended"): (RealtimeProtocol._resume, IDLE),
}
REFUSALS = {
    "response.create": ("a response is already in progress", "conversation_already_has_active_response"),
    "response.cancel": ("there is no response in progress to cancel", "response_cancel_not_active"),
    "delete.reply": ("the reply being generated cannot be deleted: cancel the response first", "invalid_value"),
}

# Each client event type's handler. An append is not here: its audio arrives decoded, in
# `Received.audio`, and goes to `_append_audio`.
CLIENT_EVENTS: dict[str, Callable[[RealtimeProtocol, Any], list[Effect]]] = {
    "session.update": RealtimeProtocol._on_session_update,
    "input_audio_buffer.commit": RealtimeProtocol._on_input_audio_buffer_commit,
    "input_audio_buffer.clear": RealtimeProtocol._on_input_audio_buffer_clear,
    "output_audio_buffer.clear": RealtimeProtocol._on_output_audio_buffer_clear,
    "conversation.item.create": RealtimeProtocol._on_conversation_item_create,
    "conversation.item.retrieve": RealtimeProtocol._on_conversation_item_retrieve,
    "conversation.item.delete": RealtimeProtocol._on_conversation_item_delete,
    "conversation.item.truncate": RealtimeProtocol._on_conversation_item_truncate,
    "response.create": RealtimeProtocol._on_response_create,
    "response.cancel": RealtimeProtocol._on_response_cancel,
}
# Every event type `client_events` reads has a handler, or the service does not start.
if unhandled := set(EVENT_TYPES) - set(CLIENT_EVENTS) - {"input_audio_buffer.append"}:
    raise RuntimeError(f"client events without a handler: {sorted(unhandled)}")
