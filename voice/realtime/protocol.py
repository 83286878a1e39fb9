"""One connection's Realtime protocol, without I/O, in the manner of h11.

`RealtimeProtocol` takes what happens and returns effects, in order, for the connection to carry
out: client events (`receive`, raw JSON) and the reports of the work it asked for
(`transcribed`, `response_ended`, `speech_detected`). It never reads a socket, a model or the
store; everything it knows comes in through those calls.

The response lifecycle is `LIFECYCLE`, one table from (state, what happened) to (action, next
state). What the table does not list is refused with the error in `REFUSALS`. Conversation input
that arrives while a commit is transcribed or a response runs (audio commits, created items, a
new response after a cancel, a truncate of the reply) is deferred and taken in arrival order once
the protocol is idle again, so the stored conversation follows what the client said: a running
reply is stored before the question that came during it.
"""

from __future__ import annotations

import enum
from collections import deque

from models.audio import BYTES_PER_MS, AudioError
from voice.realtime import events, options
from voice.realtime.client_events import BadEvent, Received, read
from voice.realtime.effects import (
    AddItem,
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
from voice.realtime.turn_detection import VadSettings
from voice.speech.audio import AudioBuffer
from voice.store.sessions import new_id

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
LIFECYCLE: dict[tuple[State, str], tuple[str, State]] = {
    (IDLE, "commit"): ("transcribe", TRANSCRIBING),
    (IDLE, "response.create"): ("respond", RESPONDING),
    (IDLE, "item.create"): ("add_item", IDLE),
    (IDLE, "truncate.reply"): ("truncate", IDLE),  # deferred until the reply had stopped
    (TRANSCRIBING, "commit"): ("defer", TRANSCRIBING),
    (TRANSCRIBING, "response.create"): ("defer", TRANSCRIBING),
    (TRANSCRIBING, "item.create"): ("defer", TRANSCRIBING),
    (TRANSCRIBING, "transcribed"): ("resume", IDLE),
    (RESPONDING, "commit"): ("defer", RESPONDING),
    (RESPONDING, "item.create"): ("defer", RESPONDING),
    (RESPONDING, "truncate.reply"): ("defer", RESPONDING),
    (RESPONDING, "response.cancel"): ("cancel", CANCELLING),
    (RESPONDING, "barge_in"): ("cancel", CANCELLING),
    (RESPONDING, "response.ended"): ("resume", IDLE),
    (CANCELLING, "commit"): ("defer", CANCELLING),
    (CANCELLING, "item.create"): ("defer", CANCELLING),
    (CANCELLING, "truncate.reply"): ("defer", CANCELLING),
    (CANCELLING, "response.create"): ("defer", CANCELLING),
    (CANCELLING, "response.cancel"): ("nothing", CANCELLING),
    (CANCELLING, "barge_in"): ("nothing", CANCELLING),
    (CANCELLING, "response.ended"): ("resume", IDLE),
}
REFUSALS = {
    "response.create": ("a response is already in progress", "conversation_already_has_active_response"),
    "response.cancel": ("there is no response in progress to cancel", "response_cancel_not_active"),
    "delete.reply": ("the reply being generated cannot be deleted: cancel the response first", "invalid_value"),
}


class RealtimeProtocol:
    """The protocol state of one connection: the session's settings, the input audio buffer, the
    lifecycle state and the input deferred until it is idle."""

    def __init__(self, session_id: str, instructions: str, voice: str, max_audio_seconds: int, max_text_chars: int,
                 vad: VadSettings | None = None):
        self.session_id, self.instructions, self.voice = session_id, instructions, voice
        self.max_text_chars = max_text_chars
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
        self.respond_after_transcript: AskedResponse | None = None
        self.generation = 0  # of the input audio buffer: a commit or a clear starts the next
        self.draft: Draft | None = None  # of the buffer's current generation
        self.drafting: int | None = None  # the generation a running draft belongs to
        self.drafting_covered = 0  # and how much of the buffer it holds
        self.waiting_for_draft: tuple | None = None  # a commit whose draft is still running

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
            if received.audio is not None:
                return self._append_audio(received.audio)
            return getattr(self, "_on_" + event.type.replace(".", "_"))(event)
        except BadEvent as bad:
            return [Send(events.error(str(bad), bad.code, event_id=bad.event_id or getattr(event, "event_id", None),
                                      param=bad.param))]

    def transcribed(self, ok: bool) -> list[Effect]:
        """The commit was transcribed and stored (`ok`), or failed (its error already sent)."""
        follow = self.respond_after_transcript
        self.respond_after_transcript = None
        if ok and follow is not None:  # hands-free: the answer comes before anything deferred
            self.deferred.appendleft(("response.create", follow))
        return self._happen("transcribed")

    def drafted(self, generation: int, draft: Draft | None) -> list[Effect]:
        """A draft finished (None: it heard nothing, failed or was skipped). A commit waiting for
        it is transcribed now. Each draft of the held key's audio is researched and its evidence
        prefilled ahead; a settled one is guessed to be the whole question (`Preempt`)."""
        self.drafting = None
        if self.waiting_for_draft is not None and self.waiting_for_draft[3] == generation:
            audio, item_id, older, _generation = self.waiting_for_draft
            self.waiting_for_draft = None
            return [Transcribe(audio, item_id, draft or older)]
        if generation == self.generation and draft is not None:
            self.draft = draft
            return [Preempt(draft.text, self.modalities == ["audio"], self.tools, self.tool_choice, draft.settled)]
        return []

    def response_ended(self) -> list[Effect]:
        """The running response sent its `response.done` (or was refused before it began)."""
        return self._happen("response.ended")

    def speech_detected(self, changes: list[tuple[str, int]], speaking: bool) -> list[Effect]:
        """Hands-free: voice activity changes in the audio fed so far, and whether speech goes on."""
        effects: list[Effect] = []
        for change, at_ms in changes:
            if change == "started":
                self.speech_item = new_id("item")
                effects.append(Send(events.event("input_audio_buffer.speech_started", audio_start_ms=at_ms,
                                                 item_id=self.speech_item)))
                if self.state is RESPONDING and self.vad.interrupt_response:  # talking over the reply stops it
                    effects += self._happen("barge_in")
            else:
                effects.append(Send(events.event("input_audio_buffer.speech_stopped", audio_end_ms=at_ms,
                                                  item_id=self.speech_item)))
                follow = self._new_response(None) if self.vad.create_response else None
                effects += self._happen("commit", (*self._take_audio(), self.speech_item, follow))
        if not speaking:  # keep only the padding that goes before speech
            self.audio.keep_last(self.vad.prefix_padding_ms)
        return effects

    # The lifecycle ---------------------------------------------------------------------------------
    def _happen(self, happening: str, payload: object = None) -> list[Effect]:
        row = LIFECYCLE.get((self.state, happening))
        if row is None:
            message, code = REFUSALS[happening]
            raise BadEvent(message, code)
        action, self.state = row
        return getattr(self, "_" + action)(happening, payload)

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

    def _transcribe(self, happening: str, payload: tuple) -> list[Effect]:
        audio, generation, draft, item_id, follow = payload
        self.respond_after_transcript = follow
        if self.drafting == generation and len(audio) - self.drafting_covered <= DRAFT_STEP_BYTES:
            # A draft of nearly all of it is running: waiting for it may save the whole decode.
            self.waiting_for_draft = (audio, item_id, draft, generation)
            return []
        return [Transcribe(audio, item_id, draft)]

    def _respond(self, happening: str, response: AskedResponse) -> list[Effect]:
        self.response = response
        return [Respond(response)]

    def _cancel(self, happening: str, payload: object) -> list[Effect]:
        return [Cancel(self.response)]

    def _add_item(self, happening: str, effect: AddItem) -> list[Effect]:
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
        detection_given = audio_input is not None and "turn_detection" in audio_input.model_fields_set
        vad = options.turn_detection(audio_input.turn_detection) if detection_given else self.vad
        tools = options.function_tools(update.tools, "session.tools") if update.tools is not None else self.tools
        choice = (options.tool_choice(update.tool_choice, "session.tool_choice")
                  if update.tool_choice is not None else self.tool_choice)
        self.modalities, self.speed, self.tools, self.tool_choice = modalities, speed, tools, choice
        if detection_given:
            self.vad = vad
            self.audio.clear()
            self._next_generation()
        effects: list[Effect] = []
        if update.instructions is not None:
            self.instructions = update.instructions
            effects.append(SaveInstructions(update.instructions))
        # Voice names and transcription options are not settable: one voice, one whisper model.
        return effects + [Send(events.event("session.updated", session=self._session()))]

    def _on_response_create(self, event) -> list[Effect]:
        return self._happen("response.create", self._new_response(event.response))

    def _on_response_cancel(self, event) -> list[Effect]:
        return self._happen("response.cancel")

    def _append_audio(self, decoded: bytes) -> list[Effect]:
        try:
            chunk = self.audio.append(decoded)
        except AudioError as error:
            raise BadEvent(str(error), "invalid_audio", "audio") from None
        if self.vad is not None:
            return [DetectSpeech(chunk, self.vad)]
        held = len(self.audio.data)
        if self.drafting is None and held <= DRAFT_MAX_BYTES and held - (
                self.draft.covered if self.draft else 0) >= DRAFT_STEP_BYTES:
            self.drafting, self.drafting_covered = self.generation, held
            return [TranscribeDraft(bytes(self.audio.data), self.generation, self.draft)]
        return []

    def _on_input_audio_buffer_commit(self, event) -> list[Effect]:
        if len(self.audio.data) < MIN_COMMIT_BYTES:
            held = len(self.audio.take()) // BYTES_PER_MS
            self._next_generation()
            raise BadEvent(f"the input audio buffer holds {held} ms of audio; commit at least 100 ms",
                           "input_audio_buffer_commit_empty")
        return self._happen("commit", (*self._take_audio(), new_id("item"), None))

    def _on_input_audio_buffer_clear(self, event) -> list[Effect]:
        self.audio.clear()
        self._next_generation()
        return [Send(events.event("input_audio_buffer.cleared"))]

    def _take_audio(self) -> tuple[bytes, int, Draft | None]:
        """The buffer's audio, its generation and its draft; the buffer starts again, empty."""
        taken = (self.audio.take(), self.generation, self.draft)
        self._next_generation()
        return taken

    def _next_generation(self) -> None:
        self.generation += 1
        self.draft = None

    def _on_output_audio_buffer_clear(self, event) -> list[Effect]:
        raise BadEvent("output_audio_buffer.clear is for WebRTC connections; over a websocket the client holds "
                       "the audio: cancel the response and truncate the item", "unsupported_event", "type")

    def _on_conversation_item_create(self, event) -> list[Effect]:
        message = options.chat_message(event.item, self.max_text_chars)
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
    def _new_response(self, asked) -> AskedResponse:
        """A response from `response.create`'s options (None: the session's defaults)."""
        modalities, tools, choice = self.modalities, self.tools, self.tool_choice
        instructions = max_tokens = metadata = None
        if asked is not None:
            if asked.conversation not in (None, "auto") or asked.input is not None:
                raise BadEvent("out-of-band responses (conversation or input) are not supported", "invalid_value",
                               "response.conversation" if asked.conversation not in (None, "auto")
                               else "response.input")
            if asked.output_modalities is not None:
                modalities = options.modalities(asked.output_modalities, "response.output_modalities")
            if asked.tools is not None:
                tools = options.function_tools(asked.tools, "response.tools")
            if asked.tool_choice is not None:
                choice = options.tool_choice(asked.tool_choice, "response.tool_choice")
            instructions, metadata = asked.instructions, asked.metadata
            max_tokens = options.max_output_tokens(asked.max_output_tokens)
        return AskedResponse(new_id("resp"), new_id("item"), modalities, instructions, max_tokens, tools, choice,
                        metadata, self.speed)

    def _session(self) -> dict:
        session = events.session(self.session_id, self.instructions, self.modalities, self.speed, self.voice,
                                 self.vad.as_event() if self.vad else None)
        session["tools"] = [{"type": "function", **tool["function"]} for tool in self.tools]
        session["tool_choice"] = self.tool_choice
        return session
