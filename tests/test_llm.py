"""The local language model: answers, exact counts, cancellation, KV-cache reuse, and fitting with its tokenizer."""

from __future__ import annotations

import threading

import pytest

from fitting import fit
from harness.sessions import research_session
from models.chat_template import as_plain_text
from models.kv_cache import common_prefix
from models.reply import ContextOverflow
from models.tool_calls import MARKERS
from tests.helpers import check_prompt

SYSTEM = {"role": "system", "content": "You are a helpful assistant. Answer briefly."}

RESEARCH = [
    SYSTEM,
    {"role": "user", "content": "Where is the Eiffel Tower?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"query": "Eiffel"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "search", "arguments": '{"query": "Paris"}'}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "The Eiffel Tower stands in Paris, France."},
    {"role": "tool", "tool_call_id": "call_2", "content": "Paris is the capital of France."},
    {"role": "assistant", "content": "It is in Paris."},
    {"role": "user", "content": "How tall is it?"},
]


def test_answers_the_capital_of_france(llm):
    reply = llm.complete([SYSTEM, {"role": "user", "content": "What is the capital of France?"}], max_tokens=24,
                         temperature=0)
    assert "Paris" in reply


EASY = [  # each asked in a fresh conversation; any of the words counts as right
    ("What is the capital of France?", ["Paris"]), ("What is the capital of Japan?", ["Tokyo"]),
    ("How many legs does a spider have?", ["eight", "8"]), ("What is 12 plus 7?", ["19"]),
    ("Which planet is known as the red planet?", ["Mars"]),
    ("What language do people speak in Brazil?", ["Portuguese"]),
    ("Who wrote Romeo and Juliet?", ["Shakespeare"]),
    ("At what temperature in Celsius does water boil at sea level?", ["100"]),
    ("What colour do you get when you mix blue and yellow?", ["green"]),
]


def test_the_default_model_answers_the_easy_questions_right(llm):
    system = {"role": "system", "content": "Answer in one or two short sentences."}
    wrong = []
    for question, expected in EASY:
        reply = llm.complete([system, {"role": "user", "content": question}], max_tokens=32, temperature=0)
        if not any(word.lower() in reply.lower() for word in expected):
            wrong.append((question, reply))
    fruit = [system, {"role": "user", "content": "I just bought a banana."}]
    fruit += [{"role": "assistant", "content": llm.complete(fruit, max_tokens=24, temperature=0)},
              {"role": "user", "content": "What colour is that fruit, usually?"}]
    reply = llm.complete(fruit, max_tokens=24, temperature=0)
    if "yellow" not in reply.lower():
        wrong.append(("the fruit named before", reply))
    assert wrong == []


def test_count_is_the_token_length_of_the_rendered_prompt_for_every_installed_profile(profile_llm):
    for messages in (RESEARCH, RESEARCH[:2], [RESEARCH[1]]):
        text = profile_llm.render(messages)
        direct = profile_llm._llm.tokenize(text.encode(), add_bos=True, special=True)
        bos = profile_llm._llm.tokenize(b"", add_bos=True, special=True)
        if bos and direct[:2] == bos * 2:  # the template wrote BOS itself; tokenize added a second
            direct = direct[1:]
        assert profile_llm.count(messages) == len(direct) == len(profile_llm.tokens(messages))
        assert text.endswith("<|im_start|>assistant\n")


def test_per_message_counts_add_up_to_the_prompt(profile_llm):
    simple = [m for m in RESEARCH if m["role"] in ("system", "user")][:2] + [
        {"role": "assistant", "content": "It is in Paris."}, {"role": "user", "content": "How tall?"}]
    assert profile_llm.measure(simple) == profile_llm.count(simple)
    # Parallel tool results merge into one message when rendered, so per-message counts may only overcount.
    assert 0 <= profile_llm.measure(RESEARCH) - profile_llm.count(RESEARCH) <= 8
    assert all(profile_llm.count_message(m) > 0 for m in RESEARCH)


def test_the_default_template_gets_tool_exchanges_natively(llm):
    from voice.knowledge.research import SEARCH_TOOL

    assert llm.knows_tools
    text = llm.render(RESEARCH, tools=[SEARCH_TOOL])
    declared, conversation = text.split("<|im_start|>user", 1)
    assert '"name": "search"' in declared and "<tools>" in declared
    # Arguments reach the template as an object, so its tojson writes them once, not as a string.
    assert '<tool_call>\n{"name": "search", "arguments": {"query": "Eiffel"}}\n</tool_call>' in conversation
    assert conversation.count("<tool_response>") == 2
    # What the declaration adds to this whole conversation's prompt, measured on it, not on the stub
    # tools_tokens measures.
    added = len(llm.tokens(RESEARCH, [SEARCH_TOOL])) - len(llm.tokens(RESEARCH))
    assert llm.tools_tokens([SEARCH_TOOL]) == added > 100
    assert llm.tools_tokens(None) == 0


def test_tool_exchanges_render_as_plain_text_for_chatml(tiny_llm):
    from voice.knowledge.research import SEARCH_TOOL

    assert not tiny_llm.knows_tools and tiny_llm.tools_tokens([SEARCH_TOOL]) == 0
    plain = as_plain_text(RESEARCH)
    assert [m["role"] for m in plain] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "search" in plain[2]["content"] and "Paris, France" in plain[3]["content"]
    assert "capital of France" in plain[3]["content"]
    reply = tiny_llm.stream(RESEARCH, max_tokens=8)
    assert reply.text()
    assert reply.stats.prompt_tokens == tiny_llm.count(RESEARCH)


def test_a_cancelled_stream_stops(llm):
    messages = [SYSTEM, {"role": "user", "content": "Write a long story about a dragon and a knight."}]
    reply = llm.stream(messages, max_tokens=200, temperature=0.8)
    pieces = []
    for piece in reply:
        pieces.append(piece)
        if len(pieces) == 3:
            canceller = threading.Thread(target=reply.cancel)  # from another thread, as a client's cancel
            canceller.start()
            canceller.join()
    assert reply.cancelled
    assert reply.stats.finish_reason == "cancelled"
    assert 3 <= reply.stats.completion_tokens < 20


def test_a_prompt_that_extends_the_last_one_reuses_the_cache(llm):
    first = [SYSTEM, {"role": "user", "content": "Name a colour."}]
    reply = llm.stream(first, max_tokens=8)
    answer = reply.text()
    follow_up = first + [{"role": "assistant", "content": answer}, {"role": "user", "content": "Another one?"}]
    second = llm.stream(follow_up, max_tokens=8)
    second.text()
    assert second.stats.cached_tokens >= llm.count(first) - 1
    assert second.stats.evaluated_tokens == second.stats.prompt_tokens - second.stats.cached_tokens
    assert second.stats.evaluated_tokens < second.stats.prompt_tokens / 2


def test_a_reply_kept_from_opening_with_a_call_starts_with_words(llm):
    messages = [SYSTEM, {"role": "user", "content": 'Reply with only this JSON and nothing else: {"ok": true}'}]
    assert llm.complete(messages, max_tokens=8, temperature=0).lstrip().startswith(MARKERS)
    kept = llm.stream(messages, max_tokens=8, temperature=0, open_with_call=False).text()
    assert kept.strip() and not kept.lstrip().startswith(MARKERS)


def test_a_prompt_over_the_context_is_refused(llm):
    huge = [SYSTEM, {"role": "user", "content": "word " * (llm.context + 100)}]
    with pytest.raises(ContextOverflow, match="does not fit"):
        llm.stream(huge)


STRICT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] != 'system' and (m['role'] == 'user') != (loop.index0 % 2 == 1) %}"
    "{{ raise_exception('roles must alternate user/assistant') }}{% endif %}"
    "<|im_start|>{{ m['role'] }}\\n{{ m['content'] }}<|im_end|>\\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\\n{% endif %}"
)


