"""Tools on MCP servers (Streamable HTTP), which Parlour offers the model and runs itself.

An `McpServer` is a label, a URL, and the headers sent to it (a bearer token from the
configuration or the environment, never from a stored session). `list_tools` reads what it offers,
`call_tool` runs one call and returns the text the model reads. Each call opens its own
connection: a server that restarted, or went away and came back, is simply reached again.

What fails is one of the Realtime protocol's MCP error shapes, as a `ParlourError`:
`McpProtocolError` (the server answered, but not as MCP: a wrong path, a refused token),
`McpToolError` (the tool ran and failed) and `McpHttpError` (no answer at all: down, or refused).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import TypeVar
from urllib.parse import unquote, urlsplit

import httpx2
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from fitting.errors import ParlourError
from voice.config import Config, ConfigError

T = TypeVar("T")

TIMEOUT_S = 30  # a tool that acts on a home answers in well under this


class McpFailure(ParlourError):
    """An MCP server or one of its tools failed; `shape` is the error of the call's `mcp_call` item."""

    # Raised as one of the kinds below; `kind` is the `mcp_call` item's error type.
    code, status, kind = "mcp_error", HTTPStatus.BAD_GATEWAY, "tool_execution_error"

    @property
    def shape(self) -> dict:
        return {"type": self.kind, "message": str(self)}


class McpProtocolError(McpFailure):
    code, kind = "mcp_protocol_error", "protocol_error"

    def __init__(self, message: str, protocol_code: int):
        super().__init__(message)
        self.protocol_code = protocol_code

    @property
    def shape(self) -> dict:
        return {"type": self.kind, "code": self.protocol_code, "message": str(self)}


class McpToolError(McpFailure):
    code, kind = "mcp_tool_execution_error", "tool_execution_error"


class McpHttpError(McpFailure):
    code, kind = "mcp_http_error", "http_error"

    def __init__(self, message: str, http_code: int = HTTPStatus.BAD_GATEWAY):
        super().__init__(message)
        self.http_code = http_code

    @property
    def shape(self) -> dict:
        return {"type": self.kind, "code": self.http_code, "message": str(self)}


@dataclass(frozen=True)
class Approval:
    """Which of a server's tools wait for the user's approval before they run (the GA protocol's
    `require_approval`): a tool named in `always` waits, one named in `never` runs at once, and any
    other follows `others`."""

    others: bool = False
    always: frozenset[str] = frozenset()
    never: frozenset[str] = frozenset()

    def needed(self, name: str) -> bool:
        if name in self.always:
            return True
        return False if name in self.never else self.others

    @property
    def shown(self) -> str | dict:
        """As a Realtime session shows it: "always", "never" or the filter object."""
        if not self.always and not self.never:
            return "always" if self.others else "never"
        return {key: {"tool_names": sorted(names)} for key, names in (("always", self.always),
                                                                      ("never", self.never)) if names}


@dataclass(frozen=True)
class McpServer:
    label: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    allowed_tools: frozenset[str] | None = None  # None: every tool it offers
    approval: Approval = Approval()  # the configured servers' tools run at once
    description: str = ""


@dataclass(frozen=True)
class McpTool:
    server: McpServer
    name: str
    description: str
    input_schema: dict

    @property
    def spec(self) -> dict:
        """The tool as the model is offered it: an OpenAI function."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.input_schema}}

    @property
    def listed(self) -> dict:
        """The tool as a Realtime `mcp_list_tools` item lists it."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


async def list_tools(server: McpServer) -> list[McpTool]:
    """The tools `server` offers that its `allowed_tools` let through."""
    async def listing(client: Client) -> list[McpTool]:
        tools = (await client.list_tools()).tools
        return [McpTool(server, tool.name, tool.description or "", dict(tool.input_schema)) for tool in tools
                if server.allowed_tools is None or tool.name in server.allowed_tools]
    return await _connected(server, listing)


async def server_prompt(server: McpServer) -> str:
    """The text of the prompts `server` offers that need no arguments: what it says about itself
    and its tools (Home Assistant's names the home's areas and devices)."""
    async def reading(client: Client) -> str:
        prompts = (await client.list_prompts()).prompts
        texts = []
        for prompt in prompts:
            if any(argument.required for argument in prompt.arguments or []):
                continue
            for message in (await client.get_prompt(prompt.name)).messages:
                if message.content.type == "text":
                    texts.append(message.content.text)
        return "\n\n".join(texts)
    return await _connected(server, reading)


