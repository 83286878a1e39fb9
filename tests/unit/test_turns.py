"""The turn layer (voice/turns/) with a fake model and a real session store: the model's queue, the
prompt fitted into its budget, upkeep between turns, guesses prefilled while the key is held, and
the turn engine itself."""

from __future__ import annotations

import asyncio
import re

import pytest

from fitting import FitError
from models.reply import ContextOverflow, ReplyStream
from tests.helpers import check_prompt, until
from tests.unit.fake_model import FakeModel
from voice.knowledge.research import Research
from voice.store.sessions import SessionStore
from voice.turns.engine import ServerBusy, TurnEngine
from voice.turns.events import Calls, Delta, Done, TurnRequest
from voice.turns.figures import TurnFigures
from voice.turns.model_queue import ModelQueue, in_worker
from voice.turns.preemption import Preemptions
from voice.turns.prompt import TurnPrompt
from voice.turns.tools import offer
from voice.turns.upkeep import Upkeep

INSTRUCTIONS = "You are a helpful assistant."
NO_TOOLS = offer(False, [], True)
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def session_with(store: SessionStore, exchanges: int, question: str | None = None) -> str:
    """A session of `exchanges` question-and-answer pairs of 26 fake tokens each, then `question`."""
    session_id = store.create(INSTRUCTIONS)
    for n in range(exchanges):
        store.append(session_id, {"role": "user", "content": f"Question {n}: " + "tell me about boats " * 5})
        store.append(session_id, {"role": "assistant", "content": f"Answer {n}: " + "boats float on water " * 5})
    if question is not None:
        store.append(session_id, {"role": "user", "content": question})
    return session_id


@pytest.fixture
def store(tmp_path) -> SessionStore:
    store = SessionStore(tmp_path / "sessions.sqlite3")
    yield store
    store.close()


# The model's queue ------------------------------------------------------------------------------
def test_the_queue_serves_its_capacity_at_once_and_then_waiters_in_arrival_order():
    async def run() -> list[str]:
        queue, served = ModelQueue(capacity=2), []
        await queue.acquire()
        await queue.acquire()  # both places taken without waiting
        assert queue.holders == 2 and not queue.turn_waiting.is_set()

        async def use(name: str) -> None:
            await queue.acquire()
            served.append(name)

        waiters = []
        for name in ("first", "second", "third"):
            waiters.append(asyncio.create_task(use(name)))
            await asyncio.sleep(0)  # each reaches the queue before the next is made
        assert served == [] and queue.turn_waiting.is_set()
        for _ in waiters:
            queue.release()
        await asyncio.gather(*waiters)
        assert queue.holders == 2 and not queue.turn_waiting.is_set()
        return served

    assert asyncio.run(run()) == ["first", "second", "third"]


def test_turns_go_before_summaries_that_have_not_started():
    async def run() -> list[str]:
        queue, order = ModelQueue(), []
        await queue.acquire()  # a turn holds the model

        async def use(name: str, background: bool) -> None:
            await queue.acquire(background)
            order.append(name)
            await asyncio.sleep(0)
            queue.release()

        summary = asyncio.create_task(use("summary", True))
        await asyncio.sleep(0)  # the summary waits first
        assert not queue.turn_waiting.is_set()  # a summary waiting is no turn: a warm-up need not give way
        turns = [asyncio.create_task(use(f"turn {n}", False)) for n in (1, 2)]
        gone = asyncio.create_task(use("turn that gives up", False))
        await asyncio.sleep(0)
        assert queue.turn_waiting.is_set()  # what a warm-up's worker thread reads to give way
        gone.cancel()
        queue.release()
        await asyncio.gather(summary, *turns, return_exceptions=True)
        assert not queue.turn_waiting.is_set()
        await asyncio.wait_for(queue.acquire(), 1)  # free again once everyone is done
        return order

    assert asyncio.run(run()) == ["turn 1", "turn 2", "summary"]


def test_a_place_handed_to_a_waiter_that_has_just_left_passes_to_the_next():
    async def run() -> None:
        queue = ModelQueue()
        await queue.acquire()
        leaving = asyncio.create_task(queue.acquire())
        staying = asyncio.create_task(queue.acquire())
        await asyncio.sleep(0)  # both wait
        queue.release()  # handed to `leaving`...
        leaving.cancel()  # ...which leaves before it runs
        await asyncio.wait_for(staying, 1)
        assert leaving.cancelled() and queue.holders == 1

    asyncio.run(run())


