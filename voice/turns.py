"""The turn engine both front ends share: research, fit, generate, store.

One model serves every connection: turns wait in a fair (first come, first served) queue, and a
turn that would wait behind `max_queue` others is refused with `ServerBusy`. A turn:
1. researches the question under the research policy and stores the tool exchange;
2. fits the session's transcript with the fitting core, measured by the model's own tokenizer,
   keeping the previous turn's removals and a low-water mark so the prompt's prefix (and
   llama.cpp's cache of it) stays stable from turn to turn;
3. streams the reply, stored sentence by sentence as it goes (`in_progress`); a cancelled reply is
   stored as `interrupted` with the text delivered.
Summaries (ADR 0141) are made ahead, off the path of the next reply: after a turn whose prompt is
within `margin` of the budget, the exchanges the next turns will have to remove are summarized in the
background and stored. A turn that must remove exchanges no summary holds yet summarizes them
first (`summarized_ms`); only if that fails are they dropped, and the turn's `dropped` figure
counts the messages lost. A turn that comes while a summary is being written waits for it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from fitting import FitError, FitResult, Summary, fit
from fitting.summary import chunk_messages, summarize
from models.model import Model
from models.tool_calls import CallScanner
from voice.chat.thread import without_earlier_commands
from voice.figures import TurnFigures, ms
from voice.reply_row import ReplyRow
from voice.model_queue import ModelQueue, in_worker
from voice.research import DESCRIBED, SEARCH_TOOL, Research, tool_instructions
from voice.store import SessionStore, StoredMessage, new_id

SUMMARY_WORDS = 120
SUMMARY_REPLY_TOKENS = 200
SECTION_NOTE_TOKENS = 160  # a section worker's notes on one section of an oversized input
HEARING_S = 1.0  # how long background work stays stopped after a client was last heard speaking


class ServerBusy(Exception):
    """Too many turns are already waiting for the model."""


@dataclass
class TurnEvent:
    """"research": messages were stored; "delta": reply text; "calls": the reply called the client's
    functions (stored, the turn ends and the client answers them); "done": the reply is stored,
    and `figures` are the turn's."""

    kind: str
    text: str = ""
    stored: list[StoredMessage] = field(default_factory=list)
    figures: TurnFigures | None = None
    calls: list[dict] = field(default_factory=list)


