"""The conversation's items as a client edits them: create, retrieve, delete, truncate.

Items a client creates keep the id it chose (a taken id is an `error`) and go where
`previous_item_id` says (`"root"`: first). An item created while a response runs waits until that
response's reply is stored, so it never lands ahead of the reply. A deleted item leaves every later
prompt (a function call takes its outputs with it) but stays in the store, marked deleted.
"""

from __future__ import annotations

import asyncio
import json

from voice import events
from voice.client_events import BadEvent
from voice.speech import heard_text
from voice.store import ItemConflict


def chat_message(item) -> dict:
    """A Realtime conversation item (typed) as the OpenAI chat message the store keeps."""
    kind = item.type
    if kind == "function_call_output":
        return {"role": "tool", "tool_call_id": item.call_id, "content": item.output}
    if kind == "function_call":
        if not item.name:
            raise BadEvent("a function_call item needs a name", "missing_field", "item.name")
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": item.call_id or f"call_{item.id or 'client'}", "type": "function",
             "function": {"name": item.name, "arguments": item.arguments or "{}"}}]}
    if kind != "message":
        raise BadEvent(f"items of type '{kind}' are not supported", "invalid_value", "item.type")
    texts = []
    for part in item.content:
        text = getattr(part, "text", None) if part.type in ("input_text", "output_text", "text") else None
        if text is None:
            raise BadEvent(f"content parts of type '{part.type}' are not supported here: send text parts "
                           "(speech goes through input_audio_buffer)", "invalid_value", "item.content")
        texts.append(text)
    return {"role": item.role, "content": "\n".join(texts)}


async def create(conn, event) -> None:
    message = chat_message(event.item)
    text = message.get("content") or ""
    if message["role"] == "user" and not text.strip():
        raise BadEvent("the message is empty", "invalid_value", "item.content")
    limit = conn.service.config.max_text_chars
    if len(text) > limit or len(json.dumps(message)) > limit * 2:
        raise BadEvent(f"the item has {len(text)} characters; the limit is {limit}", "text_too_long", "item.content")
    if conn.responding():  # stored once the running reply is, so it follows it
        conn.after_response.append((message, event.item.id, event.previous_item_id))
        return
    await add(conn, message, event.item.id, event.previous_item_id)


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


async def retrieve(conn, event) -> None:
    stored = await asyncio.to_thread(conn.service.store.message, conn.session_id, event.item_id)
    if stored is None:
        raise BadEvent(f"no item {event.item_id} in this session", "item_not_found", "item_id")
    await conn.send(events.event("conversation.item.retrieved", item=events.item(stored)))


async def delete(conn, event) -> None:
    if conn.responding() and event.item_id == conn.response_item:
        raise BadEvent("the reply being generated cannot be deleted: cancel the response first",
                       "invalid_value", "item_id")
    deleted = await asyncio.to_thread(conn.service.store.delete_item, conn.session_id, event.item_id)
    if not deleted:
        raise BadEvent(f"no item {event.item_id} in this session", "item_not_found", "item_id")
    for item_id in deleted:
        await conn.send(events.event("conversation.item.deleted", item_id=item_id))


async def truncate(conn, event) -> None:
    item_id, audio_end_ms = event.item_id, event.audio_end_ms
    if audio_end_ms < 0:
        raise BadEvent("audio_end_ms must be 0 or more", "invalid_value", "audio_end_ms")
    if conn.responding() and conn.response_item == item_id:
        await asyncio.shield(conn.response)  # truncate what was stored once the reply has stopped
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
    await conn.send(events.event("conversation.item.truncated", item_id=item_id, content_index=event.content_index,
                                 audio_end_ms=audio_end_ms))