def test_strict_templates_get_alternating_roles_and_per_message_counts(tiny_llm):
    from models.chat_template import ChatTemplate

    original = tiny_llm._template
    tiny_llm._template = ChatTemplate(STRICT_TEMPLATE)
    tiny_llm._counts.clear()
    try:
        # Results followed by the next question would be two user turns in a row without the join.
        messages = RESEARCH[:5] + [{"role": "user", "content": "And its height?"}]
        text = tiny_llm.render(messages)
        assert text.count("<|im_start|>user") == 2  # the question, then the results joined with the follow-up
        assert all(tiny_llm.count_message(m) > 0 for m in messages)  # an assistant reply measured after a stub question
        assert tiny_llm.count(messages) > 0
    finally:
        tiny_llm._template = original
        tiny_llm._counts.clear()


def test_removed_spans_find_what_was_taken_out_of_the_middle():
    from models.kv_cache import removed_spans

    old = list(range(100))
    new = old[:10] + old[30:60] + old[80:] + [500, 501]
    assert removed_spans(old, new, min_run=8) == ([(10, 30), (60, 80)], 60)
    assert removed_spans(old, old[:50] + [7] * 20, min_run=8) == ([], 50)  # new text: stop there
    assert removed_spans(old, old[:10] + old[95:], min_run=8) == ([], 10)  # too short a run to trust


