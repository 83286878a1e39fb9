"""Measuring prompts: the characters/3 estimate, and a counter that measures each message once.

A `measure(messages) -> tokens` callable gives the size of `messages` rendered as a prompt. The
service passes the model's own tokenizer over its chat template; `estimate` is the decision
record's three-characters-per-token rule, for replays without a model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from fitting.messages import Entry, Message

Measure = Callable[[list[Message]], int]

# Tokens a chat template spends around each message (role markers) and before the reply.
MESSAGE_FRAMING = 4
REPLY_FRAMING = 3
CHARS_PER_TOKEN = 3  # the decision record's estimate


def message_chars(message: Message) -> int:
    chars = len(message.get("content") or "") + len(message.get("tool_call_id") or "")
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        chars += len(call.get("id", "")) + len(function.get("name", "")) + len(function.get("arguments", ""))
    return chars


def estimate_text(text: str) -> int:
    """Tokens of `text` estimated at three characters each."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def estimate_message(message: Message) -> int:
    """One message's tokens estimated: its text, its calls and the template's framing around it."""
    return MESSAGE_FRAMING + math.ceil(message_chars(message) / CHARS_PER_TOKEN)


def estimate(messages: list[Message]) -> int:
    """A prompt's tokens estimated at three characters each, plus the template's framing."""
    return REPLY_FRAMING + sum(estimate_message(m) for m in messages)


class Counter:
    """Wraps a `measure` callable: the prompt's fixed cost once, then one call per message.

    A message's tokens are `measure([message]) - measure([])`; the prompt's total is derived by
    adding them, never by re-measuring the whole prompt.
    """

    def __init__(self, measure: Measure):
        self._measure = measure
        self.calls = 0
        self.overhead = self._call([])

    def _call(self, messages: list[Message]) -> int:
        self.calls += 1
        return int(self._measure(messages))

    def message(self, message: Message) -> int:
        return max(0, self._call([message]) - self.overhead)

    def text(self, text: str) -> int:
        """Tokens of `text` as the content of one message."""
        return self.message({"role": "user", "content": text})

    def entries(self, entries: Iterable[Entry]) -> None:
        for entry in entries:
            entry.tokens = self.message(entry.message)

    def total(self, entries: Iterable[Entry]) -> int:
        return self.overhead + sum(entry.tokens for entry in entries if not entry.removed)
