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
from voice.knowledge import NO_RESULTS, KnowledgeBase, format_results

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        # Worded by measurement (scripts/eval_model.py): saying what the notes hold, and what they
        # are not for, keeps the small models from searching for arithmetic and general knowledge.
        "description": "Search the user's personal notes: appointments, codes, contacts, plans and documents. "
                       "Only for the user's own information, never for general knowledge or arithmetic.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "keywords to look for"}},
            "required": ["query"],
        },
    },
}

# The system prompt's addition under the `model` policy for templates that cannot declare tools.
TOOL_INSTRUCTIONS = (
    "You can search the user's notes. To search, reply with only this line and nothing else:\n"
    '<tool_call>{"name": "search", "arguments": {"query": "..."}}</tool_call>\n'
    "Search for questions about the user's own appointments, codes, passwords, home or plans; "
    "answer everything else directly."
)
def tool_instructions(search: bool, client_tools: list[dict]) -> str:
    """The tools in words, for templates that cannot declare them: `search` as tuned above, and a
    client's functions by name, parameters and description."""
    parts = [TOOL_INSTRUCTIONS] if search else []
    if client_tools:
        lines = []
        for tool in client_tools:
            function = tool["function"]
            parameters = ", ".join((function.get("parameters") or {}).get("properties") or {})
            lines.append(f"- {function['name']}({parameters}): {function.get('description') or ''}".rstrip(": "))
        parts.append("You can call these functions:\n" + "\n".join(lines) + "\nTo call one, reply with only "
                     'this line and nothing else:\n<tool_call>{"name": "...", "arguments": {...}}</tool_call>')
    return "\n\n".join(parts)


DESCRIBED = {"search": "query"}  # a search asked for in words: 'search ... with the query "..."'


class Research:
    """The research policy of a service, and the search tool it runs."""

    def __init__(self, policy: str, knowledge: KnowledgeBase | None, results: int = 3):
        self.policy = policy if knowledge is not None else "off"
        self.knowledge = knowledge
        self.results = results

    def run(self, calls: list[dict], found_only: bool = False) -> list[dict]:
        """The assistant message holding `calls` and the tool results answering each. With
        `found_only`, calls that found nothing (or name a tool that does not exist) are left out,
        and [] means none found anything."""
        answers = [(call, self._answer(call)) for call in calls]
        if found_only:
            answers = [(call, answer) for call, answer in answers if answer is not None]
            if not answers:
                return []
        messages: list[dict] = [{"role": "assistant", "content": None, "tool_calls": [c for c, _ in answers]}]
        for call, answer in answers:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": answer or NO_RESULTS})
        return messages

    def _answer(self, call: dict) -> str | None:
        """The search results as the model reads them; None when there are none, or when the call
        names a tool that does not exist or has no query (small models invent tools such as `add`)."""
        query = json.loads(call["function"]["arguments"]).get("query")
        if call["function"]["name"] != "search" or not isinstance(query, str) or not query.strip():
            return None
        found = self.knowledge.search(query, self.results) if self.knowledge else []
        return format_results(found) if found else None

    def for_question(self, question: str) -> list[dict]:
        """The `auto` policy's tool exchange for a question ([] under other policies)."""
        if self.policy != "auto" or not question.strip():
            return []
        return self.run([new_call("search", {"query": question})])
