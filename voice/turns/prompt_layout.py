"""How a turn's prompt lays out research and function calls, before and after fitting.

An `auto` search is measured without its query (`compact_calls`: the query is the question before
it) and read as its results followed by the question, in the question's own message
(`evidence_first`): the evidence leads, so it can be evaluated while the question is still being
spoken (voice.turns.preemption). For clients whose functions act, the earlier exchanges that called
them leave the prompt the model reads (`without_earlier_commands`); the store keeps them.
"""

from __future__ import annotations

import json

from voice.text.clock import without_clock


def compact_calls(messages: list[dict]) -> list[dict]:
    """The messages as fitting measures them: a search the `auto` policy ran with the question right
    before it as its query shows no query (it is that question: 19 tokens for the call instead of
    31 to 33 for the bench's questions), which marks it for `evidence_first`. Stored exchanges keep
    their query."""
    compacted, question = [], None
    for message in messages:
        calls = message.get("tool_calls") or []
        if message["role"] == "user":
            question = without_clock(message.get("content") or "")
        elif question is not None and len(calls) == 1 and calls[0]["function"]["name"] == "search" and \
                _query(calls[0]) == question:
            call = {**calls[0], "function": {"name": "search", "arguments": "{}"}}
            message = {**message, "tool_calls": [call]}
        compacted.append(message)
    return compacted


def evidence_first(messages: list[dict]) -> list[dict]:
    """A fitted prompt as the model reads it: each `auto` search (a call `compact_calls` left
    without its query) is read as its results followed by the question, in the question's own
    message. The evidence thus comes before the question's words, so a prefill while the key is held
    can evaluate the evidence a draft already found (voice.turns.preemption) before the question ends.
    Fitting sees the stored order (old research still goes first); this runs on what it kept, and
    a message reads the same in every prompt, so the prefix stays stable from turn to turn."""
    read, i = [], 0
    while i < len(messages):
        message, following = messages[i], messages[i + 1] if i + 1 < len(messages) else {}
        calls = following.get("tool_calls") or []
        if message["role"] == "user" and len(calls) == 1 and calls[0]["function"]["name"] == "search" and \
                calls[0]["function"]["arguments"] == "{}":
            end = i + 2
            while end < len(messages) and messages[end]["role"] == "tool":
                end += 1
            results = [m.get("content") or "" for m in messages[i + 2:end]]
            if results:
                read.append({**message, "content": "\n\n".join([*results, message.get("content") or ""])})
                i = end
                continue
        read.append(message)
        i += 1
    return read


def _query(call: dict) -> str | None:
    try:
        return json.loads(call["function"]["arguments"]).get("query")
    except (ValueError, AttributeError):
        return None


def without_earlier_commands(messages: list[dict], ours: set[str]) -> list[dict]:
    """The prompt less the earlier exchanges in which the client's functions were called: the
    question, the calls, the results and the reply that reported them. Shown those, the small models
    answer the next command as the last one was answered, in words, without calling anything
    (scripts/eval_home.py, commands in one conversation: Qwen2.5-Coder-1.5B called the right tool
    for 1 of 20; without the results and reports, 4; with the calls alone, 2). The store keeps all
    of it; exchanges without a client's call, researched ones included, stay in the prompt. For
    clients whose functions act (Home Assistant's): a result that informs (the weather) would be
    lost to the questions after it. Calls to `ours` (Parlour's own search) are not the client's."""
    last_question = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=len(messages))
    kept: list[dict] = []
    exchange: list[dict] = []  # the exchange being read, from its question on
    commanded = False
    last_command: list[dict] = []  # the latest exchange that left: the next command may say "it"
    for position, message in enumerate(messages):
        if message["role"] == "user" or position == last_question:
            if not commanded:
                kept += exchange
            elif exchange:
                last_command = exchange
            exchange, commanded = [], False
        if position >= last_question or message["role"] == "system":
            kept.append(message)
            continue
        exchange.append(message)
        if message["role"] == "assistant" and message.get("tool_calls"):
            commanded |= any(c["function"]["name"] not in ours for c in message["tool_calls"])
    note = _last_command_note(last_command, ours)
    if note and last_question < len(messages):
        at = kept.index(messages[last_question])
        kept[at] = {**kept[at], "content": f"{kept[at].get('content') or ''} ({note})"}
    return kept


def _last_command_note(exchange: list[dict], ours: set[str]) -> str:
    """The latest command that left the prompt, in a line: what was asked and what was called, so
    that "and turn it off again" knows what "it" is."""
    calls = [c["function"] for m in exchange if m["role"] == "assistant" for c in m.get("tool_calls") or []
             if c["function"]["name"] not in ours]
    if not exchange or exchange[0]["role"] != "user" or not calls:
        return ""
    done = "; ".join(f"{c['name']} {c.get('arguments') or '{}'}" for c in calls)
    return f'The command before this one was "{without_clock(exchange[0].get("content") or "")}": {done}.'
