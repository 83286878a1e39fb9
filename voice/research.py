"""Research: how a turn consults the knowledge base, stored as a real tool exchange.

- `auto`: every question is searched, when a knowledge base exists; the turn stores an assistant
  message with a `search` tool call and the tool result answering it.
- `model`: the model is told about the `search` tool and decides: templates that know tools get it
  declared natively, others get `TOOL_INSTRUCTIONS` in the system prompt. A reply that is a tool
  call is parsed (`models.tool_calls`: every shape small models write), run, stored, and the model
  answers again with the results.
- `off`: no research.
"""

from __future__ import annotations

import json

from models.tool_calls import new_call
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


def search_calls(calls: list[dict]) -> list[dict]:
    """The calls that name the search tool with a usable query (others are not run)."""
    usable = []
    for call in calls:
        arguments = json.loads(call["function"]["arguments"])
        query = arguments.get("query")
        if call["function"]["name"] == "search" and isinstance(query, str) and query.strip():
            usable.append(call)
    return usable


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
        return self.run([new_call("search", {"query": question})])
