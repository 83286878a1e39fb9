"""The staged fit (ADR 0140, amended by ADR 0141).

When the prompt does not fit, earlier history goes a piece at a time, re-measuring after each:
1. earlier turns' tool exchanges, oldest first;
2. then whole earlier exchanges, oldest first, summarized into the system message rather than
   dropped when a generator is given (dropping is the fallback);
3. then the current turn's oversized input or evidence is condensed by section analysis, and cut
   as the last resort.
The system prompt and the current question always stay. Each message is measured once.

For speed on a local model, `previous` (last turn's `removed`) keeps earlier removals in place and
`low_water` sets how far to remove once more must go, so that the next turns only append to a
prompt whose prefix llama.cpp has cached. With the defaults `fit` is exactly the decision record.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from http import HTTPStatus

from fitting.errors import ParlourError
from fitting.measure import Counter, Measure, estimate
from fitting.messages import Entry, Exchange, Message, assemble, pieces, repair
from fitting.sections import WorkerFailed, condense, cut
from fitting.summary import (
    SUMMARY_TOKENS,
    Generate,
    Summary,
    chunk_messages,
    summarize,
    summary_room,
    with_summary,
    words_within,
)

CONDENSE_PASSES = 2  # section analysis of the current turn: notes on notes at most once


class FitError(ParlourError, ValueError):
    """Nothing can make the prompt fit: the system prompt alone is over the budget, or no question."""

    code, status = "cannot_respond", HTTPStatus.BAD_REQUEST


@dataclass
class Step:
    stage: str  # repair, previous, research, exchange, summary, condense, cut
    removed: list[int]  # input indices this step took out of the prompt (or condensed)
    prompt_tokens: int  # the prompt's size after the step
    detail: str = ""


@dataclass
class FitResult:
    messages: list[Message]
    prompt_tokens: int
    budget: int
    steps: list[Step] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)  # pass as `previous` on the next turn
    summary: Summary | None = None  # pass as `summary` on the next turn
    measure_calls: int = 0
    message_tokens: dict[int, int] = field(default_factory=dict)  # input index -> tokens as measured
    history_end: int = 0  # one past the last input index of the newest exchange no longer in the prompt

    @property
    def dropped(self) -> int:
        """How many messages this fit took out of the prompt with no summary in the prompt holding
        them (a summary too large for the room the current turn leaves is stored but not attached)."""
        return sum(len(s.removed) for s in self.steps
                   if s.stage == "exchange" and (s.detail == "dropped" or self.summary is None))

    def to_json(self) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "budget": self.budget,
            "messages": self.messages,
            "steps": [asdict(step) for step in self.steps],
            "removed": self.removed,
            "summary": self.summary.to_json() if self.summary else None,
            "measure_calls": self.measure_calls,
        }


class _Fitting:
    """The working state of one fit: entries, their derived total and the steps taken."""

    def __init__(self, entries: list[Entry], counter: Counter):
        self.entries = entries
        self.counter = counter
        self.total = counter.total(entries)
        self.steps: list[Step] = []

    def remove(self, positions: Iterable[int], stage: str, detail: str = "") -> None:
        origins: list[int] = []
        for position in positions:
            entry = self.entries[position]
            if not entry.removed:
                entry.removed = True
                self.total -= entry.tokens
                origins.extend(entry.origin)
        if origins:
            self.steps.append(Step(stage, sorted(origins), self.total, detail))

    def replace(self, position: int, message: Message) -> int:
        """Give an entry new content and re-measure it; returns the tokens saved."""
        entry = self.entries[position]
        before = entry.tokens
        entry.message = message
        entry.tokens = self.counter.message(message)
        self.total += entry.tokens - before
        return before - entry.tokens

    def cost(self, exchange: Exchange) -> int:
        return sum(self.entries[p].tokens for p in exchange.entries if not self.entries[p].removed)

    def origins(self, exchanges: list[Exchange]) -> list[int]:
        return [i for ex in exchanges for p in ex.entries for i in self.entries[p].origin]


def fit(
    messages: list[Message],
    budget: int,
    measure: Measure = estimate,
    generate: Generate | None = None,
    *,
    previous: Iterable[int] = (),
    summary: Summary | None = None,
    low_water: int | None = None,
    summary_tokens: int = SUMMARY_TOKENS,
    condense_with: Generate | None = None,
) -> FitResult:
    """Fit `messages` (the next model turn's input) into `budget` tokens; see the module docstring.
    `generate` writes summaries and section notes; `condense_with`, if given, writes the section
    notes instead (a service that summarizes in the background passes only this)."""
    if budget <= 0:
        raise FitError(f"the budget must be positive, got {budget}")
    summary_tokens = summary_room(budget, summary_tokens)
    entries, dropped = repair(messages)
    try:
        parts = pieces(entries)
    except ValueError as error:
        raise FitError(str(error)) from None
    counter = Counter(measure)
    counter.entries(entries)
    state = _Fitting(entries, counter)
    if dropped:
        state.steps.append(Step("repair", dropped, state.total,
                                "orphaned tool messages or text before the first question"))

    _keep_previous(state, parts.history, set(previous))
    target = min(low_water, budget) if low_water and state.total > budget else budget

    # 1. Earlier turns' research, oldest first, only as much as must go.
    for exchange in parts.history:
        for tool in exchange.tools:
            if state.total <= target:
                break
            state.remove(tool.entries, "research")

    # 2. Whole earlier exchanges, oldest first, summarized where possible. Conversation goes only
    # when the budget demands it; then down to the low-water mark, so the next turns only append.
    base_system = entries[parts.head].message if parts.head is not None else None
    if state.total <= budget:
        target = budget
    # A stored summary that is reused gets its room with the exchanges: attached without it, it
    # could be taken off again at once, and each change of the system message is a full re-prefill.
    reuse_room = _summary_room(state, parts.head, base_system, summary, summary_tokens) if summary else 0
    kept_summary = _fit_exchanges(state, parts.history, target, generate, summary, summary_tokens, budget,
                                  reuse_room)
    head_tokens = 0
    if kept_summary is not None:
        head_tokens = _attach_summary(state, parts.head, base_system, kept_summary, summary_tokens)
        if head_tokens < 0:
            kept_summary = None

    # History goes before any section worker starts: the summary too.
    if state.total > budget and kept_summary is not None:
        _detach_summary(state, parts.head, base_system, head_tokens)
        kept_summary = None

    # 3. The current turn's oversized input or evidence.
    if state.total > budget:
        _condense_current(state, parts.current, budget, condense_with or generate)
    if state.total > budget:
        _cut_current(state, parts.current, budget)
    if state.total > budget:
        raise FitError(
            f"the system prompt and the question's framing alone take {state.total} tokens,"
            f" over the budget of {budget}"
        )

    prompt = assemble(entries)
    if kept_summary is not None and parts.head is None:
        prompt.insert(0, with_summary(None, kept_summary.text))
    removed = sorted({i for e in entries if e.removed for i in e.origin} | set(dropped))
    tokens = {e.origin[0]: e.tokens for e in entries}
    gone = [ex for ex in parts.history if all(entries[p].removed for p in ex.entries)]
    history_end = max(state.origins(gone)) + 1 if gone else 0
    return FitResult(prompt, state.total, budget, state.steps, removed, kept_summary, counter.calls, tokens,
                     history_end)


def _keep_previous(state: _Fitting, history: list[Exchange], previous: set[int]) -> None:
    """Remove again what the previous turn removed, so the prompt's prefix stays as it was."""
    if not previous:
        return
    positions: list[int] = []
    for exchange in history:
        if state.entries[exchange.entries[0]].origin[0] in previous:
            positions.extend(exchange.entries)
            continue
        for tool in exchange.tools:
            if state.entries[tool.entries[0]].origin[0] in previous:
                positions.extend(tool.entries)
    state.remove(positions, "previous", "kept last turn's removals")


def _covered(state: _Fitting, history: list[Exchange], summary: Summary | None) -> int:
    """How many leading exchanges `summary` covers (0 if none or if it does not start the history)."""
    if summary is None:
        return 0
    count = 0
    for exchange in history:
        if not summary.covers(tuple(state.origins([exchange]))):
            break
        count += 1
    return count


def _fit_exchanges(
    state: _Fitting, history: list[Exchange], target: int, generate: Generate | None,
    given: Summary | None, summary_tokens: int, budget: int, reuse_room: int = 0,
) -> Summary | None:
    """Stage 2: remove the oldest exchanges until the prompt fits; returns the summary to attach."""
    gone = 0
    while gone < len(history) and state.cost(history[gone]) == 0:
        gone += 1  # exchanges the previous turn removed already
    covered = _covered(state, history, given)
    costs = [state.cost(exchange) for exchange in history]

    def needed(reserve: int, at_least: int) -> int:
        k, total = at_least, state.total - sum(costs[gone:at_least])
        while k < len(history) and total + reserve > target:
            total -= costs[k]
            k += 1
        return k

    if state.total <= target and gone == 0:
        return None
    plans: list[tuple[int, str]] = []  # (exchanges removed, how the summary is made)
    if generate is not None:
        plans.append((needed(summary_tokens, max(gone, 1 if state.total > target else 0)), "generate"))
    if covered:
        plans.append((needed(reuse_room, max(gone, covered)), "reuse"))
    plans.append((needed(0, gone), "drop"))

    for k, how in plans:
        if k == 0:
            continue
        made: Summary | None = None
        if given is not None and covered and (how == "reuse" or (how == "generate" and covered == k)):
            made, k = given, max(k, covered)  # the stored summary; anything newer is dropped
        elif how == "generate" and generate is not None:  # planned only with a generator
            start = covered if 0 < covered <= k else 0
            chunks = _chunks(state, history[start:k], max(1, budget // 2))
            earlier = given.text if start and given is not None else ""
            text = summarize(chunks, generate, words=words_within(summary_tokens), earlier=earlier)
            if text is None:
                continue
            origins = state.origins(history[:k])
            made = Summary(min(origins), max(origins) + 1, text)
        for exchange in history[gone:k]:
            summarized = made is not None and made.covers(tuple(state.origins([exchange])))
            state.remove(exchange.entries, "exchange", "summarized" if summarized else "dropped")
        return made
    return None


def _chunks(state: _Fitting, exchanges: list[Exchange], limit: int) -> list[list[Message]]:
    sized = [(state.entries[p].message, state.entries[p].tokens) for ex in exchanges for p in ex.entries]
    return chunk_messages(sized, limit)


def _attach_summary(
    state: _Fitting, head: int | None, base: Message | None, summary: Summary, summary_tokens: int
) -> int:
    """Put the summary in the system message, bounded to `summary_tokens`; -1 if it cannot be."""
    text = summary.text
    for _ in range(3):
        message = with_summary(base, text)
        if head is not None:
            extra = state.counter.message(message) - state.entries[head].tokens
        else:
            extra = state.counter.message(message)
        if extra <= summary_tokens:
            if head is not None:
                state.replace(head, message)
            else:
                state.total += extra
            state.steps.append(Step("summary", [], state.total, f"covers input {summary.start}..{summary.end - 1}"))
            return extra
        text = cut(text, summary_tokens / extra * 0.9)
    return -1


def _summary_room(state: _Fitting, head: int | None, base: Message | None, summary: Summary,
                  summary_tokens: int) -> int:
    """What attaching `summary` adds to the prompt, at most `summary_tokens` (it is cut to fit that)."""
    message = with_summary(base, summary.text)
    extra = state.counter.message(message) - (state.entries[head].tokens if head is not None else 0)
    return min(max(0, extra), summary_tokens)


def _detach_summary(state: _Fitting, head: int | None, base: Message | None, extra: int) -> None:
    if head is not None and base is not None:
        state.replace(head, base)
    else:
        state.total -= extra
    state.steps.append(Step("summary", [], state.total, "removed: the current turn alone needs the room"))


def _current_positions(state: _Fitting, current: Exchange) -> list[int]:
    return [p for p in current.entries if not state.entries[p].removed]


def _condense_current(
    state: _Fitting, current: Exchange, budget: int, generate: Generate | None,
) -> None:
    """Section analysis over the current turn's largest texts, at most `CONDENSE_PASSES` passes."""
    if generate is None:
        return
    limit = max(64, budget // 4)  # a text's notes: a quarter of the budget
    question = " ".join(
        state.entries[p].message.get("content") or "" for p in current.entries
        if state.entries[p].message.get("role") == "user"
    )
    question = cut(question, min(1.0, (limit // 2 * 3) / max(1, len(question))), keep="tail")
    for depth in range(CONDENSE_PASSES):
        for position in sorted(_current_positions(state, current), key=lambda p: -state.entries[p].tokens):
            if state.total <= budget:
                return
            entry = state.entries[position]
            text = entry.message.get("content") or ""
            if entry.tokens <= limit // 2 or not text:
                continue
            try:
                notes = condense(text, question, generate, limit, state.counter.text)
            except WorkerFailed as error:
                state.steps.append(Step("condense", list(entry.origin), state.total, f"worker failed: {error}"))
                return
            if entry.message.get("role") == "user":
                notes = f"[condensed from a long message]\n{notes}"
            state.replace(position, {**entry.message, "content": notes})
            state.steps.append(Step("condense", list(entry.origin), state.total, f"pass {depth + 1}"))


def _cut_current(state: _Fitting, current: Exchange, budget: int) -> None:
    """Shorten the current turn's largest texts until the prompt fits; the question keeps its end."""
    for _ in range(4 * len(current.entries) + 4):
        if state.total <= budget:
            return
        candidates = [p for p in _current_positions(state, current) if state.entries[p].message.get("content")]
        if not candidates:
            return
        position = max(candidates, key=lambda p: state.entries[p].tokens)
        entry = state.entries[position]
        over = state.total - budget
        share = max(0.0, (entry.tokens - over) / max(1, entry.tokens) * 0.95)
        keep = "tail" if entry.message.get("role") == "user" else "head"
        text = cut(entry.message["content"], share, keep=keep) if share > 0.02 else ""
        state.replace(position, {**entry.message, "content": text})
        state.steps.append(Step("cut", list(entry.origin), state.total))
