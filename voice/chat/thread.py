"""A stateless client's conversation, kept as a Parlour session.

A chat request carries its whole history. `open_thread` finds the session it continues: the
history up to the last assistant message is fingerprinted (what the client saw: user words,
assistant words, the names of the functions called, tool results; the system prompt apart, since
Home Assistant's holds the time of day). Each answered request stores the fingerprint of the
history it leaves the client with, so the next request of the same conversation finds its session
and only its new messages are stored. A history that leads nowhere (edited, trimmed, or from before
the service had it) becomes a new session, every message of it stored.

With `device_memory`, a `device` (Home Assistant's system prompt, or an OpenAI `user`) keeps
memory past the client's own: a new conversation from the same device continues that device's
session, so what was said five minutes ago, in a conversation Home Assistant has since forgotten,
is still there, fitted. It is off by default: other clients send one system prompt with every
new chat, which their users expect to start afresh.
"""

from __future__ import annotations

import hashlib
import json
from http import HTTPStatus

from fitting.errors import ParlourError
from models.tool_calls import new_call
from voice.store.sessions import SessionStore
from voice.text.clock import CLOCK_OPEN, split_clock


class BadHistory(ParlourError, ValueError):
    """Messages that cannot be a conversation (a tool result answering no call, say)."""

    code, status = "invalid_history", HTTPStatus.BAD_REQUEST


def _lines(message: dict) -> list[str]:
    """What a client saw of a message, in a form that survives how clients echo it back (a reply's
    words and calls in one message or two; arguments tidied)."""
    role, content = message["role"], (message.get("content") or "").strip()
    lines = [f"{role}:{content}"] if content or role in ("user", "tool") else []
    lines += [f"call:{call['function']['name']}" for call in message.get("tool_calls") or []]
    return lines


def fingerprint(history: list[dict]) -> str:
    lines = [line for message in history if message["role"] != "system" for line in _lines(message)]
    return hashlib.sha256(json.dumps(lines).encode()).hexdigest()[:32]


def answer_calls(messages: list[dict], pending: list[str]) -> list[dict]:
    """The messages with every tool result naming the call it answers: its own `tool_call_id`
    when that is one of the calls waiting, else the next waiting call in order (Ollama's results
    carry no id). Calls without an id get one. `pending` is the calls waiting before `messages`."""
    out, pending = [], list(pending)
    for message in messages:
        message = dict(message)
        if message["role"] == "assistant" and message.get("tool_calls"):
            calls = [call if call.get("id")
                     else {**new_call(call["function"]["name"], {}), "function": call["function"]}
                     for call in message["tool_calls"]]
            message["tool_calls"], pending = calls, [call["id"] for call in calls]
        elif message["role"] == "tool":
            if not pending:
                raise BadHistory("a tool message answers no function call")
            given = message.get("tool_call_id")
            message["tool_call_id"] = given if given in pending else pending[0]
            pending.remove(message["tool_call_id"])
        out.append(message)
    return out


def _waiting_calls(store: SessionStore, session_id: str) -> list[str]:
    """The ids of the session's last calls that no stored tool result answers yet."""
    calls: list[str] = []
    for message in store.transcript(session_id)[1:]:
        if message["role"] == "assistant" and message.get("tool_calls"):
            calls = [call["id"] for call in message["tool_calls"]]
        elif message["role"] == "tool" and message.get("tool_call_id") in calls:
            calls.remove(message["tool_call_id"])
        elif message["role"] == "user":
            calls = []
    return calls


def open_thread(store: SessionStore, owner: str, messages: list[dict], instructions: str,
                device: str | None = None) -> str:
    """The session the request continues (or a new one), with its new messages stored; blocking.
    `instructions` is the system prompt when the request has none."""
    if messages and messages[0]["role"] == "system":
        instructions, messages = messages[0].get("content") or "", messages[1:]
    instructions, clock = split_clock(instructions)
    if any(m["role"] == "system" for m in messages):
        # A system message mid-conversation is an instruction: it goes with the system prompt.
        instructions = "\n\n".join([instructions] + [m.get("content") or "" for m in messages if m["role"] == "system"])
        messages = [m for m in messages if m["role"] != "system"]
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
    earlier, new = messages[:last + 1], messages[last + 1:]
    if not new or new[0]["role"] not in ("user", "tool"):
        raise BadHistory("the last message must be the user's or a tool result")
    session_id = store.thread(owner, "conversation:" + fingerprint(earlier)) if earlier else None
    if session_id is None and not earlier and device:
        session_id = store.thread(owner, "device:" + device)
    if session_id is None:
        new = messages
    # Checked before a session is made, so a bad request leaves nothing behind.
    new = answer_calls(new, _waiting_calls(store, session_id) if session_id else [])
    if session_id is None:
        session_id = store.create(instructions, owner)
    store.set_instructions(session_id, instructions)
    if clock and (asking := [m for m in new if m["role"] == "user"]):
        # The time goes with the question it was asked at, which the cache has not seen yet.
        asking[-1]["content"] = f"{asking[-1]['content']}{CLOCK_OPEN}{clock})"
    for message in new:
        store.append(session_id, {key: message[key] for key in ("role", "content", "tool_calls", "tool_call_id")
                                  if key in message})
    return session_id


def remember(store: SessionStore, owner: str, session_id: str, history: list[dict], device: str | None) -> None:
    """After a reply: `history` (the request's messages and the reply, as the client will send
    them back) leads to the session, and so does the device."""
    store.save_thread(owner, "conversation:" + fingerprint(history), session_id, only=True)
    if device:
        store.save_thread(owner, "device:" + device, session_id)
