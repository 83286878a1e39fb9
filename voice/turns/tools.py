"""The tools a turn offers the model, and how they are offered.

Under the `model` research policy the model is offered `search`; a client may add its own
functions. A chat template that knows tools gets them declared natively; otherwise they are
described in words in the system prompt. Either way the offer is the same on every attempt of a
turn and on every turn of a session, which keeps the prompt's prefix (and llama.cpp's cache of it)
stable. Measured on Qwen2.5-Coder-1.5B: instructions beside a native declaration made it invent tools.
"""

from __future__ import annotations

from dataclasses import dataclass

from voice.knowledge.research import SEARCH_TOOL

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


@dataclass(frozen=True)
class Offer:
    tools: list[dict]  # everything offered: `search` first, then the client's
    native: list[dict] | None  # declared to a template that knows tools
    # What the system prompt gains: the MCP servers' prompt, and for a template that cannot
    # declare tools, their description.
    instructions: str

    @property
    def names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools]


def offer(search: bool, client: list[dict], knows_tools: bool, servers_prompt: str = "") -> Offer:
    """The offer of `search` (if the policy lets the model ask) and the client's functions; an MCP
    server's own prompt (Home Assistant's names the home's devices) goes into the system prompt."""
    tools = ([SEARCH_TOOL] if search else []) + client
    native = tools if tools and knows_tools else None
    described = "" if native or not tools else tool_instructions(search, client)
    return Offer(tools, native, "\n\n".join(part for part in (servers_prompt, described) if part))
