"""A reply's stored row while it streams, so a crash loses at most the sentence being made.

`ReplyRow` is the one writer of an assistant reply. Its row appears, with status `in_progress`, as
the reply's first text is sent, and each sentence delivered after that rewrites it in one
transaction; `finish` gives it its final text, status and figures. A process killed in between
leaves the row `in_progress`, and the store marks such rows `interrupted` when it next opens.

What counts as delivered is the turn engine's to say (voice.turns.delivery), the row's one owner:
a text reply as each piece is sent, a spoken one as each sentence's audio goes out, with the
audio timeline.
Every write runs in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio

from voice.store.sessions import SessionStore, StoredMessage
from voice.text.sentences import Sentences

IN_PROGRESS = "in_progress"


class ReplyRow:
    def __init__(self, store: SessionStore, session_id: str, item_id: str):
        self.store, self.session_id, self.item_id = store, session_id, item_id
        self.saved = ""  # the text stored so far: whole sentences
        self.opened = self.finished = False
        self._sentences = Sentences()

    async def open(self) -> None:
        """The reply has begun reaching the listener: its row exists from now on."""
        await self._write(self.saved, IN_PROGRESS, None)
        self.opened = True

    async def feed(self, text: str) -> None:
        """Streamed reply text; each sentence it completes is stored."""
        complete = self._sentences.feed(text)
        if complete:
            await self.sentence(" ".join(complete))

    async def sentence(self, text: str, timeline: list[list] | None = None) -> None:
        """One more delivered sentence (with a spoken reply's timeline so far)."""
        self.saved = f"{self.saved} {text}".strip()
        await self._write(self.saved, IN_PROGRESS, {"timeline": timeline} if timeline is not None else None)

    async def insert_before(self, messages: list[dict]) -> list[StoredMessage]:
        """Store messages (research found mid-reply) ahead of the reply, where they happened."""
        return await asyncio.to_thread(self.store.insert_before, self.session_id, self.item_id, messages)

    async def finish(self, text: str, status: str, figures: dict) -> StoredMessage | None:
        """The reply's final row; None if it was deleted meanwhile (conversation.item.delete)."""
        await self._write(text, status, figures)
        self.finished = True
        return await asyncio.to_thread(self.store.message, self.session_id, self.item_id)

    async def abandon(self, figures: dict | None = None) -> None:
        """The turn failed or was stopped from outside: an opened row keeps what was stored, interrupted."""
        if self.opened and not self.finished:
            await self.finish(self.saved, "interrupted", figures or {})

    async def _write(self, text: str, status: str, figures: dict | None) -> None:
        # Shielded: a cancelled turn still leaves its row written, since the thread runs on anyway.
        await asyncio.shield(asyncio.to_thread(self.store.write_reply, self.session_id, self.item_id, text,
                                               status, figures))
