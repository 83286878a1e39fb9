"""Builders for OpenAI-shaped sessions used by the fitting tests and benchmarks."""

from __future__ import annotations

SYSTEM = {"role": "system", "content": "You are Parlour, a helpful local assistant."}


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str | None) -> dict:
    return {"role": "assistant", "content": text}


def call(*ids: str, query: str = "topic") -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "search", "arguments": f'{{"query": "{query}"}}'}}
            for i in ids
        ],
    }


def result(call_id: str, text: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def research_session(turns: int, research_chars: int = 4000, talk_chars: int = 300, results: int = 2) -> list[dict]:
    """`turns` exchanges, each a question, a search with `results` results and an answer; then a question."""
    messages = [SYSTEM]
    for t in range(turns):
        ids = [f"call_{t}_{r}" for r in range(results)]
        messages.append(user(f"Question {t}: " + "q" * talk_chars))
        messages.append(call(*ids, query=f"topic {t}"))
        messages.extend(result(i, f"Result {i}: " + "r" * research_chars) for i in ids)
        messages.append(assistant(f"Answer {t}: " + "a" * talk_chars))
    messages.append(user("Compare it with the first one."))
    return messages
