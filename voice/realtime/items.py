"""The conversation's items as a client edits them: stored, retrieved, deleted, truncated.

`Items` carries out what `voice.realtime.protocol` asks for (`AddItem`, `RetrieveItem`, ...) against
the store, for one session, and announces the result. Items a client creates keep the id it chose
(a taken id is an `error`) and go where `previous_item_id` says (`"root"`: first). A deleted item
leaves every later prompt (a function call takes its outputs with it) but stays in the store,
marked deleted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from voice.realtime import events
from voice.realtime.client_events import BadEvent
from voice.speech.timeline import heard_text
from voice.store.sessions import ItemConflict, SessionStore, StoredMessage

Send = Callable[[dict], Awaitable[None]]


class Items:
    def __init__(self, store: SessionStore, session_id: str, send: Send):
        self.store, self.session_id, self.send = store, session_id, send

    async def store_item(self, message: dict, item_id: str | None = None,
                         after: str | None = None) -> tuple[StoredMessage, str | None]:
        """Store an item; returns it and the id of the item it follows."""
        try:
            return await asyncio.to_thread(self.store.add_item, self.session_id, message, item_id, after)
        except ItemConflict as conflict:
            raise BadEvent(str(conflict), conflict.code, "previous_item_id" if "previous" in str(conflict)
                           else "item.id") from None

    async def announce(self, stored: StoredMessage, previous: str | None, audio: bool = False) -> None:
        """`conversation.item.added`, then `.done`, for each item the message is."""
        for payload in events.items(stored) if not audio else [events.item(stored, audio=True)]:
            await self.send(events.event("conversation.item.added", previous_item_id=previous, item=payload))
            await self.send(events.event("conversation.item.done", previous_item_id=previous, item=payload))

    async def add(self, message: dict, item_id: str | None = None, after: str | None = None) -> None:
        await self.announce(*await self.store_item(message, item_id, after))

    async def last_id(self) -> str | None:
        """The conversation's last item: what a new output item follows."""
        last = await asyncio.to_thread(self.store.last_message, self.session_id)
        return events.items(last)[-1]["id"] if last else None

    async def retrieve(self, item_id: str) -> None:
        stored = await asyncio.to_thread(self.store.message, self.session_id, item_id)
        if stored is None:
            raise BadEvent(f"no item {item_id} in this session", "item_not_found", "item_id")
        await self.send(events.event("conversation.item.retrieved", item=events.item(stored)))

    async def delete(self, item_id: str) -> None:
        deleted = await asyncio.to_thread(self.store.delete_item, self.session_id, item_id)
        if not deleted:
            raise BadEvent(f"no item {item_id} in this session", "item_not_found", "item_id")
        for each in deleted:
            await self.send(events.event("conversation.item.deleted", item_id=each))

    async def truncate(self, item_id: str, content_index: int, audio_end_ms: int) -> None:
        stored = await asyncio.to_thread(self.store.message, self.session_id, item_id)
        if stored is None or stored.message["role"] != "assistant":
            raise BadEvent(f"no assistant item {item_id} in this session", "item_not_found", "item_id")
        timeline = stored.figures.get("timeline")
        if not timeline:
            raise BadEvent(f"item {item_id} has no audio to truncate", "invalid_value", "item_id")
        # A reply heard to its end keeps its text; otherwise (cut short by the listener, or by a
        # cancel before all of it was spoken) it keeps the sentences that were actually heard.
        if audio_end_ms < timeline[-1][2] or stored.status != "complete":
            await asyncio.to_thread(self.store.update, self.session_id, item_id,
                                    heard_text(timeline, audio_end_ms), "interrupted")
        await self.send(events.event("conversation.item.truncated", item_id=item_id, content_index=content_index,
                                     audio_end_ms=audio_end_ms))