def test_a_reply_in_a_worker_comes_in_order_and_stops_when_its_reader_stops():
    async def run() -> None:
        model = FakeModel(["One two three four.", "Five six seven."])
        whole = [piece async for piece in in_worker(model.stream([{"role": "user", "content": "Count."}]))]
        assert whole == ["One", " two", " three", " four."]
        reply = model.stream([{"role": "user", "content": "Go on."}])
        pieces = in_worker(reply)
        assert await pieces.__anext__() == "Five"
        await pieces.aclose()
        assert reply.cancelled

    asyncio.run(run())


def test_an_error_in_a_reply_reaches_its_reader_after_the_pieces_before_it():
    def failing():
        yield "Partial"
        raise ContextOverflow("the prompt grew past the context")

    async def run() -> list[str]:
        read = []
        with pytest.raises(ContextOverflow):
            async for piece in in_worker(ReplyStream(failing())):
                read.append(piece)
        return read

    assert asyncio.run(run()) == ["Partial"]


# The prompt -------------------------------------------------------------------------------------
def test_a_session_over_the_budget_is_fitted_into_it_and_its_earlier_conversation_summarized(store):
    summary = "The user asked about boats, and was told they float."
    model = FakeModel([summary] * 8)
    prompt = TurnPrompt(model, store, context=400, reply_tokens=100)
    session_id = session_with(store, exchanges=8, question="What is my boat called?")
    assert model.measure(store.transcript(session_id)) > prompt.budget

    result, _summarized_s = prompt.for_turn(session_id, None, NO_TOOLS, False, prompt.budget)
    assert result.prompt_tokens == model.measure(result.messages) <= prompt.budget
    check_prompt(result.messages)
    assert result.messages[-1] == {"role": "user", "content": "What is my boat called?"}
    assert result.messages[0]["content"].startswith(INSTRUCTIONS) and summary in result.messages[0]["content"]
    assert model.prompts and "Question 0" in str(model.prompts[0])  # the oldest exchange was summarized
    removed, stored_summary = store.fit_state(session_id)
    assert removed == result.removed and stored_summary.text.startswith(summary)


def test_without_a_summary_the_oldest_exchanges_are_dropped_and_counted(store):
    model = FakeModel([""] * 8)  # the model writes no summary
    prompt = TurnPrompt(model, store, context=400, reply_tokens=100)
    session_id = session_with(store, exchanges=8, question="What is my boat called?")
    result, _ = prompt.for_turn(session_id, None, NO_TOOLS, False, prompt.budget)
    assert result.prompt_tokens <= prompt.budget and result.dropped > 0 and not result.summary
    kept = [m["content"] for m in result.messages]
    assert "What is my boat called?" in kept and not any(text.startswith("Question 0") for text in kept)
    check_prompt(result.messages)


def test_a_model_that_cannot_shift_its_cache_goes_down_to_half_the_budget_and_one_that_can_does_not(store):
    fitted = {}
    for shifts in (False, True):
        model = FakeModel([""] * 8, kv_shift=shifts)
        prompt = TurnPrompt(model, store, context=400, reply_tokens=100)
        session_id = session_with(store, exchanges=8, question="What is my boat called?")
        fitted[shifts] = prompt.for_turn(session_id, None, NO_TOOLS, False, prompt.budget)[0].prompt_tokens
    assert fitted[False] <= 300 // 2 < fitted[True] <= 300


def test_a_turns_instructions_replace_the_sessions_and_a_small_client_context_shrinks_the_budget(store):
    model = FakeModel()
    prompt = TurnPrompt(model, store, context=400, reply_tokens=100)
    session_id = session_with(store, exchanges=1, question="Hello?")
    result, _ = prompt.for_turn(session_id, "Answer in French.", NO_TOOLS, False, prompt.budget)
    assert result.messages[0] == {"role": "system", "content": "Answer in French."}
    assert prompt.budget_for(None, None) == 300
    assert prompt.budget_for(250, 50) == 200 and prompt.budget_for(1000, 50) == 300
    with pytest.raises(FitError):
        prompt.budget_for(100, 100)
    with pytest.raises(ValueError):
        TurnPrompt(model, store, context=100, reply_tokens=100)


