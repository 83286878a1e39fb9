"""Small helpers that several test modules use (test modules do not import each other): a small
knowledge base, and what every fitted prompt must be."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def write_docs(folder) -> None:
    """A small knowledge base: Galway (a rain fact, then twelve long sections) and Cork (HTML)."""
    folder.mkdir()
    (folder / "galway.md").write_text(
        "# Galway\n\nGalway is a city on the west coast of Ireland. It gets about 1,200 mm of rain a year.\n\n"
        + "\n\n".join(f"## Section {i}\n\n" + f"Galway history paragraph {i}. " * 40 for i in range(12)))
    (folder / "cork.html").write_text(
        "<html><head><title>Cork</title></head><body><h1>Cork</h1><p>Cork is in Munster.</p></body></html>")


def check_prompt(messages: list[dict]) -> None:
    """What every fitted prompt must be: one system message first, history starting with a
    question, roles alternating, and every tool call answered by results that follow it."""
    body = messages[1:] if messages and messages[0]["role"] == "system" else messages
    assert all(m["role"] != "system" for m in body), "a second system message"
    assert body and body[0]["role"] == "user", "history does not start with a question"
    open_ids: set[str] = set()  # calls not answered yet
    call_ids: set[str] = set()  # the calls the results that follow may answer
    previous = None
    for message in body:
        role = message["role"]
        if role == "tool":
            assert message["tool_call_id"] in call_ids, "a tool result without its call"
            open_ids.discard(message["tool_call_id"])
        else:
            assert not open_ids, f"tool calls without results: {open_ids}"
            call_ids = set()
            if previous is not None and previous["role"] != "tool":
                assert role != previous["role"] or (role == "assistant" and previous.get("tool_calls")), (
                    f"two {role} messages in a row"
                )
            if message.get("tool_calls"):
                call_ids = {c["id"] for c in message["tool_calls"]}
                open_ids = set(call_ids)
        previous = message
    assert not open_ids, f"tool calls without results: {open_ids}"


def kept_texts(result_messages: list[dict]) -> list[str]:
    return [m.get("content") or "" for m in result_messages]


async def until(condition: Callable[[], bool], timeout: float = 120) -> None:
    """Wait for the service to reach a state (a turn holds the model, one waits), not for a time."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the service never reached the state waited for")
        await asyncio.sleep(0.01)
