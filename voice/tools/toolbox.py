"""The tools a turn runs itself, by the name the model calls them: those of the MCP servers.

`Toolbox.gather` lists each server's tools once; a server that cannot be listed is left out (and
said why), and the others serve. A name two servers share is offered as `LABEL__NAME` for each.
`run` answers a model's call with the tool message it reads, and, when the call failed, the failure.
A call to a tool whose server's `approval` asks for it waits for the user's approval
(`needs_approval`): the turn engine stores it unrun.
"""

from __future__ import annotations

import asyncio
import json
import logging

from voice.tools.mcp import McpFailure, McpServer, McpTool, call_tool, list_tools, server_prompt

log = logging.getLogger("parlour")


class Toolbox:
    def __init__(self, tools: list[McpTool], prompt: str = ""):
        self.prompt = prompt  # what the servers' own prompts say, for the system prompt
        names = [tool.name for tool in tools]
        self._tools = {tool.name if names.count(tool.name) == 1 else f"{tool.server.label}__{tool.name}": tool
                       for tool in tools}
        # The tools as the model is offered them (OpenAI functions), under the names it calls: made
        # once, as every turn's offer reads them.
        self.specs = [{"type": "function", "function": {**tool.spec["function"], "name": name}}
                      for name, tool in self._tools.items()]

    @classmethod
    async def gather(cls, servers: list[McpServer]) -> Toolbox:
        listed = await asyncio.gather(*(list_tools(server) for server in servers), return_exceptions=True)
        tools: list[McpTool] = []
        answering: list[McpServer] = []
        for server, found in zip(servers, listed, strict=True):
            if isinstance(found, McpFailure):
                log.warning("the tools of MCP server %r are not offered: %s", server.label, found)
            elif isinstance(found, BaseException):
                raise found
            else:
                tools += found
                answering.append(server)
        return cls(tools, "\n\n".join(filter(None, await asyncio.gather(*map(_prompt_of, answering)))))

    def __contains__(self, name: str) -> bool:
        return name in self._tools

    def tool(self, name: str) -> McpTool:
        return self._tools[name]

    def needs_approval(self, name: str) -> bool:
        """Whether a call to the tool `name` waits for the user's approval before it runs."""
        tool = self._tools[name]
        return tool.server.approval.needed(tool.name)

    def labelled(self, call: dict) -> dict:
        """A call to one of these tools as it is stored: with its server's label."""
        return {**call, "server_label": self._tools[call["function"]["name"]].server.label}

    async def run(self, call: dict) -> tuple[dict, McpFailure | None]:
        """The tool message answering `call` (an OpenAI tool call to one of these tools)."""
        tool = self._tools[call["function"]["name"]]
        arguments = json.loads(call["function"]["arguments"] or "{}")
        failure: McpFailure | None = None
        try:
            text = await call_tool(tool.server, tool.name, arguments if isinstance(arguments, dict) else {})
        except McpFailure as error:
            text, failure = f"Error: {error}", error
        return {"role": "tool", "tool_call_id": call["id"], "content": text}, failure


async def _prompt_of(server: McpServer) -> str:
    """A server's prompt; one that offers none (or cannot say) adds nothing."""
    try:
        return await server_prompt(server)
    except McpFailure as failure:
        log.info("MCP server %r offers no prompt: %s", server.label, failure)
        return ""
