"""The conversation's items as a client edits them: stored, retrieved, deleted, truncated.

These carry out what `voice.realtime.protocol` asks for (`AddItem`, `RetrieveItem`, ...) against
the store, and announce the result. Items a client creates keep the id it chose (a taken id is an
`error`) and go where `previous_item_id` says (`"root"`: first). A deleted item leaves every later
prompt (a function call takes its outputs with it) but stays in the store, marked deleted.
"""

from __future__ import annotations

import asyncio

from voice.realtime import events
from voice.realtime.client_events import BadEvent
from voice.speech import heard_text
from voice.store import ItemConflict


async def add(conn, message: dict, item_id: str | None = None, after: str | None = None,
              audio: bool = False) -> None:
    """Store an item and announce it: `conversation.item.added`, then `.done`."""
    try:
        stored, previous = await asyncio.to_thread(conn.service.store.add_item, conn.session_id, message,
                                                   item_id, after)
    except ItemConflict as conflict:
        raise BadEvent(str(conflict), "invalid_value", "previous_item_id" if "previous" in str(conflict)
                       else "item.id") from None
    for payload in events.items(stored) if not audio else [events.item(stored, audio=True)]:
        await conn.send(events.event("conversation.item.added", previous_item_id=previous, item=payload))
        await conn.send(events.event("conversation.item.done", previous_item_id=previous, item=payload))


async def retrieve(conn, item_id: str) -> None:
    stored = await asyncio.to_thread(conn.service.store.message, conn.session_id, item_id)
    if stored is None:
        raise BadEvent(f"no item {item_id} in this session", "item_not_found", "item_id")
    await conn.send(events.event("conversation.item.retrieved", item=events.item(stored)))


async def delete(conn, item_id: str) -> None:
    deleted = await asyncio.to_thread(conn.service.store.delete_item, conn.session_id, item_id)
    if not deleted:
        raise BadEvent(f"no item {item_id} in this session", "item_not_found", "item_id")
    for each in deleted:
        await conn.send(events.event("conversation.item.deleted", item_id=each))


async def truncate(conn, item_id: str, content_index: int, audio_end_ms: int) -> None:
    stored = await asyncio.to_thread(conn.service.store.message, conn.session_id, item_id)
    if stored is None or stored.message["role"] != "assistant":
        raise BadEvent(f"no assistant item {item_id} in this session", "item_not_found", "item_id")
    timeline = stored.figures.get("timeline")
    if not timeline:
        raise BadEvent(f"item {item_id} has no audio to truncate", "invalid_value", "item_id")
    # A reply heard to its end keeps its text; otherwise (cut short by the listener, or by a
    # cancel before all of it was spoken) it keeps the sentences that were actually heard.
    if audio_end_ms < timeline[-1][2] or stored.status != "complete":
        await asyncio.to_thread(conn.service.store.update, conn.session_id, item_id,
                                heard_text(timeline, audio_end_ms), "interrupted")
    await conn.send(events.event("conversation.item.truncated", item_id=item_id, content_index=content_index,
                                 audio_end_ms=audio_end_ms))