# Upkeep ---------------------------------------------------------------------------------------
def make_upkeep(model: FakeModel, store: SessionStore, context: int = 4096) -> tuple[Upkeep, TurnPrompt]:
    prompt = TurnPrompt(model, store, context=context, reply_tokens=100)
    return Upkeep(model, prompt, ModelQueue(), NO_TOOLS), prompt


def test_a_warm_up_evaluates_the_next_turns_prompt_without_its_question(store):
    model = FakeModel()
    upkeep, _ = make_upkeep(model, store)
    session_id = session_with(store, exchanges=2)

    async def run() -> None:
        upkeep.warm(session_id)
        upkeep.warm(None, "Be brief.")  # a new session: its system prompt
        await upkeep.idle()

    asyncio.run(run())
    assert model.prefills == [store.transcript(session_id), [{"role": "system", "content": "Be brief."}]]
    assert model.cache == [{"role": "system", "content": "Be brief."}]


def test_a_warm_up_gives_way_while_a_client_is_heard_and_none_runs_for_a_model_that_cannot_warm(store):
    model = FakeModel()
    upkeep, _ = make_upkeep(model, store)
    session_id = session_with(store, exchanges=2)

    async def run(upkeep: Upkeep) -> None:
        upkeep.warm(session_id)
        await upkeep.idle()

    upkeep.hearing()
    asyncio.run(run(upkeep))
    assert len(model.prefills) == 1 and model.cache == []  # asked, and stopped before its first batch

    remote = FakeModel(warms=False)
    asyncio.run(run(make_upkeep(remote, store)[0]))
    assert remote.prefills == []


def test_exchanges_the_next_turns_would_remove_are_summarized_ahead_so_the_next_turn_drops_nothing(store):
    summary = "The user asked about boats."
    model = FakeModel([summary] * 4)
    upkeep, prompt = make_upkeep(model, store, context=400)
    session_id = session_with(store, exchanges=5)  # under the budget, within its margin
    assert model.measure(store.transcript(session_id)) <= prompt.budget

    async def run() -> None:
        upkeep.summarize_ahead(session_id)
        await upkeep.idle()

    asyncio.run(run())
    assert model.prompts and "Question 0" in str(model.prompts[0])
    _removed, stored = store.fit_state(session_id)
    assert stored is not None and stored.text.startswith(summary)

    store.append(session_id, {"role": "user", "content": "And what about ships? " * 8})
    asked = len(model.prompts)
    result, summarized_s = prompt.for_turn(session_id, None, NO_TOOLS, False, prompt.budget)
    assert result.dropped == 0 and summarized_s == 0 and len(model.prompts) == asked  # no summary at the turn


def test_at_shutdown_warm_ups_stop_and_a_summary_asked_for_is_still_made(store):
    summary = "The user asked about boats."
    model = FakeModel([summary] * 4)
    upkeep, _ = make_upkeep(model, store, context=400)
    session_id = session_with(store, exchanges=5)

    async def run() -> None:
        upkeep.warm(session_id)
        upkeep.summarize_ahead(session_id)
        upkeep.close()
        await upkeep.idle()

    asyncio.run(run())
    assert model.prefills == []  # the warm-up never began
    _removed, stored = store.fit_state(session_id)
    assert stored is not None and stored.text.startswith(summary)

    asked = len(model.prompts)
    later = session_with(store, exchanges=5)

    async def after_close() -> None:  # a turn that ended while the service stops asks for more
        upkeep.summarize_ahead(later)
        upkeep.warm(later)
        await upkeep.idle()

    asyncio.run(after_close())
    assert len(model.prompts) == asked and model.prefills == [] and store.fit_state(later)[1] is None


# Guesses prefilled while the key is held ------------------------------------------------------------
def make_preemptions(model: FakeModel, store: SessionStore) -> Preemptions:
    prompt = TurnPrompt(model, store, context=4096, reply_tokens=100)
    return Preemptions(model, prompt, Research("off", None), ModelQueue())


