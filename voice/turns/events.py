"""What goes into a turn and what comes out of it, typed.

A front end asks for a turn with a `TurnRequest` and reads the engine's `TurnEvent`s as they come:
`Researched` (research was stored), `Delta` (reply text), `Calls` (the reply called the client's
functions; stored, and the turn ends so the client can run them), `ToolsRan` (Parlour ran the
reply's calls to an MCP server's tools and stored them; the reply goes on from their results),
`ApprovalAsked` (the reply called MCP tools that wait for the user's approval; stored unrun, and the
turn ends), and always last `Done`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from voice.store.sessions import StoredMessage
from voice.tools.mcp import McpFailure
from voice.tools.toolbox import Toolbox
from voice.turns.delivery import Voice
from voice.turns.figures import TurnFigures


@dataclass
class TurnRequest:
    """One turn of a session: answer its last question (or the client's function results; with
    neither, the instructions and the conversation so far, as a greeting).

    `tools` are the client's functions (OpenAI chat tool specs), offered beside `search` under
    `tool_choice` ("auto", "none", "required" or {"type": "function", "name": ...}). A `spoken`
    turn's research is cut to the sentences that bear on the question (voice.knowledge.research),
    and its oversized evidence is cut rather than condensed. `temperature` is the client's, else
    the service's. Without `earlier_calls`, earlier exchanges that called the client's functions
    leave the prompt (voice.turns.prompt_layout.without_earlier_commands). A client's `context`
    smaller than the service's (Ollama's `num_ctx`) is what the prompt and the reply are fitted into.

    `cancel` may be set from anywhere: the reply stops and is stored as interrupted with the text
    delivered so far. The engine stores the reply (voice.turns.delivery) as `item_id`: sentence by
    sentence as it yields it, or, with a `voice` that speaks it, as each sentence's audio is sent.

    `figures` is the turn's record; a caller whose clock started earlier (a spoken turn, at its
    commit) passes its own, and `ttft_ms` is timed from its start.
    """

    session_id: str
    cancel: threading.Event = field(default_factory=threading.Event)
    instructions: str | None = None  # in place of the session's own, for this turn
    max_tokens: int | None = None
    tools: list[dict] = field(default_factory=list)
    tool_choice: str | dict | None = None
    spoken: bool = False
    temperature: float | None = None
    earlier_calls: bool = True
    context: int | None = None
    voice: Voice | None = None
    toolbox: Toolbox | None = None  # tools Parlour runs itself for this turn, in place of the configured ones
    item_id: str | None = None  # the reply's item id; a new one if None
    figures: TurnFigures = field(default_factory=TurnFigures)

    def offered_tools(self) -> list[dict]:
        """The client's functions this turn may call, under its `tool_choice`."""
        if self.tool_choice == "none":
            return []
        if isinstance(self.tool_choice, dict):
            return [t for t in self.tools if t["function"]["name"] == self.tool_choice.get("name")]
        return list(self.tools)

    @property
    def must_call(self) -> bool | str:
        """The client's `required` tool_choice: the reply opens with a call; a named one (OpenAI's
        chat or Realtime shape): the tool's name, and the reply is that tool's call."""
        choice = self.tool_choice
        if isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name") or choice.get("name")
            return name if isinstance(name, str) else True
        return choice not in (None, "auto", "none")


@dataclass
class Researched:
    """Research was stored before the reply: the search call and its results."""

    stored: list[StoredMessage]


@dataclass
class Delta:
    """A piece of the reply's text, to be delivered in order."""

    text: str


@dataclass
class Calls:
    """The reply called the client's functions. The call is stored; the turn ends, and the client
    runs them and asks again with their results."""

    calls: list[dict]
    stored: list[StoredMessage] = field(default_factory=list)


@dataclass
class ToolsRan:
    """The reply called tools Parlour runs itself (an MCP server's), and they ran: the call and its
    results are `stored` (`failures[n]` says why the n-th call failed, if it did), and the model
    answers from them."""

    stored: list[StoredMessage]
    failures: list[McpFailure | None]


@dataclass
class ApprovalAsked:
    """The reply called tools Parlour runs itself that wait for the user's approval: each call is
    `stored` unrun, one message each (its call marked `"approval": "requested"`), and the turn ends.
    The front end asks the user; an approved call is run then, and the next turn answers from it."""

    stored: list[StoredMessage]


@dataclass
class Done:
    """The turn is over: the reply `stored` (if the engine stored it) and the turn's `figures`."""

    figures: TurnFigures
    stored: list[StoredMessage] = field(default_factory=list)


TurnEvent = Researched | Delta | Calls | ToolsRan | ApprovalAsked | Done
