"""Wyoming's `handle` program: a `transcript` is a question for the turn engine.

Its `context.conversation_id` names a Parlour session (the same id always maps to the same stored
session, across restarts), so the assistant remembers. The reply streams as `handled-start`,
`handled-chunk`..., `handled-stop` and ends with `handled`; a reply that cannot begin (a busy model,
a prompt that cannot fit, a model server that fails) ends with `handled-stop` and `not-handled`
with the reason.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable

from wyoming.asr import Transcript
from wyoming.event import Event
from wyoming.handle import Handled, HandledChunk, HandledStart, HandledStop, NotHandled

from fitting.errors import ParlourError
from voice.turns.events import Delta, TurnRequest
from voice.turns.service import Service


def session_for(conversation_id: str) -> str:
    """The Parlour session a Home Assistant conversation lives in: the same id, the same session."""
    return "wyoming_" + hashlib.sha256(conversation_id.encode()).hexdigest()[:24]


async def answer(service: Service, transcript: Transcript, write_event: Callable[[Event], Awaitable[None]]) -> None:
    """Answer one question, as the module docstring says."""
    store, context = service.store, transcript.context or {}
    conversation = str(context.get("conversation_id") or "")
    session_id = session_for(conversation) if conversation else None
    if session_id is None or not await asyncio.to_thread(store.exists, session_id):
        session_id = await asyncio.to_thread(store.create, service.config.instructions, session_id=session_id)
    if not transcript.text.strip():
        await write_event(NotHandled(text="nothing was said", context=context).event())
        return
    await asyncio.to_thread(store.append, session_id, {"role": "user", "content": transcript.text})
    await write_event(HandledStart(context=context).event())
    said: list[str] = []
    try:
        async for event in service.engine.respond(TurnRequest(session_id, spoken=True)):
            if isinstance(event, Delta):
                said.append(event.text)
                await write_event(HandledChunk(text=event.text).event())
    except ParlourError as problem:  # the reply could not begin
        await write_event(HandledStop().event())
        await write_event(NotHandled(text=str(problem), context=context).event())
        return
    await write_event(HandledStop().event())
    await write_event(Handled(text="".join(said).strip(), context=context).event())