def guessed(model: FakeModel, store: SessionStore, guess: str, asked: str) -> tuple[str, list[dict], TurnFigures]:
    """A settled draft heard `guess` and was prefilled; then the committed question was `asked`.
    Returns the session, what was prefilled, and the turn's figures."""
    preemptions = make_preemptions(model, store)
    session_id = session_with(store, exchanges=1)
    stored = store.transcript(session_id)

    async def run() -> tuple[list[dict], TurnFigures]:
        preemptions.start(session_id, guess, True, True, None, NO_TOOLS)
        await preemptions.idle()
        (prefilled,) = model.prefills
        figures = TurnFigures()  # the commit: its clock starts after the prefill
        assert await preemptions.take(session_id, asked, True, figures) == []  # research is off
        return prefilled, figures

    prefilled, figures = asyncio.run(run())
    assert store.transcript(session_id) == stored  # a guess is never stored
    assert prefilled == [*stored, {"role": "user", "content": guess}]
    assert model.prefilled_apart == [guess]  # what precedes the settled question may be evaluated apart
    assert figures.preempted_tokens == sum(model.count_message(m) for m in prefilled)
    assert figures.preempted_late_tokens == 0
    return session_id, prefilled, figures


def test_a_wrong_guess_is_discarded_from_the_cache_past_the_history_it_shares(store):
    model = FakeModel()
    _session_id, prefilled, figures = guessed(model, store, "Who is the harbour master?", "How much are tickets?")
    assert figures.preempted is False
    (discarded, held), = model.discards
    assert discarded == [*prefilled[:-1], {"role": "user", "content": "How much are tickets?"}]
    assert held == len(prefilled) - 1
    assert model.cache == prefilled[:-1]  # the history stays, the guessed question is gone


def test_a_right_guess_is_taken_whatever_its_case_and_the_cache_keeps_what_the_turn_reads(store):
    model = FakeModel()
    _session_id, prefilled, figures = guessed(model, store, "Who is the harbour master?", "Who is the harbour master?")
    assert figures.preempted is True and model.cache == prefilled

    model = FakeModel()
    _session_id, prefilled, figures = guessed(model, store, "Who is the harbour master?", "who is the Harbour master")
    assert figures.preempted is True  # the same words: its research is the turn's
    assert model.cache == prefilled[:-1]  # but the question as committed is read anew


@pytest.mark.parametrize(("warms", "settled"), [(False, True), (True, False)],
                         ids=["a model that cannot warm", "an unsettled draft with no evidence"])
def test_nothing_is_prefilled_for(store, warms, settled):
    model = FakeModel(warms=warms)
    preemptions = make_preemptions(model, store)
    session_id = session_with(store, exchanges=1)

    async def run() -> list[dict] | None:
        preemptions.start(session_id, "Who is the harbour master?", True, settled, None, NO_TOOLS)
        await preemptions.idle()
        return await preemptions.take(session_id, "Who is the harbour master?", True, TurnFigures())

    assert asyncio.run(run()) == []  # the turn's research (off), not None: there was a guess
    assert model.prefills == [] and model.discards == []


def test_a_prefill_waits_while_whisper_drafts_and_a_dropped_guess_is_not_taken(store):
    model = FakeModel()
    preemptions = make_preemptions(model, store)
    session_id = session_with(store, exchanges=1)

    async def run() -> None:
        with preemptions.drafting():
            preemptions.start(session_id, "Who is the harbour master?", True, True, None, NO_TOOLS)
            await until(lambda: model.prefills, timeout=10)
            assert model.cache == []  # nothing evaluated while whisper has the CPU
        await preemptions.idle()
        assert model.cache == model.prefills[0]
        preemptions.drop(session_id)  # the client went away
        assert await preemptions.take(session_id, "Who is the harbour master?", True, TurnFigures()) is None

    asyncio.run(run())


# The turn engine --------------------------------------------------------------------------------
def make_engine(model: FakeModel, store: SessionStore, max_queue: int = 8) -> TurnEngine:
    return TurnEngine(model, store, Research("off", None), context=4096, reply_tokens=64, max_queue=max_queue)


async def turn(engine: TurnEngine, request: TurnRequest) -> list:
    events = [event async for event in engine.respond(request)]
    await engine.idle()
    return events