class TurnEngine:
    def __init__(self, llm: Model, store: SessionStore, research: Research,
                 context: int, reply_tokens: int = 256, max_queue: int = 8, temperature: float = 0.2,
                 max_inflight: int = 1):
        self.llm, self.store, self.research = llm, store, research
        self.budget = context - reply_tokens
        if self.budget <= 0:
            raise ValueError(f"reply_tokens ({reply_tokens}) leaves no room in a {context}-token context")
        # A model that shifts its cache past a removed piece pays only for what is new, so fitting
        # removes only what must go (ADR 0140). Otherwise a removal re-evaluates everything after
        # the first removed piece, and history goes down to half the budget at once, which makes
        # those re-prefills rare (a 4,700-token one cost about 24 s here).
        self.low_water = None if llm.kv_shift else self.budget // 2
        self.reply_tokens, self.max_queue, self.temperature = reply_tokens, max_queue, temperature
        self._model = ModelQueue(max_inflight)
        self._waiting = 0
        self._background: set[asyncio.Task] = set()
        self._heard_at = float("-inf")
        self.recent: list[TurnFigures] = []  # the last turns' figures, newest last (GET /v1/figures)

    # The model's queue ------------------------------------------------------------------------
    async def _acquire(self, session_id: str) -> tuple[list[dict], float]:
        """A place in the queue, taken before anything is awaited (so turns queue in the order they
        arrive), then the session's transcript, then the model. Returns the transcript and the wait."""
        if self._waiting >= self.max_queue:
            raise ServerBusy(f"{self._waiting} turns are already waiting for the model")
        self._waiting += 1
        try:
            transcript = await asyncio.to_thread(self.store.transcript, session_id)
            started = time.perf_counter()
            await self._model.acquire()
        finally:
            self._waiting -= 1
        return transcript, time.perf_counter() - started

    # A turn ----------------------------------------------------------------------------------
    async def respond(self, session_id: str, cancel: threading.Event, instructions: str | None = None,
                      max_tokens: int | None = None, item_id: str | None = None, row: ReplyRow | None = None,
                      tools: list[dict] | None = None, tool_choice: str | dict | None = None,
                      spoken: bool = False, temperature: float | None = None,
                      earlier_calls: bool = True, context: int | None = None,
                      figures: TurnFigures | None = None) -> AsyncIterator[TurnEvent]:
        """Answer the session's last question (or the client's function results, or, with neither,
        the instructions and the conversation so far: a greeting), yielding research, text deltas,
        the client's function calls and finally `done`.

        `tools` are the client's functions (OpenAI chat tool specs), offered beside `search` under
        `tool_choice` ("auto", "none", "required" or {"type": "function", "name": ...}). A `spoken`
        turn's research is cut to the sentences that bear on the question (voice.research).

        `temperature` is the client's, else the service's. Without `earlier_calls`, earlier
        exchanges that called the client's functions leave the prompt (voice.chat.thread.without_earlier_commands).
        A client's `context` smaller than the service's (Ollama's `num_ctx`) is what the prompt and
        the reply are fitted into.

        `cancel` may be set from anywhere; the reply stops and is stored as interrupted with the
        text yielded so far. The reply is stored as it streams (voice.reply_row): by the engine,
        sentence by sentence as yielded, unless the caller passes its own `row`, which it then feeds
        and finishes itself (a spoken reply counts a sentence once its audio is sent), and then
        ends the turn's `figures` too (`TurnFigures.end`).

        `figures` is the turn's record if the caller started its clock (a spoken turn's commit); the
        engine writes its own figures into it, and `ttft_ms` is timed from its start.
        """
        figures = figures or TurnFigures()
        figures.session_id = session_id
        transcript, queue_s = await self._acquire(session_id)
        # Research looks up a new question; function results are already the evidence.
        question = transcript[-1].get("content") or "" if transcript[-1]["role"] == "user" else ""
        figures.queue_ms = ms(queue_s)
        delivered: list[str] = []
        own_row = row is None
        row = row or ReplyRow(self.store, session_id, item_id or new_id("item"))
        stored_reply = None
        try:
            research_started = time.perf_counter()
            exchange = await asyncio.to_thread(self.research.for_question, question, spoken,
                                               session_id) if question else []
            if exchange:
                yield TurnEvent("research", stored=await row.insert_before(exchange))
            figures.research_ms = ms(time.perf_counter() - research_started)

            async for event in self._generate(session_id, cancel, instructions, max_tokens, figures, row,
                                              tools or [], tool_choice, question if spoken else None,
                                              self.temperature if temperature is None else temperature,
                                              earlier_calls, context):
                if event.kind == "calls":
                    message = {"role": "assistant", "content": None, "tool_calls": event.calls}
                    event.stored = [await asyncio.to_thread(self.store.append, session_id, message)]
                    figures.tool_calls = len(event.calls)
                    yield event
                    continue
                if event.kind == "delta":
                    if not delivered:
                        figures.ttft_ms = figures.since_start()
                        await row.open()
                    delivered.append(event.text)
                yield event
                if event.kind == "delta" and own_row:
                    await row.feed(event.text)  # after the yield: the text has been sent
            interrupted = cancel.is_set() or figures.finish_reason == "cancelled"
            figures.status = "interrupted" if interrupted else "complete"
            if own_row:
                figures.end(figures.status)
                if delivered or not figures.tool_calls:  # a reply that only calls stores no text
                    stored_reply = await row.finish("".join(delivered), figures.status, figures.as_json())
        except BaseException:
            if own_row and stored_reply is None and delivered:  # failed or stopped from outside: keep what was sent
                figures.end("interrupted")
                await row.finish("".join(delivered), "interrupted", figures.as_json())
            raise
        finally:
            self._model.release()
        self.recent = (self.recent + [figures])[-20:]  # the record itself: a speaker adds its figures after
        if self.llm.approximate:  # a shift's cache, read by this reply: make it exact for the next
            self.warm(session_id, exact=True)
        yield TurnEvent("done", stored=[stored_reply] if stored_reply else [], figures=figures)
        self._in_background(self._summarize_ahead(session_id))

    async def _generate(self, session_id, cancel, instructions, max_tokens, figures: TurnFigures,
                        row: ReplyRow, tools: list[dict], tool_choice,
                        spoken_question: str | None, temperature: float,
                        earlier_calls: bool = True, context: int | None = None) -> AsyncIterator[TurnEvent]:
        """Fit and stream. Under the `model` policy a reply that calls `search` runs it, then answers;
        a reply that calls one of the client's `tools` ends the turn with those calls."""
        unused = ""
        client = [] if tool_choice == "none" else [
            t for t in tools if not isinstance(tool_choice, dict) or t["function"]["name"] == tool_choice.get("name")]
        client_names = {t["function"]["name"] for t in client}
        for attempt in range(2):
            ask_model = self.research.policy == "model" and attempt == 0
            offered, native, described = self._declared(client)
            fit_started = time.perf_counter()
            budget = min(self.budget, context - (max_tokens or self.reply_tokens)) if context else self.budget
            if budget <= 0:
                raise FitError(f"a context of {context} tokens leaves no room for the reply")
            result, summarized_s = await asyncio.to_thread(self._fit, session_id, instructions, described, native,
                                                           spoken_question is not None, budget)
            figures.fit_ms = (figures.fit_ms or 0) + ms(time.perf_counter() - fit_started - summarized_s)
            figures.summarized_ms = (figures.summarized_ms or 0) + ms(summarized_s)
            figures.fitted(result)
            # After the results, the reply may not open with a call: small models repeat theirs. A
            # client's `required` or named tool_choice makes the first attempt open with one.
            # (Rendering and tokenizing the prompt is blocking work too: a worker thread does it.)
            must_call = attempt == 0 and bool(client) and tool_choice not in (None, "auto", "none")
            # Right after function results the reply answers from them: the 1.5B otherwise often
            # called the same function again.
            after_results = result.messages[-1]["role"] == "tool"
            prompt = result.messages if earlier_calls or not client else without_earlier_commands(result.messages, {SEARCH_TOOL["function"]["name"]})
            reply = await asyncio.to_thread(
                self.llm.stream, prompt, max_tokens or self.reply_tokens, temperature, native,
                open_with_call=attempt == 0 and not after_results, not_like=unused, must_call=must_call)
            # With tools offered, anything that may begin a call is held back rather than spoken;
            # on the second attempt a search is not run again, only kept out of the reply.
            names = [t["function"]["name"] for t in offered]
            scanner = CallScanner(names, DESCRIBED if ask_model else None) if offered else None
            async for piece in in_worker(reply):
                if cancel.is_set():
                    reply.cancel()
                    break
                if scanner is not None:
                    piece = scanner.feed(piece)
                if piece:
                    yield TurnEvent("delta", text=piece)
            figures.generated(reply.stats)
            if scanner is None or cancel.is_set():
                return
            parsed = scanner.finish()
            if calls := [c for c in parsed.calls if c["function"]["name"] in client_names]:
                if parsed.text:
                    yield TurnEvent("delta", text=parsed.text)
                yield TurnEvent("calls", calls=calls)  # the client runs them and asks again
                return
            calls = parsed.calls + parsed.unknown if ask_model else []
            if not calls:
                if parsed.text:
                    yield TurnEvent("delta", text=parsed.text)
                return
            # Only searches that found something are kept. A fruitless one, or a call to a tool that
            # does not exist, leaves the prompt as it was, and the next attempt, which may not open
            # with a call, answers from what the model knows (told "no results", the 1.5B model
            # only repeated the call or recited the message).
            exchange = await asyncio.to_thread(self.research.run, calls, True, spoken_question, session_id)
            if exchange:
                yield TurnEvent("research", stored=await row.insert_before(exchange))
            else:  # the same prompt again: the answer may not open the way this reply did
                unused = scanner.released + scanner.held

    def _declared(self, client: list[dict]) -> tuple[list[dict], list[dict] | None, str]:
        """The tools offered (`search` under the `model` policy, and the client's), and how: as a
        native declaration for templates that know tools, or as instructions for the system prompt. The
        same on every attempt of a turn, which keeps the prompt's prefix (measured on
        Qwen2.5-Coder-1.5B: adding instructions beside the native declaration made it invent tools)."""
        search = self.research.policy == "model"
        offered = ([SEARCH_TOOL] if search else []) + client
        native = offered if offered and self.llm.knows_tools else None
        return offered, native, "" if native or not offered else tool_instructions(search, client)

    # Warming, off the path of the next reply --------------------------------------------------
    def hearing(self) -> None:
        """A client is speaking. Warm-ups and refreshes stop at their next batch (a refresh puts
        the cache back as it was), so whisper has the CPU while the question is being spoken."""
        self._heard_at = time.monotonic()

    def _background_must_stop(self) -> bool:
        return self._model.turns_waiting() or time.monotonic() - self._heard_at < HEARING_S

    def warm(self, session_id: str | None = None, instructions: str = "", exact: bool = False) -> None:
        """Evaluate the prompt the next turn will start with, in the background: a new session's
        system prompt (`instructions`), or a resumed session's history, fitted as a turn would fit
        it. It waits behind turns and stops as soon as one waits or a client speaks, so a turn
        never waits for it; the turn that follows then pays only for itself. With `exact`, what a
        KV shift kept is evaluated again, so the shift's approximation lasts until the model has
        been idle long enough to redo it. Only a model in this process is warmed."""
        if self.llm.warms:
            self._in_background(self._warm(session_id, instructions, exact))

    async def _warm(self, session_id: str | None, instructions: str, exact: bool = False) -> None:
        await self._model.acquire(background=True)
        try:
            await asyncio.to_thread(self._warm_now, session_id, instructions, exact)
        except FitError:
            pass  # nothing to warm (a system prompt over the budget is said when a turn comes)
        except Exception:  # a warm-up only saves time: the turn will say what is wrong
            logging.getLogger("parlour").exception("warming the prompt failed")
        finally:
            self._model.release()

    def _warm_now(self, session_id: str | None, instructions: str, exact: bool = False) -> None:
        _offered, native, described = self._declared([])
        if session_id is None:
            transcript, removed, summary = [{"role": "system", "content": instructions}], [], None
        else:
            transcript = self.store.transcript(session_id)
            removed, summary = self.store.fit_state(session_id)
        stub = {"role": "user", "content": ""}  # the question to come: only what precedes it is evaluated
        fitted = self._fit_prompt(transcript + [stub], removed, summary, described, native, condense_with=None)
        self.llm.prefill(fitted.messages[:-1], native, stop=self._background_must_stop, exact=exact)

    def _section_notes(self, messages: list[dict]) -> str:
        """A section worker's notes (fitting stage 3), written by the model the turn already holds."""
        return self.llm.complete(messages, SECTION_NOTE_TOKENS, 0.0)

    def _fit(self, session_id: str, instructions: str | None, described: str, tools: list[dict] | None,
             spoken: bool = False, budget: int | None = None) -> tuple[FitResult, float]:
        """The turn's prompt, and the seconds spent summarizing for it. A text turn whose own input
        or evidence is over the budget has it condensed by section analysis; a spoken one is cut
        instead, since its evidence was already sized for speech and the listener should not wait
        for worker generations. Exchanges that must leave and that no summary holds are summarized
        first, with the model the turn holds: the conversation stays (ADR 0141)."""
        def fitted() -> FitResult:
            transcript = self.store.transcript(session_id)
            if instructions is not None:
                transcript[0] = {"role": "system", "content": instructions}
            removed, summary = self.store.fit_state(session_id)
            return self._fit_prompt(transcript, removed, summary, described, tools,
                                    condense_with=None if spoken else self._section_notes, budget=budget)

        result, summarized_s = fitted(), 0.0
        if result.dropped:
            started = time.perf_counter()
            if self._summarize_now(session_id, result.history_end):
                result = fitted()
            summarized_s = time.perf_counter() - started
        self.store.save_removed(session_id, result.removed)
        return result, summarized_s

    def _fit_prompt(self, transcript: list[dict], removed: list[int], summary: Summary | None, described: str,
                    tools: list[dict] | None, condense_with, budget: int | None = None) -> FitResult:
        """Fit a transcript as a turn does: tools described in the system prompt or declared
        (their tokens off the budget), last turn's removals kept, and the low-water mark if any."""
        if described:
            transcript[0] = {"role": "system", "content": f"{transcript[0].get('content') or ''}\n\n{described}"}
        tools_tokens = self.llm.tools_tokens(tools)
        budget = budget or self.budget
        if not any(m["role"] == "user" for m in transcript):
            # Nothing asked yet (a greeting): the instructions and whatever the conversation holds.
            tokens = self.llm.measure(transcript)
            if tokens > budget - tools_tokens:
                raise FitError(f"the instructions ({tokens} tokens) are over the budget ({budget - tools_tokens})")
            return FitResult(list(transcript), tokens, budget - tools_tokens)
        low_water = None if self.low_water is None else budget // 2
        return fit(transcript, budget - tools_tokens, self.llm.measure, previous=removed, summary=summary,
                   low_water=low_water - tools_tokens if low_water else None, condense_with=condense_with)

    # Summaries, off the path of the next reply -------------------------------------------------
    def _in_background(self, coroutine) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _summarize_ahead(self, session_id: str) -> None:
        """Summarize, before they must go, the exchanges the next turns will remove: those a fit
        `margin` below the budget removes. Waits behind turns; a turn that comes meanwhile waits
        for it (it is short: only the exchanges about to leave)."""
        await self._model.acquire(background=True)
        try:
            await asyncio.to_thread(self._summarize_ahead_now, session_id)
        except Exception:  # the turn that needs the summary makes it, or says what was dropped
            logging.getLogger("parlour").exception("summarizing ahead failed")
        finally:
            self._model.release()

    def _summarize_ahead_now(self, session_id: str) -> None:
        transcript = self.store.transcript(session_id)
        questions = [i for i, m in enumerate(transcript) if m["role"] == "user"]
        if not questions:
            return
        removed, summary = self.store.fit_state(session_id)
        _offered, native, described = self._declared([])
        stub = {"role": "user", "content": ""}  # the next question: the last exchange is history then
        try:
            ahead = self._fit_prompt(transcript + [stub], removed, summary, described, native, condense_with=None,
                                     budget=self.budget - self.margin(transcript[questions[-1]:]))
        except FitError:
            return
        self._summarize_now(session_id, ahead.history_end)

    def margin(self, last_exchange: list[dict]) -> int:
        """How far below the budget summaries are made ahead: room for a quarter of the budget, or
        for an exchange as large as the last one, whichever is more."""
        return max(self.budget // 4, sum(self.llm.count_message(m) for m in last_exchange))

    def _summarize_now(self, session_id: str, end: int) -> bool:
        """Summarize the transcript up to `end` (indices hold: the session only grows), adding to
        the stored summary. In a worker thread, holding the model. True if a summary up to `end`
        is stored."""
        transcript = self.store.transcript(session_id)
        _removed, summary = self.store.fit_state(session_id)
        if not end or (summary and summary.start == 1 and summary.end >= end):
            return bool(end)
        start = summary.end if summary and summary.start == 1 else 1
        earlier = summary.text if summary and summary.start == 1 else ""
        sized = [(m, self.llm.count_message(m)) for m in transcript[start:end]]
        chunks = chunk_messages(sized, self.budget // 2)
        text = summarize(chunks, lambda p: self.llm.complete(p, SUMMARY_REPLY_TOKENS), SUMMARY_WORDS, earlier)
        if text:
            self.store.save_summary(session_id, Summary(1, end, text))
        return bool(text)

    @property
    def waiting(self) -> int:
        """Turns waiting for the model."""
        return self._waiting

    @property
    def generating(self) -> int:
        """Turns and background work using the model now."""
        return self._model.holders

    async def idle(self) -> None:
        """Wait for background summaries (tests and shutdown)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
