"""The MCP servers a Realtime client brings as `mcp` tools, without I/O: every server the session
defined (a later tools array may name one again by its label alone), those `session.tools` uses,
and the tools each one listed.

A server that is new, changed or failed before is listed, as the GA API does: its `mcp_list_tools`
item is added, `mcp_list_tools.in_progress` sent, and the connection lists it in the background
(`ListMcpTools`). The report (`listed`) ends it with `mcp_list_tools.completed` and the item done with
its tools, or `mcp_list_tools.failed` and an `error`. A listing overtaken by a newer definition of
its label is dropped. A response uses the tools listed when it was asked for.

The list items are announced, not stored: a resumed session lists its servers again when its client
sends them, with their credentials, which are never stored.
"""

from __future__ import annotations

from dataclasses import dataclass

from voice.realtime import events
from voice.realtime.effects import Effect, ListMcpTools, Send
from voice.store.sessions import new_id
from voice.tools.mcp import McpFailure, McpServer, McpTool
from voice.tools.toolbox import Toolbox


@dataclass
class Listing:
    server: McpServer
    item_id: str  # its `mcp_list_tools` item
    tools: list[McpTool] | None = None  # None until listed
    failed: bool = False


class SessionServers:
    def __init__(self) -> None:
        self.listings: dict[str, Listing] = {}  # by label: every server the session defined
        self.used: list[str] = []  # the labels of session.tools' mcp tools

    @property
    def known(self) -> dict[str, McpServer]:
        return {label: listing.server for label, listing in self.listings.items()}

    def use(self, servers: list[McpServer]) -> list[Effect]:
        """`session.tools`' servers, in place of the session's earlier ones."""
        self.used = [server.label for server in servers]
        return self.define(servers)

    def define(self, servers: list[McpServer]) -> list[Effect]:
        """Take these definitions; list each server that is new, changed or failed before."""
        effects: list[Effect] = []
        for server in servers:
            earlier = self.listings.get(server.label)
            if earlier is not None and earlier.server == server and not earlier.failed:
                continue
            listing = self.listings[server.label] = Listing(server, new_id("mcpl"))
            empty = events.mcp_list_tools_item(listing.item_id, server.label, [])
            effects += [Send(events.event("conversation.item.added", previous_item_id=None, item=empty)),
                        Send(events.event("mcp_list_tools.in_progress", item_id=listing.item_id)),
                        ListMcpTools(server, listing.item_id)]
        return effects

    def listed(self, label: str, item_id: str, found: list[McpTool] | McpFailure) -> list[Effect]:
        """A listing ended: its tools, or why the server could not be listed."""
        listing = self.listings.get(label)
        if listing is None or listing.item_id != item_id:
            return []  # the label was defined again meanwhile; that listing reports for it
        if isinstance(found, McpFailure):
            listing.failed = True
            return [Send(events.event("mcp_list_tools.failed", item_id=item_id)),
                    Send(events.error(f"the tools of MCP server {label!r} could not be listed: {found}", found.code))]
        listing.tools = found
        item = events.mcp_list_tools_item(item_id, label, [tool.listed for tool in found])
        return [Send(events.event("mcp_list_tools.completed", item_id=item_id)),
                Send(events.event("conversation.item.done", previous_item_id=None, item=item))]

    def toolbox(self, labels: list[str]) -> Toolbox:
        """The tools these servers listed so far."""
        return Toolbox([tool for label in labels for tool in self.listings[label].tools or []])

    @property
    def session_toolbox(self) -> Toolbox | None:
        """The tools of session.tools' servers; None if it names none (the configured ones may serve)."""
        return self.toolbox(self.used) if self.used else None

    def shown(self) -> list[dict]:
        """session.tools' mcp tools as the session shows them: without their credentials."""
        return [shown(self.listings[label].server) for label in self.used]


def shown(server: McpServer) -> dict:
    tool: dict = {"type": "mcp", "server_label": server.label, "server_url": server.url,
                  "require_approval": server.approval.shown}
    if server.allowed_tools is not None:
        tool["allowed_tools"] = sorted(server.allowed_tools)
    if server.description:
        tool["server_description"] = server.description
    return tool
