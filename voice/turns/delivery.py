"""A reply as it reaches the listener, and its stored row: the turn engine is the row's one owner.

Text counts as delivered once the engine has yielded it, that is once the front end has sent it;
a spoken reply's sentence once its audio is sent (the request's `Voice`, which reports each
sentence). The row appears at the reply's first words, stores each delivered sentence
(`voice.store.reply_row`), and is finished once the last of the reply is delivered. A reply that
fails or is stopped keeps what was delivered, as `interrupted`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Protocol

from voice.store.reply_row import ReplyRow
from voice.store.sessions import StoredMessage
from voice.turns.figures import TurnFigures


class Voice(Protocol):
    """A front end that speaks the reply (`voice.speech.speaker.Speaker`)."""

    timeline: list[list]  # [sentence, start_ms, end_ms] of the audio sent
    delivered: Callable[[str, list[list]], Awaitable[None]] | None  # told each sentence once its audio is sent

    def feed(self, text: str) -> None: ...

    async def finish(self, whole: bool = True) -> None:
        """Speak the rest (unless not `whole`) and wait until the last audio is sent."""


class Delivery:
    def __init__(self, row: ReplyRow, voice: Voice | None):
        self.row, self.voice = row, voice
        self.text = ""  # everything the engine yielded
        if voice is not None:
            voice.delivered = row.sentence

    async def open(self) -> None:
        """The reply's first words are about to be sent: its row appears before they are."""
        await self.row.open()

    async def sent(self, piece: str) -> None:
        """The front end has sent `piece`: it is stored, or spoken and stored once its audio is sent."""
        self.text += piece
        if self.voice is not None:
            self.voice.feed(piece)
        else:
            await self.row.feed(piece)

    async def finish(self, figures: TurnFigures, cancel: threading.Event) -> StoredMessage | None:
        """Wait until the reply is delivered, end the figures and store the reply with them. A reply
        that only called the client's functions has no words to store."""
        if self.voice is not None:
            await self.voice.finish()
        status = "interrupted" if cancel.is_set() or figures.finish_reason == "cancelled" else "complete"
        figures.end(status)
        if not self.text and figures.tool_calls:
            return None
        # A spoken reply keeps its sentences' audio offsets, for conversation.item.truncate.
        timeline = {"timeline": self.voice.timeline} if self.voice is not None else {}
        return await self.row.finish(self.text, status, {**figures.as_json(), **timeline})

    async def keep_delivered(self, figures: TurnFigures) -> None:
        """The turn failed or was stopped from outside: what was spoken (whole sentences), or the
        text that was sent, is stored as interrupted."""
        if self.row.finished:
            return
        if self.voice is not None:
            # The voice may be what failed (its listener left): what it delivered is stored all the same.
            with contextlib.suppress(Exception):
                await self.voice.finish(whole=False)
            await self.row.abandon({"timeline": self.voice.timeline})
        elif self.text:
            figures.end("interrupted")
            await self.row.finish(self.text, "interrupted", figures.as_json())
