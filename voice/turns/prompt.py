"""A turn's prompt: the session's transcript fitted into the model's budget (ADR 0140, 0141).

`TurnPrompt` is the one place the service fits a transcript, for a turn, for a warm-up and for a
summary made ahead, measured by the model's own tokenizer. It keeps the previous turn's removals
and, for a model that cannot shift its cache, a low-water mark, so the prompt's prefix (and
llama.cpp's cache of it) stays stable from turn to turn. Exchanges that must leave are summarized
first, with the model the caller holds: the conversation stays. Everything here is blocking work,
run in a worker thread while the caller holds the model.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from fitting import FitError, FitResult, Summary, fit
from fitting.summary import chunk_messages, summarize, summary_room, words_within
from models.model import Model
from voice.store.sessions import SessionStore
from voice.turns.prompt_layout import compact_calls, evidence_first
from voice.turns.tools import Offer

SECTION_NOTE_TOKENS = 160  # a section worker's notes on one section of an oversized input
QUESTION_TO_COME = {"role": "user", "content": ""}  # the next question: what precedes it is the history


class TurnPrompt:
    def __init__(self, llm: Model, store: SessionStore, context: int, reply_tokens: int):
        self.llm, self.store, self.reply_tokens = llm, store, reply_tokens
        self.budget = context - reply_tokens
        if self.budget <= 0:
            raise ValueError(f"reply_tokens ({reply_tokens}) leaves no room in a {context}-token context")
        # A model that shifts its cache past a removed piece pays only for what is new, so fitting
        # removes only what must go (ADR 0140). Otherwise a removal re-evaluates everything after
        # the first removed piece, and history goes down to half the budget at once, which makes
        # those re-prefills rare (a 4,700-token one cost about 24 s here).
        self.low_water = None if llm.kv_shift else self.budget // 2

    def budget_for(self, context: int | None, max_tokens: int | None) -> int:
        """The prompt's budget in a client's smaller `context` (Ollama's `num_ctx`), if it gave one."""
        if not context:
            return self.budget
        budget = min(self.budget, context - (max_tokens or self.reply_tokens))
        if budget <= 0:
            raise FitError(f"a context of {context} tokens leaves no room for the reply")
        return budget

    def for_turn(self, session_id: str, instructions: str | None, offer: Offer, spoken: bool,
                 budget: int) -> tuple[FitResult, float]:
        """The turn's prompt, and the seconds spent summarizing for it. A text turn whose own input
        or evidence is over the budget has it condensed by section analysis; a spoken one is cut
        instead, since its evidence was already sized for speech and the listener should not wait
        for worker generations. The removals are kept for the next turn."""
        condense_with = None if spoken else self._section_notes
        result, summarized_s = self._fit_session(session_id, instructions, offer, budget, condense_with), 0.0
        if result.dropped:
            started = time.perf_counter()
            if self.summarize(session_id, result.history_end):
                result = self._fit_session(session_id, instructions, offer, budget, condense_with)
            summarized_s = time.perf_counter() - started
        self.store.save_removed(session_id, result.removed)
        return result, summarized_s

    def before_commit(self, session_id: str, instructions: str | None, offer: Offer,
                      question: list[dict]) -> FitResult | None:
        """The prompt a spoken turn will have if its question (and research) are `question`, not
        yet stored: fitted as `for_turn` will fit it, and nothing saved. None if that turn will
        have to summarize first (it will fit again after) or cannot fit at all."""
        try:
            result = self._fit_session(session_id, instructions, offer, self.budget, None, question)
        except FitError:
            return None
        return None if result.dropped else result

    def _fit_session(self, session_id: str, instructions: str | None, offer: Offer, budget: int,
                     condense_with, unstored: Sequence[dict] = ()) -> FitResult:
        transcript = self.store.transcript(session_id) + list(unstored)
        if instructions is not None:
            transcript[0] = {"role": "system", "content": instructions}
        removed, summary = self.store.fit_state(session_id)
        return self.fit(transcript, removed, summary, offer, budget, condense_with=condense_with)

    def before_next_question(self, session_id: str | None, instructions: str, offer: Offer) -> FitResult:
        """What the next turn's prompt will start with, fitted as that turn will fit it: a new
        session's system prompt (`instructions`), or a stored session's history. Its last message
        is the question to come, which is empty."""
        removed: list[int]
        summary: Summary | None
        if session_id is None:
            transcript, removed, summary = [{"role": "system", "content": instructions}], [], None
        else:
            transcript = self.store.transcript(session_id)
            removed, summary = self.store.fit_state(session_id)
        return self.fit(transcript + [QUESTION_TO_COME], removed, summary, offer, self.budget)

    def fit(self, transcript: list[dict], removed: list[int], summary: Summary | None, offer: Offer,
            budget: int, condense_with=None) -> FitResult:
        """Fit a transcript as a turn does: `auto` searches without their query (the question before
        them, voice.turns.prompt_layout.compact_calls), tools described in the system prompt or
        declared (their tokens off the budget), last turn's removals kept, and the low-water mark if any."""
        transcript = compact_calls(transcript)
        if offer.instructions:
            transcript[0] = {"role": "system",
                             "content": f"{transcript[0].get('content') or ''}\n\n{offer.instructions}"}
        room = budget - self.llm.tools_tokens(offer.native)
        if not any(m["role"] == "user" for m in transcript):
            # Nothing asked yet (a greeting): the instructions and whatever the conversation holds.
            tokens = self.llm.measure(transcript)
            if tokens > room:
                raise FitError(f"the instructions ({tokens} tokens) are over the budget ({room})")
            return FitResult(list(transcript), tokens, room)
        low_water = None if self.low_water is None else budget // 2 - (budget - room)
        result = fit(transcript, room, self.llm.measure, previous=removed, summary=summary, low_water=low_water,
                     condense_with=condense_with)
        result.messages = evidence_first(result.messages)
        result.prompt_tokens = self.llm.measure(result.messages)
        return result

    def _section_notes(self, messages: list[dict]) -> str:
        """A section worker's notes (fitting stage 3), written by the model the turn already holds."""
        return self.llm.complete(messages, SECTION_NOTE_TOKENS, 0.0)

    # Summaries ----------------------------------------------------------------------------------
    def margin(self, last_exchange: list[dict]) -> int:
        """How far below the budget summaries are made ahead: room for a quarter of the budget, or
        for an exchange as large as the last one, whichever is more."""
        return max(self.budget // 4, sum(self.llm.count_message(m) for m in last_exchange))

    def summarize_ahead(self, session_id: str, offer: Offer) -> None:
        """Summarize, before they must go, the exchanges the next turns will remove: those a fit
        `margin` below the budget removes."""
        transcript = self.store.transcript(session_id)
        questions = [i for i, m in enumerate(transcript) if m["role"] == "user"]
        if not questions:
            return
        removed, summary = self.store.fit_state(session_id)
        try:
            ahead = self.fit(transcript + [QUESTION_TO_COME], removed, summary, offer,
                             self.budget - self.margin(transcript[questions[-1]:]))
        except FitError:
            return
        self.summarize(session_id, ahead.history_end)

    def summarize(self, session_id: str, end: int) -> bool:
        """Summarize the transcript up to `end` (indices hold: the session only grows), adding to
        the stored summary, bounded as fitting bounds the summaries it writes. True if a summary up
        to `end` is stored."""
        transcript = self.store.transcript(session_id)
        _removed, summary = self.store.fit_state(session_id)
        if not end or (summary and summary.start == 1 and summary.end >= end):
            return bool(end)
        start = summary.end if summary and summary.start == 1 else 1
        earlier = summary.text if summary and summary.start == 1 else ""
        sized = [(m, self.llm.count_message(m)) for m in transcript[start:end]]
        chunks = chunk_messages(sized, self.budget // 2)
        room = summary_room(self.budget)
        text = summarize(chunks, lambda p: self.llm.complete(p, room), words_within(room), earlier)
        if text:
            self.store.save_summary(session_id, Summary(1, end, text))
        return bool(text)
