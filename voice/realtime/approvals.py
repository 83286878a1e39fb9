"""The client's answer to an MCP approval request (an `mcp_approval_response` item), carried out.

A call that waits for approval is stored unrun, as an approval request (voice.turns.engine). When
the client approves it, the call runs now, with the session's tools, and is announced as the GA API
announces a call that runs after its approval: the answer's item, then an `mcp_call` item added,
`response.mcp_call.in_progress`, `response.mcp_call.completed` (or `.failed`) and the item done with
its output (or error). Its result is stored under the `mcp_call`'s id. A declined call is not run:
that the user declined is stored as its result, under the answer's id, and the answer announced.
Either way the client's next `response.create` answers from what was stored.

It runs before the connection handles another event, so the next response sees its result.
"""

from __future__ import annotations

import asyncio

from voice.realtime import events
from voice.realtime.client_events import BadEvent
from voice.realtime.effects import AnswerApproval
from voice.realtime.items import Items
from voice.store.sessions import StoredMessage, new_id
from voice.tools.toolbox import Toolbox

PARAM = "item.approval_request_id"


async def answer(effect: AnswerApproval, items: Items) -> None:
    asked = await _approval_request(effect.approval_request_id, items)
    call = asked.message["tool_calls"][0]
    toolbox = effect.toolbox
    if effect.approve and (toolbox is None or call["function"]["name"] not in toolbox):
        raise BadEvent(f"the MCP server {call['server_label']!r} of this call is no longer among the session's "
                       "tools", "invalid_value", PARAM)
    if effect.approve:
        assert toolbox is not None  # checked above
        await _announce_answer(effect, items, await items.last_id())
        await _run(call, effect, toolbox, items)
    else:
        await _decline(call, effect, items)


async def _approval_request(item_id: str, items: Items) -> StoredMessage:
    """The stored approval request `item_id`, not yet answered."""
    stored = await asyncio.to_thread(items.store.message, items.session_id, item_id)
    calls = stored.message.get("tool_calls") or [] if stored else []
    if stored is None or len(calls) != 1 or calls[0].get("approval") != "requested":
        raise BadEvent(f"no mcp_approval_request {item_id} in this session", "item_not_found", PARAM)
    messages = await asyncio.to_thread(items.store.messages, items.session_id)
    if any(each.message.get("tool_call_id") == calls[0]["id"] for each in messages):
        raise BadEvent(f"the approval request {item_id} was already answered", "invalid_value", PARAM)
    return stored


async def _announce_answer(effect: AnswerApproval, items: Items, previous: str | None) -> None:
    item = events.mcp_approval_response_item(effect.item_id, effect.approval_request_id, effect.approve,
                                             effect.reason)
    await items.send(events.event("conversation.item.added", previous_item_id=previous, item=item))
    await items.send(events.event("conversation.item.done", previous_item_id=previous, item=item))


async def _run(call: dict, effect: AnswerApproval, toolbox: Toolbox, items: Items) -> None:
    item_id = new_id("mcp")
    ids = {"item_id": item_id, "output_index": 0}  # it is no response's output: the first of its own
    pending = events.mcp_call_item(item_id, call, None, None, effect.approval_request_id)
    await items.send(events.event("conversation.item.added", previous_item_id=effect.item_id, item=pending))
    await items.send(events.event("response.mcp_call.in_progress", **ids))
    result, failure = await toolbox.run(call)
    await items.store_item(result, item_id)
    await items.send(events.event("response.mcp_call.failed" if failure else "response.mcp_call.completed", **ids))
    done = events.mcp_call_item(item_id, call, None if failure else result["content"],
                                failure.shape if failure else None, effect.approval_request_id)
    await items.send(events.event("conversation.item.done", previous_item_id=effect.item_id, item=done))


async def _decline(call: dict, effect: AnswerApproval, items: Items) -> None:
    because = f" ({effect.reason})" if effect.reason else ""
    result = {"role": "tool", "tool_call_id": call["id"],
              "content": f"The user declined this call to {call['function']['name']}{because}: it did not run."}
    _, previous = await items.store_item(result, effect.item_id)
    await _announce_answer(effect, items, previous)
