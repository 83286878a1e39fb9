"""Research: how a turn consults the knowledge base, stored as a real tool exchange.

- `auto`: every question is searched, when a knowledge base exists; the turn stores an assistant
  message with a `search` tool call and the tool result answering it.
- `model`: the model is told about the `search` tool and decides: templates that know tools get it
  declared natively, others get `TOOL_INSTRUCTIONS` in the system prompt. A reply that is a tool
  call is parsed (Hermes `<tool_call>` tags, fenced JSON or bare JSON), run, stored, and the model
  answers again with the results.
- `off`: no research.
"""

from __future__ import annotations

import json
import re
import uuid

from voice.knowledge import KnowledgeBase, format_results

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the user's local knowledge base. Returns a few passages.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "what to look for"}},
            "required": ["query"],
        },
    },
}

TOOL_INSTRUCTIONS = (
    "You can search the user's notes. To search, reply with only this line and nothing else:\n"
    '<tool_call>{"name": "search", "arguments": {"query": "..."}}</tool_call>\n'
    "Otherwise answer directly."
)

_TAGGED = re.compile(r"<tool_call>\s*(\{.*?\})\s*(?:</tool_call>|$)", re.S)
_FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.S)


def parse_tool_calls(text: str) -> list[dict]:
    """Search calls in a model's reply, as OpenAI `tool_calls`; [] when the reply is an answer."""
    stripped = text.strip()
    candidates = _TAGGED.findall(stripped) or _FENCED.findall(stripped)
    if not candidates and stripped.startswith("{"):
        candidates = [stripped]
    calls = []
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if not isinstance(data, dict) or data.get("name") != "search":
            continue
        arguments = data.get("arguments", data.get("parameters", {}))
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                arguments = {"query": arguments}
        query = arguments.get("query") if isinstance(arguments, dict) else None
        if isinstance(query, str) and query.strip():
            calls.append(tool_call(query.strip()))
    return calls


def tool_call(query: str) -> dict:
    return {
        "id": f"call_{uuid.uuid4().hex[:16]}",
        "type": "function",
        "function": {"name": "search", "arguments": json.dumps({"query": query})},
    }


def looks_like_tool_call(start: str) -> bool:
    """Whether a reply's first characters may begin a tool call (so it must not be streamed yet)."""
    start = start.lstrip()
    return any(marker.startswith(start[: len(marker)]) for marker in ("<tool_call>", "{", "```"))


class Research:
    """The research policy of a service, and the search tool it runs."""

    def __init__(self, policy: str, knowledge: KnowledgeBase | None, results: int = 3):
        self.policy = policy if knowledge is not None else "off"
        self.knowledge = knowledge
        self.results = results

    def run(self, calls: list[dict]) -> list[dict]:
        """The assistant message holding `calls` and the tool results answering each."""
        messages: list[dict] = [{"role": "assistant", "content": None, "tool_calls": calls}]
        for call in calls:
            query = json.loads(call["function"]["arguments"]).get("query", "")
            found = self.knowledge.search(query, self.results) if self.knowledge else []
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": format_results(found)})
        return messages

    def for_question(self, question: str) -> list[dict]:
        """The `auto` policy's tool exchange for a question ([] under other policies)."""
        if self.policy != "auto" or not question.strip():
            return []
        return self.run([tool_call(question)])