async def call_tool(server: McpServer, name: str, arguments: dict) -> str:
    """Run one call; returns what the tool answered, as the model reads it."""
    async def calling(client: Client) -> str:
        result = await client.call_tool(name, arguments)
        text = "\n".join(block.text for block in result.content if block.type == "text")
        if not text and result.structured_content is not None:
            text = json.dumps(result.structured_content)
        if result.is_error:
            raise McpToolError(text or f"{name} failed")
        return text
    return await _connected(server, calling)


async def _connected(server: McpServer, use: Callable[[Client], Awaitable[T]]) -> T:
    """`use` a fresh connection to `server`; what fails is told as an `McpFailure`."""
    try:
        async with httpx2.AsyncClient(headers=server.headers, timeout=TIMEOUT_S,
                                      event_hooks={"response": [_refused]}) as http, \
                Client(streamable_http_client(server.url, http_client=http),
                       read_timeout_seconds=TIMEOUT_S) as client:
            return await use(client)
    except (Exception, ExceptionGroup) as error:  # the transport's task group wraps what it raised
        raise _told(server, _first_leaf(error)) from error


async def _refused(response: httpx2.Response) -> None:
    """The MCP client hides an HTTP status behind "Server returned an error response": keep it."""
    if response.status_code in (HTTPStatus.UNAUTHORIZED, HTTPStatus.FORBIDDEN, HTTPStatus.NOT_FOUND):
        raise McpHttpError(f"{response.request.url} answered HTTP {response.status_code}", response.status_code)


def _first_leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _told(server: McpServer, error: BaseException) -> McpFailure:
    if isinstance(error, McpFailure):
        return error
    if isinstance(error, MCPError):
        return McpProtocolError(f"MCP server {server.label!r}: {error}", error.code)
    if isinstance(error, httpx2.HTTPError):
        return McpHttpError(f"MCP server {server.label!r} at {server.url} cannot be reached: {error}")
    return McpProtocolError(f"MCP server {server.label!r}: {type(error).__name__}: {error}", -32603)


def url_allowed(url: str, allowed: list[str]) -> bool:
    """Whether a client may have Parlour reach `url` (`mcp_allowed_urls`): it equals an entry, or
    starts with an entry that ends in "/". A URL with a user name or a `.`/`..` segment is never
    allowed: either could lead past the entry's prefix once the URL is resolved."""
    parts = urlsplit(url)
    segments = unquote(parts.path).split("/")
    if parts.scheme not in ("http", "https") or "@" in parts.netloc or "." in segments or ".." in segments:
        return False
    return any(url == entry or entry.endswith("/") and url.startswith(entry) for entry in allowed)


def configured_servers(config: Config, environ: Mapping[str, str]) -> list[McpServer]:
    """`mcp_servers` (LABEL=URL) with the bearer tokens `mcp_tokens` (LABEL=VARIABLE) names."""
    servers = dict(_pairs("mcp_servers", config.mcp_servers))
    headers: dict[str, dict[str, str]] = {}
    for label, variable in _pairs("mcp_tokens", config.mcp_tokens):
        if label not in servers:
            raise ConfigError(f"mcp_tokens: {label!r} is not one of mcp_servers' labels ({', '.join(servers)})")
        if not environ.get(variable):
            raise ConfigError(f"mcp_tokens: the environment variable {variable} (the token of {label!r}) is not set")
        headers[label] = {"Authorization": f"Bearer {environ[variable]}"}
    for label, url in servers.items():
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"mcp_servers: {label!r} needs an http(s) URL, got {url!r}")
    return [McpServer(label, url, headers.get(label, {})) for label, url in servers.items()]


def _pairs(key: str, entries: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for entry in entries:
        label, equals, value = entry.partition("=")
        if not equals or not label.strip() or not value.strip():
            raise ConfigError(f"{key}: each entry is LABEL=VALUE, got {entry!r}")
        pairs.append((label.strip(), value.strip()))
    labels = [label for label, _ in pairs]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"{key}: a label is given twice: {', '.join(labels)}")
    return pairs