def test_a_turn_streams_the_reply_token_by_token_stores_it_after_its_question_and_ends_with_done(store):
    reply = "The capital of France is Paris."
    model = FakeModel([reply])
    engine = make_engine(model, store)
    session_id = session_with(store, exchanges=0, question="What is the capital of France?")

    events = asyncio.run(turn(engine, TurnRequest(session_id)))
    deltas = [event.text for event in events if isinstance(event, Delta)]
    assert deltas == ["The", " capital", " of", " France", " is", " Paris."]
    assert isinstance(events[-1], Done) and not any(isinstance(event, Done) for event in events[:-1])
    assert store.transcript(session_id) == [{"role": "system", "content": INSTRUCTIONS},
                                            {"role": "user", "content": "What is the capital of France?"},
                                            {"role": "assistant", "content": reply}]
    (stored,) = events[-1].stored
    assert stored.message["content"] == reply and stored.status == "complete"
    figures = events[-1].figures
    assert figures.status == "complete" and figures.completion_tokens == len(deltas)
    assert figures.prompt_tokens == model.measure(model.prompts[0])
    assert model.prompts == [store.transcript(session_id)[:2]]  # asked once; no summary was due


def test_a_cancelled_turn_stores_the_text_delivered_as_interrupted(store):
    model = FakeModel(["Once upon a time there was a lighthouse keeper."])
    engine = make_engine(model, store)
    session_id = session_with(store, exchanges=0, question="Tell me a story.")
    request = TurnRequest(session_id)

    async def run() -> list:
        events = []
        async for event in engine.respond(request):
            events.append(event)
            if len(events) == 2:
                request.cancel.set()  # after two pieces were delivered
        await engine.idle()
        return events

    events = asyncio.run(run())
    assert [event.text for event in events if isinstance(event, Delta)] == ["Once", " upon"]
    assert isinstance(events[-1], Done) and events[-1].figures.status == "interrupted"
    last = store.messages(session_id)[-1]
    assert last.message == {"role": "assistant", "content": "Once upon"} and last.status == "interrupted"


def test_a_reply_that_calls_the_clients_function_ends_the_turn_with_the_stored_call(store):
    model = FakeModel(['<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'])
    engine = make_engine(model, store)
    session_id = session_with(store, exchanges=0, question="What is the weather in Paris?")

    events = asyncio.run(turn(engine, TurnRequest(session_id, tools=[WEATHER_TOOL])))
    assert not [event for event in events if isinstance(event, Delta)]  # a call is never spoken
    (calls,) = [event for event in events if isinstance(event, Calls)]
    (call,) = calls.calls
    assert call["function"]["name"] == "get_weather" and '"Paris"' in call["function"]["arguments"]
    assert [m.message for m in calls.stored] == [{"role": "assistant", "content": None, "tool_calls": calls.calls}]
    assert store.transcript(session_id)[-1]["tool_calls"] == calls.calls
    assert isinstance(events[-1], Done) and events[-1].stored == [] and events[-1].figures.tool_calls == 1
    assert model.stream_options[0]["tools"] == [WEATHER_TOOL]  # declared to a template that knows tools


def test_turns_past_max_queue_are_refused_and_those_waiting_are_served_in_order(store):
    model = FakeModel(["First reply.", "Second reply."])
    engine = make_engine(model, store, max_queue=2)
    sessions = [session_with(store, exchanges=0, question=f"Question {n}?") for n in range(3)]

    async def run() -> list[list]:
        await engine.queue.acquire()  # something else holds the model
        first = asyncio.create_task(turn(engine, TurnRequest(sessions[0])))
        await until(lambda: engine.queue.turn_waiting.is_set(), timeout=10)  # the first is in the queue
        second = asyncio.create_task(turn(engine, TurnRequest(sessions[1])))
        await until(lambda: engine.waiting == 2, timeout=10)
        with pytest.raises(ServerBusy):
            await turn(engine, TurnRequest(sessions[2]))
        engine.queue.release()
        return await asyncio.gather(first, second)

    served = asyncio.run(run())
    assert [isinstance(events[-1], Done) for events in served] == [True, True]
    assert [store.transcript(s)[-1]["content"] for s in sessions] == ["First reply.", "Second reply.", "Question 2?"]
    assert len(model.prompts) == 2 and engine.waiting == 0 and engine.generating == 0


class InstantVoice:
    """A `Voice` whose audio takes no time: each whole sentence fed is delivered when `finish` is
    awaited (the rest too if `whole`), 100 ms a word on its timeline."""

    def __init__(self) -> None:
        self.timeline: list[list] = []
        self.delivered = None
        self.fed = ""

    def feed(self, text: str) -> None:
        self.fed += text

    async def finish(self, whole: bool = True) -> None:
        sentences = re.findall(r"[^.]*\.", self.fed)
        rest = self.fed[len("".join(sentences)):]
        for sentence in [*sentences, rest] if whole and rest.strip() else sentences:
            start = self.timeline[-1][2] if self.timeline else 0
            self.timeline.append([sentence.strip(), start, start + 100 * len(sentence.split())])
            await self.delivered(sentence.strip(), self.timeline)


