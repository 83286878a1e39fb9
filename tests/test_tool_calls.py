"""The one tool-call parser, on the shapes small local models really write (no model needed)."""

from __future__ import annotations

import json

import pytest

from models.tool_calls import CallScanner, parse_tool_calls

NAMES = {"search", "weather"}


def calls_of(text: str) -> list[tuple[str, dict]]:
    parsed = parse_tool_calls(text, NAMES)
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.calls]


@pytest.mark.parametrize("text", [
    '<tool_call>\n{"name": "search", "arguments": {"query": "boiler code"}}\n</tool_call>',
    '<tool_call>{"name": "search", "arguments": {"query": "boiler code"}}',  # closing tag never came
    '{"name": "search", "arguments": {"query": "boiler code"}}',
    '```json\n{"name": "search", "arguments": {"query": "boiler code"}}\n```',
    '{{"name": "search", "arguments": {"query": "boiler code"}}}',  # Qwen's template shows {{ }}
    '{{"name": "search", "arguments": {{"query": "boiler code"}}}}',
    '{"name": "search", "parameters": {"query": "boiler code"}}',
    '{"name": "search", "arguments": "{\\"query\\": \\"boiler code\\"}"}',  # arguments as a JSON string
    '{"type": "function", "function": {"name": "search", "arguments": {"query": "boiler code"}}}',
    '[{"name": "search", "arguments": {"query": "boiler code"}}]',
])
def test_each_shape_gives_one_openai_call_and_no_text(text):
    parsed = parse_tool_calls(text, NAMES)
    assert calls_of(text) == [("search", {"query": "boiler code"})]
    assert parsed.text == ""
    call = parsed.calls[0]
    assert call["type"] == "function" and call["id"].startswith("call_")


def test_several_calls_in_one_reply_keep_their_order():
    text = ('<tool_call>\n{"name": "weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "search", "arguments": {"query": "Oslo trip"}}\n</tool_call>')
    assert calls_of(text) == [("weather", {"city": "Oslo"}), ("search", {"query": "Oslo trip"})]
    ids = [c["id"] for c in parse_tool_calls(text, NAMES).calls]
    assert len(set(ids)) == 2


def test_half_text_half_call_keeps_the_words():
    text = 'Let me look that up.\n<tool_call>\n{"name": "search", "arguments": {"query": "boiler"}}\n</tool_call>'
    parsed = parse_tool_calls(text, NAMES)
    assert parsed.text == "Let me look that up."
    assert calls_of(text) == [("search", {"query": "boiler"})]


def test_an_invented_tool_is_no_call_and_no_text():
    parsed = parse_tool_calls('<tool_call>{"name": "calculator", "arguments": {"x": "17*3"}}</tool_call>', NAMES)
    assert parsed.calls == [] and parsed.text == ""


@pytest.mark.parametrize("text", [
    "Paris is the capital of France.",
    'In JSON an object looks like {"a": 1}.',
    "Use {braces} carefully.",
    "```python\nprint({'a': 1})\n```",
])
def test_answers_are_not_calls(text):
    parsed = parse_tool_calls(text, NAMES)
    assert parsed.calls == []
    assert parsed.text == text


def test_the_scanner_releases_words_and_holds_a_call():
    scanner = CallScanner(NAMES)
    pieces = ["Let me", " check.", " <tool", "_call>", '{"name": "search", ', '"arguments": {"query": "x"}}',
              "</tool_call>"]
    shown = "".join(scanner.feed(p) for p in pieces)
    assert shown == "Let me check. "
    parsed = scanner.finish()
    assert [c["function"]["name"] for c in parsed.calls] == ["search"] and parsed.text == ""


def test_the_scanner_gives_back_held_text_that_was_no_call():
    scanner = CallScanner(NAMES)
    shown = "".join(scanner.feed(p) for p in ["The set ", "{1, 2}", " has two members."])
    assert shown == "The set "
    parsed = scanner.finish()
    assert parsed.calls == [] and shown + parsed.text == "The set {1, 2} has two members."


def test_the_scanner_waits_on_a_marker_still_arriving():
    scanner = CallScanner(NAMES)
    assert scanner.feed("Sure <tool") == "Sure "
    assert scanner.feed(" is a word.") == "<tool is a word."
