"""The local language model: answers, exact counts, cancellation and KV-cache reuse."""

from __future__ import annotations

import threading

import pytest

from models.llm import ContextOverflow, as_plain_text

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
    reply = llm.complete([SYSTEM, {"role": "user", "content": "What is the capital of France?"}], max_tokens=24, temperature=0)
    assert "Paris" in reply


def test_count_is_the_token_length_of_the_rendered_prompt(llm):
    text = llm.render(RESEARCH)
    direct = llm._llm.tokenize(text.encode(), add_bos=True, special=True)
    assert llm.count(RESEARCH) == len(direct) == len(llm.tokens(RESEARCH))
    assert text.endswith("<|im_start|>assistant\n")


def test_per_message_counts_add_up_to_the_prompt(llm):
    simple = [m for m in RESEARCH if m["role"] in ("system", "user")][:2] + [
        {"role": "assistant", "content": "It is in Paris."}, {"role": "user", "content": "How tall?"}]
    assert llm.measure(simple) == llm.count(simple)
    # Parallel tool results merge into one message when rendered, so per-message counts may only overcount.
    assert 0 <= llm.measure(RESEARCH) - llm.count(RESEARCH) <= 8
    assert all(llm.count_message(m) > 0 for m in RESEARCH)


def test_tool_exchanges_render_as_plain_text_for_chatml(llm):
    assert not llm.knows_tools
    plain = as_plain_text(RESEARCH)
    assert [m["role"] for m in plain] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "search" in plain[2]["content"] and "Paris, France" in plain[3]["content"]
    assert "capital of France" in plain[3]["content"]
    reply = llm.stream(RESEARCH, max_tokens=8)
    assert reply.text()
    assert reply.stats.prompt_tokens == llm.count(RESEARCH)


def test_a_cancelled_stream_stops(llm):
    messages = [SYSTEM, {"role": "user", "content": "Write a long story about a dragon and a knight."}]
    reply = llm.stream(messages, max_tokens=200, temperature=0.8)
    pieces = []
    for piece in reply:
        pieces.append(piece)
        if len(pieces) == 3:
            threading.Thread(target=reply.cancel).start()
            threading.Event().wait(0.05)
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


def test_strict_templates_get_alternating_roles_and_per_message_counts(llm):
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    original = llm._template
    llm._template = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(STRICT_TEMPLATE)
    llm._counts.clear()
    try:
        # Results followed by the next question would be two user turns in a row without the join.
        messages = RESEARCH[:5] + [{"role": "user", "content": "And its height?"}]
        text = llm.render(messages)
        assert text.count("<|im_start|>user") == 2  # the question, then the results joined with the follow-up
        assert all(llm.count_message(m) > 0 for m in messages)  # an assistant reply measured after a stub question
        assert llm.count(messages) > 0
    finally:
        llm._template = original
        llm._counts.clear()


TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\\nTools: {{ tools | tojson }}<|im_end|>\\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\\n{{ m['content'] }}"
    "{% for c in m.get('tool_calls') or [] %}<tool_call>{{ c['function'] | tojson }}</tool_call>{% endfor %}"
    "<|im_end|>\\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\\n{% endif %}"
)


def test_templates_that_know_tools_get_them_natively(llm):
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from voice.research import SEARCH_TOOL

    original, knew = llm._template, llm.knows_tools
    llm._template = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(TOOLS_TEMPLATE)
    llm.knows_tools = True
    llm._counts.clear()
    try:
        text = llm.render(RESEARCH, tools=[SEARCH_TOOL])
        assert '"name": "search"' in text.split("<|im_start|>user")[0]  # declared before the conversation
        assert "<tool_call>" in text and "<|im_start|>tool" in text  # the exchange in the template's own form
        assert llm.tools_tokens([SEARCH_TOOL]) == llm.count([], [SEARCH_TOOL]) - llm.count([]) > 20
        assert llm.tools_tokens(None) == 0
    finally:
        llm._template, llm.knows_tools = original, knew
        llm._counts.clear()
    assert llm.tools_tokens([SEARCH_TOOL]) == 0  # ChatML knows no tools: nothing is declared