def test_a_spoken_reply_is_stored_as_its_voice_delivers_it_with_the_timeline(store):
    reply = "It is sunny. Take a hat."
    engine = make_engine(FakeModel([reply]), store)
    session_id = session_with(store, exchanges=0, question="What is the weather?")
    voice = InstantVoice()
    request = TurnRequest(session_id, spoken=True, voice=voice, item_id="item_reply")

    async def run() -> tuple[list, list]:
        events, rows_while_streaming = [], []
        async for event in engine.respond(request):
            events.append(event)
            if isinstance(event, Delta):  # the row is open, and holds only what the voice delivered
                rows_while_streaming.append(store.message(session_id, "item_reply"))
        await engine.idle()
        return events, rows_while_streaming

    events, rows = asyncio.run(run())
    assert rows and all(row.status == "in_progress" and row.message["content"] == "" for row in rows)
    assert voice.fed == reply
    (stored,) = events[-1].stored
    assert stored.item_id == "item_reply" and stored.message["content"] == reply and stored.status == "complete"
    assert stored.figures["timeline"] == [["It is sunny.", 0, 300], ["Take a hat.", 300, 600]]


def test_a_spoken_reply_left_mid_sentence_keeps_the_sentences_its_voice_delivered(store):
    engine = make_engine(FakeModel(["It is sunny. Take a hat."]), store)
    session_id = session_with(store, exchanges=0, question="What is the weather?")
    request = TurnRequest(session_id, spoken=True, voice=InstantVoice(), item_id="item_reply")

    async def run() -> None:
        turn = engine.respond(request)
        async for event in turn:
            if isinstance(event, Delta) and event.text == " Take":
                break  # the listener left
        await turn.aclose()
        await engine.idle()

    asyncio.run(run())
    stored = store.message(session_id, "item_reply")
    assert stored.message["content"] == "It is sunny." and stored.status == "interrupted"
    assert stored.figures["timeline"] == [["It is sunny.", 0, 300]]


def test_a_turn_with_the_clients_tools_researches_a_question_and_not_a_command(store, evaluation_knowledge):
    from voice.turns.events import Researched

    knowledge = evaluation_knowledge
    assert knowledge.bears_on("Turn on the kitchen light.")  # by the household notes' "kitchen" and "light"
    light = {"type": "function", "function": {"name": "turn_on", "description": "Turn a device on.",
                                              "parameters": {"type": "object", "properties": {}}}}
    model = FakeModel(['<tool_call>{"name": "turn_on", "arguments": {}}</tool_call>', "Breaker 9."])
    engine = TurnEngine(model, store, Research("auto", knowledge), context=4096, reply_tokens=64)
    command = session_with(store, exchanges=0, question="Turn on the kitchen light.")
    events = asyncio.run(turn(engine, TurnRequest(command, tools=[light])))
    assert not [event for event in events if isinstance(event, Researched)]
    assert any(isinstance(event, Calls) for event in events) and "search" not in str(model.prompts[0])

    question = session_with(store, exchanges=0, question="Which breaker is the electric shower on?")
    events = asyncio.run(turn(engine, TurnRequest(question, tools=[light])))
    assert [event for event in events if isinstance(event, Researched)]
    assert "Breaker: 9" in store.transcript(question)[3]["content"]


def test_a_spoken_questions_evidence_may_be_evaluated_apart_and_a_typed_ones_is_not(store, evaluation_knowledge):
    question = "Which breaker is the electric shower on?"
    model = FakeModel(["Breaker 9.", "Breaker 9."])
    engine = TurnEngine(model, store, Research("auto", evaluation_knowledge), context=4096, reply_tokens=64)
    for spoken in (True, False):
        asyncio.run(turn(engine, TurnRequest(session_with(store, exchanges=0, question=question), spoken=spoken)))
    assert [options["apart"] for options in model.stream_options] == [question, None]
    read = model.prompts[0][-1]["content"]  # the evidence, then the question (evidence_first)
    assert "Breaker: 9" in read and read.endswith(question)
