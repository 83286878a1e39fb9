"""The turn engine every front end shares: research, fit, generate, store.

One model serves every connection: turns wait in a fair (first come, first served) queue, and a
turn that would wait behind `max_queue` others is refused with `ServerBusy`. A turn
(`respond(TurnRequest)`, yielding `voice.turns.events`):
1. researches the question under the research policy and stores the tool exchange (`Researched`);
2. fits the session's transcript (`voice.turns.prompt`): a turn that must remove exchanges no
   summary holds yet summarizes them first (`summarized_ms`); only if that fails are they dropped,
   and the turn's `dropped` figure counts the messages lost;
3. streams the reply (`Delta`), stored sentence by sentence as it is delivered (`in_progress`,
   `voice.turns.delivery`); a cancelled reply is stored as `interrupted` with the text delivered.
   Under the `model` policy a reply that calls `search` runs it and answers again; a reply that
   calls the client's functions ends the turn with them (`Calls`); one that calls tools Parlour
   runs itself (an MCP server's) runs them and answers again (`ToolsRan`), unless they wait for the
   user's approval: then they are stored unrun and the turn ends (`ApprovalAsked`);
4. ends with `Done`, and leaves the model to `voice.turns.upkeep`: summaries made ahead and warm-ups.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import AbstractContextManager
from http import HTTPStatus

from fitting import FitResult
from fitting.errors import ParlourError
from models.model import Model
from models.tool_calls import CallScanner
from models.tool_schema import fit_call, made_up
from voice.knowledge.research import SEARCH_IN_WORDS, SEARCH_TOOL, Research
from voice.store.reply_row import ReplyRow
from voice.store.sessions import SessionStore, new_id
from voice.tools.toolbox import Toolbox
from voice.turns.delivery import Delivery
from voice.turns.events import ApprovalAsked, Calls, Delta, Done, Researched, ToolsRan, TurnEvent, TurnRequest
from voice.turns.figures import TurnFigures, ms
from voice.turns.model_queue import ModelQueue, in_worker
from voice.turns.preemption import Preemptions
from voice.turns.prompt import TurnPrompt
from voice.turns.prompt_layout import without_earlier_commands
from voice.turns.tools import Offer, offer
from voice.turns.upkeep import Upkeep


class ServerBusy(ParlourError):
    """Too many turns are already waiting for the model."""

    code, status = "server_busy", HTTPStatus.SERVICE_UNAVAILABLE


class TurnEngine:
    def __init__(self, llm: Model, store: SessionStore, research: Research,
                 context: int, reply_tokens: int = 256, max_queue: int = 8, temperature: float = 0.2,
                 max_inflight: int = 1):
        self.llm, self.store, self.research = llm, store, research
        self.max_queue, self.temperature = max_queue, temperature
        self.prompt = TurnPrompt(llm, store, context, reply_tokens)
        self.queue = ModelQueue(max_inflight)
        self.toolbox: Toolbox | None = None  # the configured MCP servers' tools (use_tools)
        self.upkeep = Upkeep(llm, self.prompt, self.queue, self._offer([], None))
        self.preemptions = Preemptions(llm, self.prompt, research, self.queue)
        self._waiting = 0
        self.recent: list[TurnFigures] = []  # the last turns' figures, newest last (GET /v1/figures)

    @property
    def waiting(self) -> int:
        """Turns waiting for the model."""
        return self._waiting

    @property
    def generating(self) -> int:
        """Turns and background work using the model now."""
        return self.queue.holders

    async def _acquire(self, session_id: str) -> tuple[list[dict], float]:
        """A place in the queue, taken before anything is awaited (so turns queue in the order they
        arrive), then the session's transcript, then the model. Returns the transcript and the wait."""
        if self._waiting >= self.max_queue:
            raise ServerBusy(f"{self._waiting} turns are already waiting for the model")
        self._waiting += 1
        try:
            transcript = await asyncio.to_thread(self.store.transcript, session_id)
            started = time.perf_counter()
            await self.queue.acquire()
        finally:
            self._waiting -= 1
        return transcript, time.perf_counter() - started

    def preempt(self, request: TurnRequest, question: str, settled: bool = True) -> None:
        """A draft made while the key is held heard `question`: research it and evaluate its
        prompt ahead, the question too if the draft is `settled` (voice.turns.preemption)."""
        self.preemptions.start(request.session_id, question, request.spoken, settled, request.instructions,
                               self._offer(request.offered_tools(), self._toolbox(request)))

    def forget_guesses(self, session_id: str) -> None:
        """The session's client has gone: its drafts' guesses are dropped."""
        self.preemptions.drop(session_id)

    def hearing(self) -> None:
        """Someone is speaking: background work on the model gives way to whisper (voice.turns.upkeep)."""
        self.upkeep.hearing()

    def drafting(self) -> AbstractContextManager[None]:
        """While whisper drafts, guesses being prefilled pause (voice.turns.preemption)."""
        return self.preemptions.drafting()

    @property
    def context(self) -> int:
        """The tokens a turn's prompt and reply fit into."""
        return self.prompt.budget + self.prompt.reply_tokens

    async def idle(self) -> None:
        """Wait for background work to end: guesses being prefilled, then upkeep (tests and shutdown)."""
        await self.preemptions.idle()
        await self.upkeep.idle()

    async def close(self) -> None:
        """Shutdown: warm-ups stop where they are, and the rest of the background work ends."""
        self.upkeep.close()
        await self.idle()

    def use_tools(self, toolbox: Toolbox) -> None:
        """Offer `toolbox`'s tools on every turn whose client brings no tools of its own."""
        self.toolbox = toolbox
        self.upkeep.offer = self._offer([], toolbox)  # warm-ups keep the prompt's prefix the turns use

    @property
    def runs_tools(self) -> bool:
        """Whether turns without the client's tools are offered tools Parlour runs itself."""
        return bool(self.toolbox and self.toolbox.specs)

    def _toolbox(self, request: TurnRequest) -> Toolbox | None:
        """The tools Parlour runs itself this turn: the request's own, else the configured ones
        unless the client brings tools (Home Assistant's Ollama integration brings its own)."""
        return request.toolbox if request.toolbox is not None else None if request.tools else self.toolbox

    def _offer(self, client: list[dict], toolbox: Toolbox | None) -> Offer:
        return offer(self.research.policy == "model", client + (toolbox.specs if toolbox else []), self.llm.knows_tools,
                     toolbox.prompt if toolbox else "")

    # A turn ----------------------------------------------------------------------------------
    async def respond(self, request: TurnRequest) -> AsyncGenerator[TurnEvent, None]:
        """The turn's events, as `voice.turns.events` describes them; `Done` comes last."""
        figures = request.figures
        figures.session_id = request.session_id
        row = ReplyRow(self.store, request.session_id, request.item_id or new_id("item"))
        delivery = Delivery(row, request.voice)
        try:
            transcript, queue_s = await self._acquire(request.session_id)
            # Research looks up a new question; function results are already the evidence.
            question = transcript[-1].get("content") or "" if transcript[-1]["role"] == "user" else ""
            figures.queue_ms = ms(queue_s)
            try:
                async for event in self._turn(request, row, question):
                    if isinstance(event, Delta) and not row.opened:
                        figures.ttft_ms = figures.since_start()
                        await delivery.open()
                    yield event
                    if isinstance(event, Delta):
                        await delivery.sent(event.text)  # after the yield: the text has been sent
            finally:
                self.queue.release()
            self.recent = (self.recent + [figures])[-20:]
            stored_reply = await delivery.finish(figures, request.cancel)
            # A shift's cache or placed evidence, read by this reply: made exact for the next turn,
            # once the reply is stored whole (the history's end is where the next evidence goes).
            if self.llm.approximate:
                self.upkeep.warm(request.session_id, exact=True)
        except BaseException:
            await delivery.keep_delivered(figures)
            raise
        yield Done(figures, [stored_reply] if stored_reply else [])
        self.upkeep.summarize_ahead(request.session_id)

    async def _turn(self, request: TurnRequest, row: ReplyRow, question: str) -> AsyncIterator[TurnEvent]:
        """Research, then the reply: `Researched`, `Delta`s, `Calls` (stored here)."""
        figures, research_started = request.figures, time.perf_counter()
        # A client that brings its own tools (Home Assistant's) brings its own context: what the
        # user said in other conversations misled its device commands, so only the knowledge
        # base is searched, for a question it bears on, never for a command (Research.for_question).
        acting = bool(request.offered_tools()) or self._toolbox(request) is not None  # or an MCP server's
        exchange: list[dict] | None = None  # not researched yet
        if not question:
            exchange = []  # function results are the evidence
        elif not acting:  # the research of a draft that heard this question, if one did
            exchange = await self.preemptions.take(request.session_id, question, request.spoken, figures)
        if exchange is None:
            exchange = await asyncio.to_thread(self.research.for_question, question, request.spoken,
                                               request.session_id, acting)
        if exchange:
            yield Researched(await row.insert_before(exchange))
            figures.research_tokens = await asyncio.to_thread(
                lambda: sum(self.llm.count_message(m) for m in exchange))
        figures.research_ms = ms(time.perf_counter() - research_started)
        async for event in self._generate(request, row, question, researched=bool(exchange)):
            if isinstance(event, Calls):
                message = {"role": "assistant", "content": None, "tool_calls": event.calls}
                event.stored = [await asyncio.to_thread(self.store.append, request.session_id, message)]
                figures.tool_calls = len(event.calls)
            yield event

    async def _use_tools(self, calls: list[dict], toolbox: Toolbox, row: ReplyRow) -> AsyncIterator[TurnEvent]:
        """The reply's calls to Parlour's own tools: those that need no approval run (`ToolsRan`),
        then those that wait for it are stored unrun (`ApprovalAsked`, which ends the turn)."""
        waiting = [call for call in calls if toolbox.needs_approval(call["function"]["name"])]
        if len(waiting) < len(calls):
            yield await self._run_tools([call for call in calls if call not in waiting], toolbox, row)
        if waiting:
            yield await self._ask_approval(waiting, toolbox, row)

    async def _run_tools(self, calls: list[dict], toolbox: Toolbox, row: ReplyRow) -> ToolsRan:
        """Run the reply's calls to Parlour's own tools, one after another (a later one may depend
        on what an earlier one did), and store the exchange before the reply."""
        answers = [await toolbox.run(call) for call in calls]
        called = [toolbox.labelled(call) for call in calls]
        exchange = [{"role": "assistant", "content": None, "tool_calls": called}] + [message for message, _ in answers]
        return ToolsRan(await row.insert_before(exchange), [failure for _, failure in answers])

    async def _ask_approval(self, calls: list[dict], toolbox: Toolbox, row: ReplyRow) -> ApprovalAsked:
        """Store each call unrun, one message each: every approval request is an item of its own."""
        asked = [{"role": "assistant", "content": None,
                  "tool_calls": [{**toolbox.labelled(call), "approval": "requested"}]} for call in calls]
        return ApprovalAsked(await row.insert_before(asked))

    async def _fit(self, request: TurnRequest, offered: Offer) -> FitResult:
        figures, started = request.figures, time.perf_counter()
        budget = self.prompt.budget_for(request.context, request.max_tokens)
        result, summarized_s = await asyncio.to_thread(self.prompt.for_turn, request.session_id,
                                                       request.instructions, offered, request.spoken, budget)
        figures.fit_ms = (figures.fit_ms or 0) + ms(time.perf_counter() - started - summarized_s)
        figures.summarized_ms = (figures.summarized_ms or 0) + ms(summarized_s)
        figures.fitted(result)
        return result

    async def _generate(self, request: TurnRequest, row: ReplyRow, question: str,
                        researched: bool = False) -> AsyncIterator[TurnEvent]:
        """Fit and stream, at most twice: under the `model` policy a reply that calls `search`
        runs it, and the second attempt answers from what it found. With tools Parlour runs itself
        (an MCP server's), a third attempt may answer from their results. `researched`: the
        question's `auto` research is in the prompt (read before the question: evidence_first)."""
        unused = ""
        announced: bool | str = False  # as `must_call` takes it
        toolbox = self._toolbox(request)
        # The client's functions and the tools Parlour runs: both are called as the schemas say.
        client = request.offered_tools() + (toolbox.specs if toolbox else [])
        client_names = {t["function"]["name"] for t in client}
        offered = self._offer(request.offered_tools(), toolbox)  # the same on every attempt: the prefix stays
        temperature = self.temperature if request.temperature is None else request.temperature
        attempts = 3 if toolbox else 2
        for attempt in range(attempts):
            ask_model = self.research.policy == "model" and attempt == 0
            result = await self._fit(request, offered)
            # After the results, the reply may not open with a call: small models repeat theirs. A
            # client's `required` or named tool_choice makes the first attempt open with one, and a
            # first reply that said it would call makes the second (a call to the tool it named).
            must_call = bool(client) and (request.must_call if attempt == 0 else announced)
            # Right after function results the reply answers from them: the 1.5B otherwise often
            # called the same function again.
            after_results = result.messages[-1]["role"] == "tool" or (researched and attempt == 0)
            # Earlier commands leave the prompt where tools act on a home (an MCP server's, or a
            # client's that says so): shown them, the model answers "and turn it off again" in words.
            prompt = result.messages if request.earlier_calls and not toolbox or not client else \
                without_earlier_commands(result.messages, {SEARCH_TOOL["function"]["name"]})
            # A spoken question's evidence, read before it (evidence_first), may be evaluated apart
            # from the history, as its drafts' prefills did (voice.turns.preemption).
            apart = question if researched and request.spoken and attempt == 0 and prompt[-1]["role"] == "user" \
                else None
            # Rendering and tokenizing the prompt is blocking work too: a worker thread does it.
            reply = await asyncio.to_thread(
                self.llm.stream, prompt, request.max_tokens or self.prompt.reply_tokens, temperature, offered.native,
                open_with_call=attempt == 0 and not after_results, not_like=unused, must_call=must_call, apart=apart)
            # With tools offered, anything that may begin a call is held back rather than spoken;
            # on the second attempt a search is not run again, only kept out of the reply.
            scanner = CallScanner(offered.names, SEARCH_IN_WORDS if ask_model else None,
                                  wary=bool(client)) if offered.tools else None
            # A first reply that says it will call ("To check, you can use the GetLiveContext
            # function. Here's how: ...") is cut there and asked again, made to be the call.
            retry_as_call = attempt == 0 and bool(client) and not after_results and not must_call
            async for piece in in_worker(reply):
                if request.cancel.is_set():
                    reply.cancel()
                    break
                if scanner is not None:
                    piece = scanner.feed(piece)
                    if retry_as_call and scanner.announced:
                        reply.cancel()
                        break
                if piece:
                    yield Delta(piece)
            request.figures.generated(reply.stats)
            if scanner is None or request.cancel.is_set():
                return
            parsed = scanner.finish()
            calls = [c for c in parsed.calls if c["function"]["name"] in client_names]
            said = " ".join(str(m.get("content") or "") for m in result.messages) if calls else ""
            calls = [fit_call(c, client, said) for c in calls]
            invented = retry_as_call and not scanner.released and calls and all(made_up(c, client, said) for c in calls)
            ours = [c for c in calls if toolbox and c["function"]["name"] in toolbox]
            if calls and not invented and len(ours) < len(calls):
                # A call or words, never both: the words held with a call introduce it ("I will use
                # the GetLiveContext tool"), and Home Assistant would speak them.
                yield Calls([c for c in calls if c not in ours])  # the client runs them and asks again
                return
            if ours and not invented and toolbox and attempt < attempts - 1:
                async for event in self._use_tools(ours, toolbox, row):
                    yield event
                if isinstance(event, ApprovalAsked):
                    request.figures.tool_calls = len(ours)
                    return  # the user is asked; the next turn answers from what they decided
                announced = False  # the next attempt answers from the results
                continue
            calls = [c for c in parsed.calls + parsed.unknown if c["function"]["name"] not in client_names] \
                if ask_model else []
            # One that said nothing but a call the question did not ask for (an argument it made
            # up, a tool that does not exist: small models invent `add`) or a call cut off by the
            # length limit is asked again for words (a second attempt may not open with a call).
            if retry_as_call and not calls and (
                    scanner.announced or not scanner.released and (invented or parsed.unknown)):
                named = [name for name in scanner.named if name in client_names]
                announced = (named[0] if len(named) == 1 else True) if scanner.announced else False
                continue
            if not calls:
                if parsed.text:
                    yield Delta(parsed.text)
                return
            # Only searches that found something are kept. A fruitless one, or a call to a tool that
            # does not exist, leaves the prompt as it was, and the next attempt, which may not open
            # with a call, answers from what the model knows (told "no results", the 1.5B model
            # only repeated the call or recited the message).
            exchange = await asyncio.to_thread(self.research.run, calls, True,
                                               question if request.spoken else None, request.session_id)
            if exchange:
                yield Researched(await row.insert_before(exchange))
            else:  # the same prompt again: the answer may not open the way this reply did
                unused = scanner.released + scanner.held
