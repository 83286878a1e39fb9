"""One turn's figures: a single record that every part of a turn writes its own figures into.

A `TurnFigures` is made by whoever starts the turn's clock (a spoken turn's at its commit, others
with the `TurnRequest`) and passed down. Each figure has one writer: the transcription
(voice.realtime.transcription) writes `stt_ms` and `stt_draft`; the turn engine the queue,
research, fit and model figures and `ttft_ms`; the speaker (voice.speech.speaker)
`first_audio_ms`; whoever stores the reply (a Realtime response once its last text or audio is
sent, else the engine) `total_ms` and `status`. The same record is stored with the reply,
sent in `response.done`, and served by `GET /v1/figures`, so all three agree.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass, field

from fitting import FitResult
from models.reply import ReplyStats


def ms(seconds: float) -> int:
    return round(seconds * 1000)


@dataclass
class TurnFigures:
    """A turn's figures; a figure that was not measured in this turn is None and is left out of
    `as_json`. Times are milliseconds from `started` unless named otherwise."""

    session_id: str = ""
    started: float = field(default_factory=time.perf_counter, repr=False)  # perf_counter seconds
    # the transcription (spoken turns)
    stt_ms: int | None = None  # commit to transcript
    stt_draft: bool | None = None  # the draft made while the key was held was the transcript
    # the turn engine
    queue_ms: int | None = None  # waiting for the model
    research_ms: int | None = None
    research_tokens: int | None = None  # this question's research exchange as stored (its call with the query)
    # prefills made while the key was held (voice.turns.preemption): whether this turn's question
    # was the last draft's words, the tokens the drafts' prefills evaluated before the commit, and
    # those of the batch under way at the commit, which the turn waited for (work after release, like
    # `evaluated_tokens`)
    preempted: bool | None = None
    preempted_tokens: int | None = None
    preempted_late_tokens: int | None = None
    fit_ms: int | None = None
    summarized_ms: int | None = None  # summarizing exchanges the fit had to remove, inside the turn
    prompt_tokens_fitted: int | None = None
    removed: int | None = None
    fit_steps: str | None = None
    summary: bool | None = None
    dropped: int | None = None  # messages that left the prompt with no summary holding them
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    evaluated_tokens: int | None = None
    shifted_tokens: int | None = None
    # evidence evaluated apart from the history (models.llm): of the cached tokens, those placed
    # after the history (at the reply or while the key was held); the tokens evaluated apart for
    # them after release; the time both took after release
    placed_tokens: int | None = None
    apart_tokens: int | None = None
    placing_ms: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    tool_calls: int | None = None  # the client's functions the reply called
    ttft_ms: int | None = None  # the reply's first text
    # the speaker (spoken replies)
    first_audio_ms: int | None = None
    # whoever ends the response
    total_ms: int | None = None
    status: str | None = None  # "complete" or "interrupted"

    def since_start(self) -> int:
        """Milliseconds from the turn's start to now."""
        return ms(time.perf_counter() - self.started)

    def fitted(self, result: FitResult) -> None:
        """The fit's figures: what it kept, what it took out, and how."""
        stages = Counter(step.stage for step in result.steps)
        self.prompt_tokens_fitted, self.removed = result.prompt_tokens, len(result.removed)
        self.fit_steps = ",".join(f"{stage}:{n}" for stage, n in stages.items())
        self.summary, self.dropped = bool(result.summary), result.dropped

    def generated(self, stats: ReplyStats) -> None:
        """The model's figures for the reply: its prompt, the cache reused, what it wrote. A turn
        that asked the model twice (a search, a call asked again) evaluated what both evaluated."""
        self.prompt_tokens, self.cached_tokens = stats.prompt_tokens, stats.cached_tokens
        self.evaluated_tokens = (self.evaluated_tokens or 0) + stats.evaluated_tokens
        self.shifted_tokens = (self.shifted_tokens or 0) + stats.shifted_tokens
        if stats.placed_tokens or stats.apart_tokens:
            self.placed_tokens, self.apart_tokens = stats.placed_tokens, stats.apart_tokens
            self.placing_ms = stats.placing_ms
        self.completion_tokens, self.finish_reason = stats.completion_tokens, stats.finish_reason

    def end(self, status: str) -> None:
        self.status, self.total_ms = status, self.since_start()

    def as_json(self) -> dict:
        """The measured figures by name, as stored, sent and served."""
        return {name: value for name, value in asdict(self).items() if value is not None and name != "started"}
