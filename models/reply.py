"""A reply as it streams, from the model here or on a server: its pieces, its figures, its cancel."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus

from fitting.errors import ParlourError


class ContextOverflow(ParlourError, ValueError):
    """A prompt longer than the model's context window."""

    code, status = "cannot_respond", HTTPStatus.BAD_REQUEST


@dataclass
class ReplyStats:
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens reused from the KV cache
    evaluated_tokens: int = 0  # prompt tokens the model had to process
    completion_tokens: int = 0
    shifted_tokens: int = 0  # of the cached ones, those kept past a removed span (KV shift)
    # Evidence evaluated apart from the history (models.llm): of the cached tokens, those placed
    # after the history (at this reply, or by a draft's prefill before it); the tokens the second
    # context evaluated for them at this reply; and the time both took at this reply.
    placed_tokens: int = 0
    apart_tokens: int = 0
    placing_ms: int = 0
    finish_reason: str = ""  # "stop", "length" or "cancelled"


@dataclass
class ReplyStream:
    """Iterate for text pieces as they are generated; `cancel()` from any thread stops it. A model
    makes the reply first and `start`s it with its pieces, since their generator reads the reply's
    stats and whether it is cancelled."""

    _pieces: Iterator[str] = field(default_factory=lambda: iter(()))
    stats: ReplyStats = field(default_factory=ReplyStats)
    _cancelled: threading.Event = field(default_factory=threading.Event)
    _on_cancel: Callable[[], None] | None = None  # what else stops it (a remote reply closes its stream)

    def start(self, pieces: Iterator[str], on_cancel: Callable[[], None] | None = None) -> ReplyStream:
        """This reply, streaming `pieces`; `on_cancel` is what else `cancel()` does (a remote reply
        closes its connection)."""
        self._pieces = pieces
        if on_cancel is not None:
            self._on_cancel = on_cancel
        return self

    def __iter__(self) -> Iterator[str]:
        return self._pieces

    def cancel(self) -> None:
        self._cancelled.set()
        if self._on_cancel is not None:
            self._on_cancel()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def text(self) -> str:
        """Consume the whole stream and return the reply."""
        return "".join(self)
