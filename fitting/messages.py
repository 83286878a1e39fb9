"""Messages and the pieces fitting removes: tool exchanges, exchanges and the current turn.

Messages are OpenAI chat messages (dicts with role, content, tool_calls, tool_call_id). Fitting
works on `Entry`s, each a message with the input positions it came from, so that every step can
say which stored messages it removed.

- A tool exchange is an assistant message with `tool_calls` and the tool results answering them.
- An exchange runs from a user question up to the next user question.
- The current turn is the last user question and whatever follows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]


@dataclass
class Entry:
    message: Message
    origin: tuple[int, ...]  # input indices this entry stands for
    tokens: int = 0  # measured once, when fitting starts
    removed: bool = False


@dataclass
class ToolExchange:
    entries: list[int]  # the call first, then its results (entry positions)


@dataclass
class Exchange:
    entries: list[int]  # the question first
    tools: list[ToolExchange] = field(default_factory=list)


@dataclass
class Pieces:
    head: int | None  # the system entry
    history: list[Exchange]  # earlier exchanges, oldest first
    current: Exchange


def call_ids(message: Message) -> list[str]:
    return [call.get("id", "") for call in message.get("tool_calls") or []]


def is_call(message: Message) -> bool:
    return message.get("role") == "assistant" and bool(message.get("tool_calls"))


def repair(messages: list[Message]) -> tuple[list[Entry], list[int]]:
    """Entries a model can be shown, and the input indices left out.

    Left out: tool calls with no result (a crash mid-research) and results with no call; messages
    before the first question. A call answered by several results (a search that stored one result
    per passage) keeps them all, in order. Later system messages are folded into the first one, since strict
    chat templates allow only one.
    """
    dropped: list[int] = []
    entries: list[Entry] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        role = message.get("role")
        if role == "tool":  # a result whose call is not right before it
            dropped.append(i)
            i += 1
            continue
        if is_call(message):
            wanted = call_ids(message)
            results: dict[str, list[int]] = {}
            j = i + 1
            while j < len(messages) and messages[j].get("role") == "tool":
                call_id = messages[j].get("tool_call_id")
                if call_id in wanted:
                    results.setdefault(call_id, []).append(j)
                else:
                    dropped.append(j)
                j += 1
            answered = [c for c in message["tool_calls"] if c.get("id") in results]
            if answered:
                call = {**message, "tool_calls": answered}
                entries.append(Entry(call, (i,)))
                for call_id in call_ids(call):
                    entries.extend(Entry(messages[k], (k,)) for k in results[call_id])
            elif message.get("content"):  # keep what was said, without the unanswered calls
                entries.append(Entry({"role": "assistant", "content": message["content"]}, (i,)))
            else:
                dropped.append(i)
            i = j
            continue
        if role == "system" and entries:
            if entries[0].message.get("role") == "system":
                head = entries[0]
                text = f"{head.message.get('content') or ''}\n\n{message.get('content') or ''}".strip()
                head.message = {**head.message, "content": text}
                head.origin += (i,)
            else:
                dropped.append(i)
        elif role in ("system", "user", "assistant"):
            entries.append(Entry(message, (i,)))
        else:
            dropped.append(i)
        i += 1

    # History starts with a question: drop whatever comes between the system prompt and it.
    first = 1 if entries and entries[0].message.get("role") == "system" else 0
    while len(entries) > first and entries[first].message.get("role") != "user":
        dropped.extend(entries.pop(first).origin)
    return entries, sorted(dropped)


def pieces(entries: list[Entry]) -> Pieces:
    """Split repaired entries into the system entry, earlier exchanges and the current turn."""
    head = 0 if entries and entries[0].message.get("role") == "system" else None
    exchanges: list[Exchange] = []
    for position in range(0 if head is None else 1, len(entries)):
        message = entries[position].message
        if message.get("role") == "user":
            exchanges.append(Exchange([position]))  # an unanswered question is an exchange alone
            continue
        exchange = exchanges[-1]
        exchange.entries.append(position)
        if is_call(message):
            exchange.tools.append(ToolExchange([position]))
        elif message.get("role") == "tool":
            exchange.tools[-1].entries.append(position)
    if not exchanges:
        raise ValueError("there is no user question to answer")
    return Pieces(head, exchanges[:-1], exchanges[-1])


def assemble(entries: list[Entry]) -> list[Message]:
    """The prompt's messages: kept entries in order, with consecutive texts of one role joined.

    Joining keeps roles alternating when a removal or a repair leaves two questions (or two
    replies) side by side; it only ever shortens the prompt.
    """
    out: list[Message] = []
    for entry in entries:
        if entry.removed:
            continue
        message = entry.message
        role = message.get("role")
        previous = out[-1] if out else None
        if (
            previous is not None
            and role in ("user", "assistant")
            and previous.get("role") == role
            and not previous.get("tool_calls")
        ):
            joined = "\n\n".join(t for t in (previous.get("content"), message.get("content")) if t)
            out[-1] = {**message, "content": joined}
        else:
            out.append(dict(message))
    return out
