"""Fitting's guarantees over random sessions (hypothesis), and the sessions they were found in."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitting import FitError, estimate, fit
from harness.sessions import SYSTEM, assistant, call, result, user
from tests.helpers import check_prompt


# Properties over random sessions ---------------------------------------------------------------
@st.composite
def sessions(draw):
    messages = [SYSTEM]  # sessions always start with the system prompt the store keeps
    text = st.text(alphabet="abc xyz.\n", min_size=0, max_size=400)
    next_id = 0
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["user", "assistant", "none", "research", "crash", "stray", "parallel"]))
        if kind == "user":
            messages.append(user(draw(text).strip() or "?"))
        elif kind == "assistant":
            messages.append(assistant(draw(text)))
        elif kind == "none":
            messages.append(assistant(None))
        elif kind in ("research", "parallel", "crash"):
            count = 3 if kind == "parallel" else 1
            ids = [f"c{next_id + i}" for i in range(count)]
            next_id += count
            messages.append(call(*ids))
            answered = ids if kind != "crash" else []
            if kind == "parallel" and draw(st.booleans()):
                answered = ids[:2]
            messages.extend(result(i, draw(text)) for i in answered)
        else:
            messages.append(result("nowhere", draw(text)))
    messages.append(user(draw(text).strip() or "last?"))
    if draw(st.booleans()):  # the current turn did research too
        messages += [call("now"), result("now", draw(st.text(alphabet="evidence .\n", max_size=3000)))]
    return messages


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=sessions(),
    budget=st.integers(60, 2500),
    generator=st.sampled_from(["none", "works", "fails"]),
    low_water=st.one_of(st.none(), st.integers(30, 2500)),
)
def test_fitted_prompts_always_hold(messages, budget, generator, low_water):
    generate = {"none": None, "works": lambda p: "short summary.", "fails": lambda p: 1 / 0}[generator]
    question = next(m for m in reversed(messages) if m["role"] == "user")
    try:
        fitted = fit(messages, budget, generate=generate, low_water=low_water)
    except FitError:
        assert estimate([SYSTEM]) + 8 > budget  # only a system prompt over the budget may fail
        return
    assert fitted.prompt_tokens <= budget
    assert estimate(fitted.messages) <= budget
    check_prompt(fitted.messages)
    last_user = next(m for m in reversed(fitted.messages) if m["role"] == "user")
    if not any(s.stage in ("cut", "condense") for s in fitted.steps):
        assert last_user["content"].endswith(question["content"])  # the current question stays whole
    else:
        assert last_user["content"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    first=sessions(),
    later=sessions(),
    budget=st.integers(150, 2500),
    low_water=st.one_of(st.none(), st.integers(100, 2500)),
)
def test_the_next_turn_keeps_the_guarantees_with_previous_removals_and_summaries(first, later, budget, low_water):
    def summarizer(prompt):
        return "short summary."

    before = fit(first, budget, generate=summarizer, low_water=low_water)
    grown = first + [assistant("reply")] + later[1:]  # the session only grows
    after = fit(grown, budget, generate=summarizer, previous=before.removed, summary=before.summary,
                low_water=low_water)
    assert after.prompt_tokens <= budget and estimate(after.messages) <= budget
    check_prompt(after.messages)
    if after.summary is not None:
        assert 0 < after.summary.start < after.summary.end <= len(grown)


def test_a_reused_summary_gets_its_room_so_it_is_not_attached_and_taken_off_again():
    from fitting.summary import Summary

    messages = [SYSTEM, user("A" * 300), assistant("B" * 300), user("C" * 300), assistant("D" * 300), user("Q?")]
    stored = Summary(1, 3, "- The user said A. " * 10)  # covers the first exchange, about 60 tokens
    budget = estimate([SYSTEM] + messages[3:]) + 20  # fits without the first exchange, not with the summary
    fitted = fit(messages, budget, summary=stored, previous=[1, 2])
    assert fitted.summary == stored and fitted.prompt_tokens <= budget
    assert not any(s.stage == "summary" and s.detail.startswith("removed") for s in fitted.steps)
    assert "The user said A." in fitted.messages[0]["content"]
    assert fitted.removed == [1, 2, 3, 4]  # the next exchange made the room
    check_prompt(fitted.messages)


def test_the_outland_shaped_session_keeps_its_whole_conversation_when_only_what_must_go_goes():
    # ADR 0140's session: 13 earlier messages (7,780 characters of conversation) and 30,522 of
    # search results over six research turns, then a follow-up, on an 8,192-token model.
    messages = [SYSTEM]
    for turn in range(6):
        messages.append(user(f"Question {turn}: " + "q" * 600))
        messages += [call(f"call_{turn}"), result(f"call_{turn}", "r" * 5_087)]
        messages.append(assistant(f"Answer {turn}: " + "a" * 600))
    messages.append(user("And the gateway? " + "q" * 400))
    messages.append(user("Compare it with the first one."))  # the 14th message: the question now
    conversation = [i for i, m in enumerate(messages[:-1]) if m["role"] in ("user", "assistant")
                    and not m.get("tool_calls")]
    assert len(conversation) == 13
    budget = 8192 - 256
    fitted = fit(messages, budget)  # what the service does now that the model shifts its cache
    assert not set(conversation) & set(fitted.removed)  # 13 of 13 conversation messages kept
    assert any(m["role"] == "tool" for m in fitted.messages) and fitted.prompt_tokens <= budget
    kept_research = sum(m["role"] == "tool" for m in fitted.messages)
    halved = fit(messages, budget, low_water=budget // 2)  # the old low-water mark...
    assert sum(m["role"] == "tool" for m in halved.messages) < kept_research  # ...threw more research away
