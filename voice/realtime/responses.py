"""A response as it streams to the client: its output items and the events that carry them.

`stream_turn` runs the turn engine for one `Response` and turns its steps into Realtime events:
research as conversation items, the reply's message item opened at its first words (text or audio
transcript deltas through the caller's `on_delta`), the client's function calls as `function_call`
output items; `finish` closes the message and sends `response.done` with its status: `completed`,
`cancelled`, or `incomplete` at the output limit. The connection sends `failed` ones itself.

Every item a response adds to the conversation is announced there too, as the GA API does:
`conversation.item.added` right after its `response.output_item.added`, `conversation.item.done`
right after its `response.output_item.done`, each with the `previous_item_id` it follows (Pipecat
runs a function call only once it has seen the call's `conversation.item.added`).
"""

from __future__ import annotations

import threading
from contextlib import aclosing
from dataclasses import dataclass, field

from voice.figures import TurnFigures
from voice.realtime import events


@dataclass
class Response:
    """One response.create: what was asked, and the output items sent so far."""

    id: str
    item_id: str  # the assistant message's id, if the reply has words
    modalities: list[str]
    instructions: str | None
    max_tokens: int | None
    tools: list[dict]
    tool_choice: str | dict | None
    metadata: dict | None
    speed: float = 1.0  # of its speech
    cancel: threading.Event = field(default_factory=threading.Event)  # set to stop it
    output: list[dict] = field(default_factory=list)  # finished output items
    message_index: int | None = None  # the message item's output_index, once it is opened
    previous_item_id: str | None = None  # the conversation's last item: what the next output item follows
    figures: TurnFigures | None = None  # the turn's, once it runs (its clock starts at a commit before it)
    message_previous: str | None = None  # what the message item follows

    @property
    def audio(self) -> bool:
        return self.modalities == ["audio"]


async def _added(conn, response: Response, item: dict) -> str | None:
    """`conversation.item.added` for an item the response adds; returns what it follows."""
    previous, response.previous_item_id = response.previous_item_id, item["id"]
    await conn.send(events.event("conversation.item.added", previous_item_id=previous, item=item))
    return previous


async def open_message(conn, response: Response) -> None:
    """The reply's message item and its one content part, once it has words."""
    response.message_index = len(response.output)
    item = events.assistant_item(response.item_id, "", "in_progress", response.audio)
    await conn.send(events.event("response.output_item.added", response_id=response.id,
                                 output_index=response.message_index, item=item))
    response.message_previous = await _added(conn, response, item)
    part = {"type": "audio", "transcript": ""} if response.audio else {"type": "text", "text": ""}
    await conn.send(events.event("response.content_part.added", response_id=response.id,
                                 item_id=response.item_id, output_index=response.message_index,
                                 content_index=0, part=part))


def delta_ids(response: Response) -> dict:
    return {"response_id": response.id, "item_id": response.item_id, "output_index": response.message_index,
            "content_index": 0}


async def announce_research(conn, response: Response, stored_messages) -> None:
    """The knowledge base's call and results: conversation items, not output (the client runs nothing)."""
    for stored in stored_messages:
        for payload in events.items(stored):
            previous = await _added(conn, response, payload)
            await conn.send(events.event("conversation.item.done", previous_item_id=previous, item=payload))


async def announce_calls(conn, response: Response, stored_messages) -> None:
    """The client's function calls as output items; the client runs them and answers."""
    for stored in stored_messages:
        for item in events.items(stored):
            index = len(response.output) + (response.message_index is not None)
            pending = {**item, "status": "in_progress", "arguments": ""}
            ids = {"response_id": response.id, "item_id": item["id"], "output_index": index,
                   "call_id": item["call_id"]}
            await conn.send(events.event("response.output_item.added", response_id=response.id,
                                         output_index=index, item=pending))
            previous = await _added(conn, response, pending)
            await conn.send(events.event("response.function_call_arguments.delta", **ids,
                                         delta=item["arguments"]))
            await conn.send(events.event("response.function_call_arguments.done", **ids, name=item["name"],
                                         arguments=item["arguments"]))
            await conn.send(events.event("response.output_item.done", response_id=response.id,
                                         output_index=index, item=item))
            await conn.send(events.event("conversation.item.done", previous_item_id=previous, item=item))
            response.output.append(item)


async def stream_turn(conn, response: Response, on_delta, row=None) -> str:
    """Run the turn: research is announced, the message opened at its first words and
    `on_delta(text)` awaited for each piece, the client's calls sent as output items. Returns the
    text; the engine writes its figures into `response.figures`. A spoken turn passes the `row` it
    stores its reply through."""
    text = ""
    turn = conn.service.engine.respond(conn.session_id, response.cancel, response.instructions, response.max_tokens,
                                       response.item_id, row, response.tools, response.tool_choice, response.audio,
                                       figures=response.figures)
    async with aclosing(turn):
        async for step in turn:
            if step.kind == "research":
                await announce_research(conn, response, step.stored)
            elif step.kind == "calls":
                await announce_calls(conn, response, step.stored)
            elif step.kind == "delta":
                if response.message_index is None:
                    await open_message(conn, response)
                text += step.text
                await on_delta(step.text)
    return text


async def finish(conn, response: Response, text: str) -> None:
    figures = response.figures
    cancelled = figures.status == "interrupted"
    if response.message_index is not None:
        ids = delta_ids(response)
        if response.audio:
            await conn.send(events.event("response.output_audio.done", **ids))
            await conn.send(events.event("response.output_audio_transcript.done", **ids, transcript=text))
            part = {"type": "audio", "transcript": text}
        else:
            await conn.send(events.event("response.output_text.done", **ids, text=text))
            part = {"type": "text", "text": text}
        await conn.send(events.event("response.content_part.done", **ids, part=part))
        final = events.assistant_item(response.item_id, text, "incomplete" if cancelled else "completed",
                                      response.audio)
        await conn.send(events.event("response.output_item.done", response_id=response.id,
                                     output_index=response.message_index, item=final))
        await conn.send(events.event("conversation.item.done", previous_item_id=response.message_previous,
                                     item=final))
        response.output.insert(response.message_index, final)
    status, reason = "completed", None
    if cancelled:
        status, reason = "cancelled", "client_cancelled"
    elif figures.finish_reason == "length" and not figures.tool_calls:
        status, reason = "incomplete", "max_output_tokens"
    await conn.send(events.event("response.done", response=events.response(
        response.id, conn.session_id, status, response.modalities, response.output, figures.as_json(), reason=reason,
        metadata=response.metadata)))
