"""The fitting core (ADR 0140, amended by ADR 0141), with plain message lists and callables."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fitting import FitError, estimate, fit
from fitting.sections import WORKER, split_sections
from fitting.summary import HEADING, INSTRUCTIONS
from harness.sessions import SYSTEM, assistant, call, research_session, result, user
from tests.helpers import check_prompt, kept_texts


# Stage 1: earlier research first, and only as much as must ---------------------------------------
def test_earlier_research_goes_before_any_conversation_and_only_as_much_as_must():
    messages = research_session(turns=4, research_chars=3000)
    full = estimate(messages)
    research_turn = 2 * (4 + 1000 + 4) + 30  # two results of ~1,000 tokens each, and the call
    fitted = fit(messages, budget=full - research_turn - 10)
    research_steps = [s for s in fitted.steps if s.stage == "research"]
    assert len(research_steps) == 2  # the oldest two turns' research, no more
    assert research_steps[0].removed == [2, 3, 4] and research_steps[1].removed == [7, 8, 9]
    assert all(s.stage == "research" for s in fitted.steps)
    # All the conversation stays, and the newer research with it.
    for index, message in enumerate(messages):
        if message["role"] in ("user", "assistant") and not message.get("tool_calls"):
            assert message["content"] in kept_texts(fitted.messages), index
    assert any(m["role"] == "tool" and m["tool_call_id"] == "call_3_0" for m in fitted.messages)
    assert fitted.prompt_tokens <= fitted.budget
    check_prompt(fitted.messages)


def test_a_prompt_that_fits_is_left_alone():
    messages = research_session(turns=2)
    fitted = fit(messages, budget=estimate(messages))
    assert fitted.messages == messages and fitted.steps == [] and fitted.removed == []


# Stage 2: whole exchanges, oldest first ----------------------------------------------------------
def test_then_whole_exchanges_go_oldest_first():
    messages = research_session(turns=5, research_chars=2000, talk_chars=600)
    talk = estimate([m for m in messages if m["role"] != "tool" and not m.get("tool_calls")])
    fitted = fit(messages, budget=talk - 500)
    stages = [s.stage for s in fitted.steps]
    assert stages[:5] == ["research"] * 5  # every earlier search went before any exchange
    exchange_steps = [s for s in fitted.steps if s.stage == "exchange"]
    assert exchange_steps and exchange_steps[0].removed == [1, 5]  # the oldest question and its answer
    removed_questions = [s.removed[0] for s in exchange_steps]
    assert removed_questions == sorted(removed_questions)
    assert fitted.messages[-1] == messages[-1] and fitted.messages[0] == SYSTEM
    assert fitted.prompt_tokens <= fitted.budget
    check_prompt(fitted.messages)


def test_a_follow_up_keeps_the_turns_it_refers_to_while_the_conversation_fits():
    # The decision record's case: research dwarfs the conversation, which alone fits.
    messages = research_session(turns=6, research_chars=4000, talk_chars=500)
    messages[-1] = user("Compare it with what you said about the first topic.")
    conversation = [m for m in messages if m["role"] != "tool" and not m.get("tool_calls")]
    fitted = fit(messages, budget=estimate(conversation) + 3000)  # room for one turn of research
    assert all(m in fitted.messages for m in conversation)
    assert not any(s.stage == "exchange" for s in fitted.steps)
    assert any(m["role"] == "tool" for m in fitted.messages)  # the newest research that fits stays
    check_prompt(fitted.messages)


# Odd sessions -------------------------------------------------------------------------------------
def test_a_call_with_no_result_never_reaches_the_prompt():
    messages = [SYSTEM, user("Look it up."), call("crashed"), user("Are you there?")]
    fitted = fit(messages, budget=1000)
    assert not any(m.get("tool_calls") for m in fitted.messages)
    assert fitted.steps[0].stage == "repair" and fitted.steps[0].removed == [2]
    assert "Look it up." in fitted.messages[1]["content"] and "Are you there?" in fitted.messages[1]["content"]
    check_prompt(fitted.messages)


def test_a_result_with_no_call_and_a_half_answered_parallel_call_are_repaired():
    messages = [
        SYSTEM, user("First."), result("stray", "orphan result"), assistant("Ok."),
        user("Search two things."), call("a", "b"), result("a", "only a answered"),
        assistant("Found a."), user("Thanks?"),
    ]
    fitted = fit(messages, budget=1000)
    assert "orphan result" not in kept_texts(fitted.messages)
    calls = [m for m in fitted.messages if m.get("tool_calls")]
    assert [c["id"] for c in calls[0]["tool_calls"]] == ["a"]
    check_prompt(fitted.messages)


def test_a_call_answered_by_several_results_keeps_them_all_and_they_go_together():
    messages = [
        SYSTEM, user("Search the notes."), call("a"), result("a", "first passage " * 50),
        result("a", "second passage " * 50), assistant("Found two."), user("And now?"),
    ]
    fitted = fit(messages, budget=1000)
    assert [s.stage for s in fitted.steps] == []  # nothing repaired away
    assert "second passage" in kept_texts(fitted.messages)[4]
    check_prompt(fitted.messages)
    tight = fit(messages, budget=estimate(messages) - 50)
    assert [(s.stage, s.removed) for s in tight.steps] == [("research", [2, 3, 4])]
    check_prompt(tight.messages)


def test_parallel_tool_calls_are_removed_whole():
    messages = [SYSTEM, user("Q1"), call("x", "y", "z")] + [result(i, "r" * 900) for i in "xyz"] + [
        assistant("A1"), user("Q2"), assistant("A2"), user("Q3")]
    fitted = fit(messages, budget=estimate(messages) - 100)
    assert fitted.steps[0].stage == "research" and fitted.steps[0].removed == [2, 3, 4, 5]
    assert not any(m["role"] == "tool" for m in fitted.messages)
    check_prompt(fitted.messages)


def test_an_assistant_message_with_no_content():
    messages = [SYSTEM, user("Q1 " + "q" * 600), assistant(None), user("Q2"), assistant("A2"), user("Q3")]
    fitted = fit(messages, budget=estimate(messages) - 50)
    assert [s.stage for s in fitted.steps] == ["exchange"]
    assert fitted.messages == [SYSTEM, user("Q2"), assistant("A2"), user("Q3")]


def test_a_session_that_is_all_research_is_condensed_not_overflowed():
    question = user("What do the reports say about rainfall in Galway?")
    messages = [SYSTEM, question, call("r1", "r2", "r3")] + [
        result(f"r{i}", "\n\n".join(f"Paragraph {p} of report {i}: " + "text " * 120 for p in range(8)))
        for i in (1, 2, 3)
    ]
    calls: list[list[dict]] = []

    def worker(prompt: list[dict]) -> str:
        calls.append(prompt)
        return "Galway: 1,200 mm of rain a year." if "report 2" in prompt[1]["content"] else "NONE"

    fitted = fit(messages, budget=1200, generate=worker)
    assert calls and all(p[0]["content"] == WORKER for p in calls)
    assert fitted.prompt_tokens <= 1200 and estimate(fitted.messages) <= 1200
    assert question in fitted.messages
    tool_texts = [m["content"] for m in fitted.messages if m["role"] == "tool"]
    assert len(tool_texts) == 3 and "Galway: 1,200 mm" in tool_texts[1]
    assert {s.stage for s in fitted.steps} == {"condense"}
    check_prompt(fitted.messages)


def test_without_a_generator_the_current_evidence_is_cut_to_fit():
    messages = [SYSTEM, user("Summarize the report."), call("r1"), result("r1", "word " * 3000)]
    fitted = fit(messages, budget=800)
    assert fitted.prompt_tokens <= 800 and estimate(fitted.messages) <= 800
    assert fitted.messages[1] == messages[1]
    assert fitted.messages[-1]["content"].endswith("[…]")
    assert [s.stage for s in fitted.steps] == ["cut"]


def test_a_question_larger_than_the_budget_is_condensed_or_cut_never_overflowing():
    long_question = user("Here is my essay. " + "sentence after sentence. " * 800 + "Is the ending clear?")
    cut_only = fit([SYSTEM, long_question], budget=500)
    assert cut_only.prompt_tokens <= 500 and estimate(cut_only.messages) <= 500
    assert cut_only.messages[1]["content"].endswith("Is the ending clear?")  # the ask is at the end

    condensed = fit([SYSTEM, long_question], budget=500, generate=lambda p: "The essay repeats one sentence.")
    assert condensed.prompt_tokens <= 500
    assert "condensed from a long message" in condensed.messages[1]["content"]


def test_a_system_prompt_over_the_budget_is_a_clear_error():
    with pytest.raises(FitError, match="over the budget of 50"):
        fit([{"role": "system", "content": "s" * 600}, user("Hi")], budget=50)
    with pytest.raises(FitError, match="no user question"):
        fit([SYSTEM, assistant("Hello!")], budget=500)


# History before section workers -----------------------------------------------------------------
def test_history_goes_before_any_section_worker_starts():
    messages = research_session(turns=3, research_chars=1000, talk_chars=200)[:-1]
    messages += [user("Now read this report."), call("big"), result("big", "\n\n".join(["para " * 100] * 12))]
    prompts: list[list[dict]] = []
    fitted = fit(messages, budget=1500, generate=lambda p: prompts.append(p) or "noted.")
    stages = [s.stage for s in fitted.steps]
    first_worker = next(i for i, s in enumerate(stages) if s == "condense")
    assert "condense" not in stages[:first_worker] and {"research", "exchange"} <= set(stages[:first_worker])
    assert all(s in ("condense", "cut", "summary") for s in stages[first_worker:])
    # Every earlier exchange is gone from the prompt, and the summary too, before condensing.
    assert [m["role"] for m in fitted.messages] == ["system", "user", "assistant", "tool"]
    assert HEADING not in fitted.messages[0]["content"]
    worker_prompts = [p for p in prompts if p[0]["content"] == WORKER]
    first_worker_prompt = prompts.index(worker_prompts[0])
    assert all(p[0]["content"] == WORKER for p in prompts[first_worker_prompt:])  # no summary after a worker


def test_no_section_worker_runs_when_removing_history_is_enough():
    messages = research_session(turns=4, research_chars=1500)
    prompts: list[list[dict]] = []
    fit(messages, budget=estimate(messages) // 2, generate=lambda p: prompts.append(p) or "a summary")
    assert not any(p[0]["content"] == WORKER for p in prompts)


# Summaries (ADR 0141) -----------------------------------------------------------------------------
def talk_session(turns: int = 8) -> list[dict]:
    messages = [SYSTEM]
    for t in range(turns):
        messages += [user(f"Tell me about city {t}. " + "q" * 300), assistant(f"City {t} is lovely. " + "a" * 300)]
    return messages + [user("Which city did I ask about first?")]


def test_summaries_replace_dropped_text_inside_the_system_message():
    messages = talk_session()
    prompts: list[list[dict]] = []

    def summarizer(prompt: list[dict]) -> str:
        prompts.append(prompt)
        return "The user asked about cities 0 to 3, starting with city 0."

    fitted = fit(messages, budget=estimate(messages) // 2, generate=summarizer)
    assert prompts and prompts[0][0]["content"].startswith(INSTRUCTIONS.split("{")[0])
    assert "City 0 is lovely" in prompts[0][1]["content"]
    system = fitted.messages[0]
    assert system["role"] == "system" and system["content"].startswith(SYSTEM["content"])
    assert HEADING in system["content"] and "starting with city 0" in system["content"]
    assert sum(m["role"] == "system" for m in fitted.messages) == 1
    assert fitted.summary is not None and fitted.summary.start == 1
    removed = [i for s in fitted.steps if s.stage == "exchange" for i in s.removed]
    assert fitted.summary.end == max(removed) + 1
    assert fitted.prompt_tokens <= fitted.budget and estimate(fitted.messages) <= fitted.budget
    check_prompt(fitted.messages)


def test_a_summary_is_reused_on_the_next_turn_instead_of_made_again():
    messages = talk_session()
    made: list[int] = []
    first = fit(messages, budget=estimate(messages) // 2, generate=lambda p: made.append(1) or "Cities 0-3.")
    assert made and set(made) == {1}
    next_turn = messages + [assistant("City 0."), user("And the second?")]
    second = fit(next_turn, budget=first.budget, generate=lambda p: made.append(2) or "new",
                 previous=first.removed, summary=first.summary)
    assert 2 not in made  # nothing new needed: the stored summary was reused
    assert second.summary == first.summary
    assert second.messages[: len(first.messages)] == first.messages  # the prefix is unchanged


def test_a_longer_range_is_summarized_from_the_earlier_summary():
    messages = talk_session(10)
    budget = estimate(messages) // 2
    first = fit(messages, budget=budget, generate=lambda p: "Cities 0-4.")
    grown = messages + [assistant("City 0. " + "a" * 900), user("More about city 9? " + "q" * 900)]
    seen: list[str] = []
    second = fit(grown, budget=budget, generate=lambda p: seen.append(p[1]["content"]) or "Cities 5-6.",
                 previous=first.removed, summary=first.summary)
    assert seen and f"city {first.summary.end // 2 - 1}." not in seen[0]  # only newly removed exchanges are read
    # Each new chunk's notes are added to the earlier ones.
    assert second.summary.text == "\n".join([first.summary.text] + ["Cities 5-6."] * len(seen))
    assert second.summary.start == 1 and second.summary.end > first.summary.end


def test_notes_grown_past_twice_their_bound_are_merged_by_one_more_call():
    from fitting.summary import MERGE, summarize

    calls: list[list[dict]] = []

    def generate(prompt):
        calls.append(prompt)
        return "merged." if prompt[0]["content"] == MERGE.format(words=5) else "one two three four five six"

    chunks = [[user("My cat is Tom.")], [user("My dog is Rex.")]]
    assert summarize(chunks, generate, words=5) == "merged."
    assert len(calls) == 3 and "one two three four five six\none two three four five six" == calls[2][1]["content"]
    assert summarize(chunks[:1], generate, words=5) == "one two three four five six"  # within twice the bound


@pytest.mark.parametrize("generator", [lambda p: 1 / 0, lambda p: "", lambda p: None, lambda p: "   "])
def test_summaries_fall_back_to_dropping_when_the_generator_fails(generator):
    messages = talk_session()
    fitted = fit(messages, budget=estimate(messages) // 2, generate=generator)
    dropped = fit(messages, budget=estimate(messages) // 2)
    assert fitted.summary is None and HEADING not in fitted.messages[0]["content"]
    assert fitted.messages == dropped.messages
    assert {s.detail for s in fitted.steps if s.stage == "exchange"} == {"dropped"}


def test_summary_length_is_bounded():
    messages = talk_session()
    fitted = fit(messages, budget=estimate(messages) // 2, generate=lambda p: "words " * 2000, summary_tokens=100)
    assert fitted.summary is not None
    summary_tokens = estimate([fitted.messages[0]]) - estimate([SYSTEM])
    assert summary_tokens <= 100
    assert fitted.prompt_tokens <= fitted.budget


# Measuring and prefix stability -----------------------------------------------------------------
def test_each_message_is_measured_once():
    calls = 0

    def counting_measure(messages: list[dict]) -> int:
        nonlocal calls
        calls += 1
        return estimate(messages)

    messages = research_session(turns=40, research_chars=2000)
    fitted = fit(messages, budget=4000, measure=counting_measure)
    assert calls == fitted.measure_calls <= len(messages) + 1


def test_low_water_and_previous_keep_the_prefix_stable_across_turns():
    budget = 3000
    messages = research_session(turns=3, research_chars=1200)
    result_ = fit(messages, budget=budget, previous=(), low_water=2000)
    prompts = [result_]
    for t in range(6):
        messages = messages + [assistant(f"Reply {t}."), user(f"Follow-up {t}? " + "q" * 150)]
        result_ = fit(messages, budget=budget, previous=result_.removed, low_water=2000)
        prompts.append(result_)
    extended = sum(
        after.messages[: len(before.messages)] == before.messages
        for before, after in zip(prompts, prompts[1:], strict=False)
    )
    assert extended >= 4  # most turns only append to the cached prefix
    assert all(p.prompt_tokens <= budget for p in prompts)
    # Without low water, every turn over budget removes just enough and changes the prefix.
    assert prompts[0].prompt_tokens <= 2000


def test_split_sections_follows_the_texts_own_structure():
    text = "# Intro\nShort.\n\n# Details\n" + "\n\n".join(f"Paragraph {i}. " + "word " * 50 for i in range(6))
    sections = split_sections(text, limit=120, count=lambda s: len(s) // 3)
    assert sections[0] == "# Intro\nShort."
    assert all(len(s) // 3 <= 120 for s in sections)
    assert "".join(sections).count("Paragraph") == 6


def test_replay_json_shows_stages_and_counts(tmp_path):
    path = tmp_path / "session.json"
    path.write_text(json.dumps(research_session(turns=6, research_chars=4000)))
    out = subprocess.run(
        [sys.executable, "-m", "voice.cli", "replay", str(path), "--context", "4096", "--reserve", "1024",
         "--estimate", "--json"], capture_output=True, text=True, check=True,
    ).stdout
    data = json.loads(out)
    assert data["prompt_tokens"] <= 3072
    assert data["steps"] and {"stage", "removed", "prompt_tokens"} <= set(data["steps"][0])
    assert data["steps"][0]["stage"] == "research"
    assert data["messages"][-1]["content"] == "Compare it with the first one."


def test_replay_of_a_file_that_is_not_a_session_is_one_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"not": "messages"}')
    run = subprocess.run([sys.executable, "-m", "voice.cli", "replay", str(path), "--estimate"],
                         capture_output=True, text=True)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "expected a JSON list" in run.stderr
