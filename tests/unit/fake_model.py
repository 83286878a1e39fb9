"""A language model for the unit tier: a real `models.model.Model` that loads nothing.

It writes scripted replies token by token (a token is a word with the white space before it),
counts a message as its words plus a fixed overhead, and records what it was asked: the prompts of
`stream` and `complete`, the prefills and the discards. Its cache is a list of messages, kept and
trimmed as `LanguageModel` keeps and trims its tokens, so a test can see what a prefill left behind.
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from models.kv_cache import common_prefix
from models.reply import ContextOverflow, ReplyStream

MESSAGE_OVERHEAD = 4  # a message's role and markers, as a chat template adds them


def words(text: str) -> int:
    return len(text.split())


def tokens_of(text: str) -> list[str]:
    """The reply's tokens: each word with the white space before it."""
    return re.findall(r"\s*\S+", text)


class FakeModel:
    """`replies` are written in order, one for each `stream` or `complete`; once they run out, the
    model says so by raising (a test asked it more than it expected)."""

    name = "fake"
    backend = "local"
    prompt_overhead = 3

    def __init__(self, replies: Iterable[str] = (), context: int = 4096, warms: bool = True,
                 kv_shift: bool = False, knows_tools: bool = True):
        self.replies = deque(replies)
        self.context, self.warms, self.kv_shift, self.knows_tools = context, warms, kv_shift, knows_tools
        self.approximate = 0  # nothing here is kept by a shift
        self.cache: list[dict] = []  # the messages the "KV cache" holds, in order
        self.prompts: list[list[dict]] = []  # every stream's and complete's messages, in order
        self.stream_options: list[dict] = []  # what else each stream was asked (tools, max_tokens, ...)
        self.prefills: list[list[dict]] = []
        self.prefilled_apart: list[str | None] = []  # each prefill's `apart`
        self.discards: list[tuple[list[dict], int | None]] = []  # (messages, held)
        self._lock = threading.Lock()  # replies run in worker threads

    # Counting ---------------------------------------------------------------------------------
    def count_message(self, message: dict) -> int:
        calls = message.get("tool_calls")
        return MESSAGE_OVERHEAD + words(str(message.get("content") or "")) + (words(json.dumps(calls)) if calls else 0)

    def measure(self, messages: list[dict]) -> int:
        return self.prompt_overhead + sum(self.count_message(m) for m in messages)

    def tools_tokens(self, tools: list[dict] | None) -> int:
        return words(json.dumps(tools)) if tools else 0

    def count(self, messages: list[dict], tools: list[dict] | None = None) -> int:
        return self.measure(messages) + self.tools_tokens(tools)

    # Generation -------------------------------------------------------------------------------
    def stream(self, messages: list[dict], max_tokens: int = 256, temperature: float = 0.2,
               tools: list[dict] | None = None, open_with_call: bool = True, not_like: str = "",
               must_call: bool | str = False, apart: str | None = None) -> ReplyStream:
        prompt_tokens = self.count(messages, tools)
        if prompt_tokens >= self.context:
            raise ContextOverflow(f"prompt of {prompt_tokens} tokens does not fit the {self.context}-token context")
        with self._lock:
            self.prompts.append(list(messages))
            self.stream_options.append({"max_tokens": max_tokens, "temperature": temperature, "tools": tools,
                                        "open_with_call": open_with_call, "not_like": not_like,
                                        "must_call": must_call, "apart": apart})
            if not self.replies:
                raise AssertionError(f"the fake model has no scripted reply left for {messages[-1:]}")
            text = self.replies.popleft()
            cached = common_prefix(self.cache, list(messages))
            self.cache = list(messages)
        reply = ReplyStream(iter(()))
        stats = reply.stats
        stats.prompt_tokens = prompt_tokens
        stats.cached_tokens = self.measure(messages[:cached]) if cached else 0
        stats.evaluated_tokens = prompt_tokens - stats.cached_tokens
        reply.start(self._write(tokens_of(text), max_tokens, reply))
        return reply

    def _write(self, pieces: list[str], max_tokens: int, reply: ReplyStream) -> Iterator[str]:
        stats = reply.stats
        stats.finish_reason = "stop"
        for number, piece in enumerate(pieces):
            if reply.cancelled:
                stats.finish_reason = "cancelled"
                return
            if number == max_tokens:
                stats.finish_reason = "length"
                return
            stats.completion_tokens += 1
            yield piece
        if reply.cancelled:
            stats.finish_reason = "cancelled"

    def complete(self, messages: list[dict], max_tokens: int = 256, temperature: float = 0.2) -> str:
        return self.stream(messages, max_tokens, temperature).text()

    # The cache --------------------------------------------------------------------------------
    def prefill(self, messages: list[dict], tools: list[dict] | None = None,
                stop: Callable[[], bool] = lambda: False, batch: int = 64, exact: bool = False,
                progress: Callable[[int], None] = lambda evaluated: None, apart: str | None = None) -> int:
        """A batch is one message here: `stop` is asked before each, `progress` told after each."""
        with self._lock:
            self.prefills.append(list(messages))
            self.prefilled_apart.append(apart)
        kept = common_prefix(self.cache, messages)
        self.cache = self.cache[:kept]
        evaluated = 0
        for message in messages[kept:]:
            if stop():
                break
            self.cache.append(message)
            evaluated += self.count_message(message)
            progress(evaluated)
        return evaluated

    def discard(self, messages: list[dict], tools: list[dict] | None = None, held: int | None = None) -> None:
        with self._lock:
            self.discards.append((list(messages), held))
        shared = common_prefix(self.cache, messages)
        if shared < (len(messages) if held is None else held) or len(self.cache) <= shared:
            return  # the cache has moved on to another prompt, or holds nothing past the shared part
        self.cache = self.cache[:shared]

    def health(self) -> dict:
        return {"engine": "fake"}