def test_a_removed_exchange_keeps_the_cache_of_what_follows_it(llm):
    research = [{"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "search", "arguments": '{"query": "tides"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "The tides at Galway rise twice a day. " * 40}]
    talk = [{"role": "user", "content": "Tell me about the tides."}, *research,
            {"role": "assistant", "content": "They rise twice a day."},
            {"role": "user", "content": "My name is Ada and I live in Galway by the sea."},
            {"role": "assistant", "content": "Nice to meet you, Ada."}]
    question = {"role": "user", "content": "What is the capital of France?"}
    llm.stream([SYSTEM, *talk, {"role": "user", "content": "Thanks."}], max_tokens=4, temperature=0).text()
    without_research = [SYSTEM, talk[0], *talk[3:], question]  # old research goes first (ADR 0140)
    shifted = llm.stream(without_research, max_tokens=12, temperature=0)
    answer = shifted.text()
    stats = shifted.stats
    prefix_alone = llm.count([SYSTEM, talk[0]]) - llm.prompt_overhead  # where the prompts first differ, about
    assert stats.shifted_tokens > 40  # the later exchange's cache was kept, not evaluated again
    assert stats.cached_tokens > prefix_alone + 40
    assert stats.evaluated_tokens == stats.prompt_tokens - stats.cached_tokens
    llm.kv_shift = False
    try:
        llm.stream([SYSTEM, *talk, {"role": "user", "content": "Thanks."}], max_tokens=4, temperature=0).text()
        exact = llm.stream(without_research, max_tokens=12, temperature=0)
        exact_answer = exact.text()
    finally:
        llm.kv_shift = True
    assert exact.stats.shifted_tokens == 0 and exact.stats.cached_tokens < stats.cached_tokens
    assert "Paris" in answer and "Paris" in exact_answer


def test_an_exact_prefill_replaces_what_a_shift_kept(llm):
    research = [{"role": "assistant", "content": None, "tool_calls": [{"id": "call_9", "type": "function", "function": {
        "name": "search", "arguments": '{"query": "ferries"}'}}]},
        {"role": "tool", "tool_call_id": "call_9", "content": "The Aran ferry leaves Rossaveal at ten. " * 40}]
    talk = [{"role": "user", "content": "When does the ferry leave?"}, *research,
            {"role": "assistant", "content": "At ten, from Rossaveal."},
            {"role": "user", "content": "I keep a red kayak called Puffin at the pier in Spiddal."},
            {"role": "assistant", "content": "A fine name for a kayak."}]
    llm.stream([SYSTEM, *talk, {"role": "user", "content": "Thanks."}], max_tokens=2, temperature=0).text()
    history = [SYSTEM, talk[0], *talk[3:]]  # the research went
    shifted = llm.stream(history + [{"role": "user", "content": "What is my kayak called?"}], max_tokens=2,
                         temperature=0)
    shifted.text()
    assert shifted.stats.shifted_tokens > 20
    # A turn that comes while the refresh runs gets the shifted cache back, not a cache cut short.
    cached = llm._llm.n_tokens
    checks = iter([False, True])  # one batch, then a turn is waiting
    assert llm.prefill(history, exact=True, stop=lambda: next(checks), batch=8) == 8
    assert llm._llm.n_tokens == cached and llm.approximate > 20  # still to be refreshed
    # What the shift kept, again (not the next turn's opening).
    assert llm.prefill(history, exact=True) >= shifted.stats.shifted_tokens - 4
    assert llm.prefill(history, exact=True) == 0 and llm.approximate == 0  # exact now: nothing left to redo
    after = llm.stream(history + [{"role": "user", "content": "What is my kayak called?"}], max_tokens=8,
                       temperature=0)
    assert "Puffin" in after.text() and after.stats.shifted_tokens == 0
    assert after.stats.cached_tokens >= llm.count(history) - llm.prompt_overhead - 2


def test_prefill_evaluates_the_start_of_the_next_prompt_and_stops_when_told(llm):
    system = {"role": "system", "content": "You are Quillon, who keeps lighthouse logs. Answer in one line."}
    question = [system, {"role": "user", "content": "Who are you?"}]
    assert llm.prefill([system], stop=lambda: True) == 0  # told to stop before the first batch
    evaluated = llm.prefill([system])
    assert evaluated > 10 and llm.prefill([system]) == 0  # already cached: nothing to do
    reply = llm.stream(question, max_tokens=4, temperature=0)
    reply.text()
    assert reply.stats.cached_tokens >= llm.count([system]) - llm.prompt_overhead - 2


def test_discard_removes_what_follows_a_prompt_only_while_the_cache_holds_it(llm):
    system = {"role": "system", "content": "You are Quillon, who keeps lighthouse logs. Answer in one line."}
    guessed = [system, {"role": "user", "content": "When does the lamp get lit tonight?"}]
    llm.prefill(guessed)
    before = llm._llm.n_tokens
    llm.discard([system])
    kept = llm._llm.n_tokens
    assert kept < before and llm.prefill([system]) == 0  # the system prompt stays cached, the guess went
    assert llm.prefill(guessed) == before - kept  # the guessed question is evaluated again
    other = {"role": "system", "content": "You are Marra, a harbour pilot."}
    llm.discard([other])  # the cache holds another prompt: left as it is
    assert llm._llm.n_tokens == before


def test_discard_keeps_what_the_next_prompt_shares_with_the_guess(llm):
    system = {"role": "system", "content": "You are Quillon, who keeps lighthouse logs. Answer in one line."}
    evidence = ("[1] Lamp log (log.md)\nThe lamp is lit at dusk and put out at dawn. "
                "Answer the question from these passages.\n\n")
    guessed = [system, {"role": "user", "content": evidence + "When is the lamp"}]
    asked = [system, {"role": "user", "content": evidence + "When is the lamp put out?"}]
    llm.prefill(guessed)
    shared = common_prefix(llm._llama_context.cached_tokens(), llm.tokens(asked))
    llm.discard(asked, held=1)
    assert llm._llm.n_tokens == shared > llm.count([system])  # the evidence stays, the guess's end went
    assert 0 < llm.prefill(asked) < 16  # only the question's last words are evaluated
    cached = llm._llm.n_tokens
    llm.discard([{"role": "system", "content": "You are Marra, a harbour pilot."}, *asked[1:]], held=1)
    assert llm._llm.n_tokens == cached  # another history: left as it is


def test_evidence_deep_in_a_session_is_evaluated_apart_and_placed_after_the_history(llm):
    talk = [{"role": "user", "content": "Tell me about the tides. " + "The tides at Galway rise twice a day. " * 120},
            {"role": "assistant", "content": "They rise twice a day."}]
    evidence = ("[1] House notes (notes.md)\nThe code for the side gate at Corrib House is 4417. "
                "The bins go out on Tuesday night.\n\n")
    question = "What is the code for the side gate?"
    asked = [SYSTEM, *talk, {"role": "user", "content": evidence + question}]
    assert llm.count(asked[:-1]) > 1024  # deep enough to be worth it (models.llm.APART_AFTER)
    # Warming the history also evaluates its last tokens in the second context, ahead of the evidence.
    warmed = llm.prefill(asked[:-1])
    assert warmed > llm.count(asked[:-1]) + 100
    reply = llm.stream(asked, max_tokens=16, temperature=0, apart=question)
    answer = reply.text()
    stats = reply.stats
    evidence_tokens = llm.count([*asked[:-1], {"role": "user", "content": evidence}]) - llm.count(asked[:-1])
    assert abs(stats.placed_tokens - evidence_tokens) <= 2 and abs(stats.apart_tokens - stats.placed_tokens) <= 2
    assert stats.evaluated_tokens < 20  # the question and the reply's header alone, after the history
    assert "4417" in answer
    assert llm.approximate >= stats.placed_tokens  # the placed cells are redone exactly between turns
    assert llm.prefill([*asked, {"role": "assistant", "content": answer}], exact=True) > stats.placed_tokens
    assert llm.approximate == 0
    # A draft's prefill places the evidence while the key is held: the turn evaluates the question alone.
    llm.discard(asked[:-1])
    llm.prefill(asked[:-1])  # the history warmed again: the refresh warmed the next one's end
    drafted = llm.prefill([*asked[:-1], {"role": "user", "content": evidence}], apart="")
    assert abs(drafted - evidence_tokens) <= 2  # the evidence alone, apart
    reply = llm.stream(asked, max_tokens=16, temperature=0, apart=question)
    assert "4417" in reply.text() and reply.stats.evaluated_tokens < 20
    assert abs(reply.stats.placed_tokens - evidence_tokens) <= 2 and reply.stats.apart_tokens == 0
    # Behind a short history the evidence is evaluated in place, exactly.
    shallow = llm.stream([SYSTEM, asked[-1]], max_tokens=16, temperature=0, apart=question)
    assert "4417" in shallow.text() and shallow.stats.placed_tokens == 0 and llm.approximate == 0


# Fitting with the model's own tokenizer ----------------------------------------------------------
def test_fitting_with_the_models_tokenizer_fits_the_real_prompt(llm):
    messages = research_session(turns=6, research_chars=3000)
    fitted = fit(messages, budget=3000, measure=llm.measure)
    assert fitted.prompt_tokens <= 3000
    assert llm.count(fitted.messages) <= fitted.prompt_tokens  # the derived total never undercounts
    check_prompt(fitted.messages)
