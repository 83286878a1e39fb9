"""A real MCP server for tests and evaluations: a small home whose lights keep their state, made
with the `mcp` package and served over Streamable HTTP on 127.0.0.1, behind a bearer token.

`HomeMcpServer` starts it in a thread on an ephemeral port (`url`, `lights`) and stops it; its
`broken` tool always fails, as a tool of a real server can.
"""

from __future__ import annotations

import socket
import threading
import time

import uvicorn
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

TOKEN = "home-token"
LIGHTS = ("kitchen light", "hallway light", "bedroom lamp")


class _OneToken:
    def __init__(self, token: str):
        self.token = token

    async def verify_token(self, token: str) -> AccessToken | None:
        return AccessToken(token=token, client_id="parlour", scopes=[]) if token == self.token else None


def home_server(lights: dict[str, bool], token: str) -> MCPServer:
    server = MCPServer("home", token_verifier=_OneToken(token), log_level="WARNING",
                       auth=AuthSettings(issuer_url="http://127.0.0.1/", resource_server_url=None))

    def light(name: str) -> str:
        found = name.strip().lower().removeprefix("the ")
        if found not in lights:
            raise ToolError(f"there is no light called {name!r}; the lights are: {', '.join(lights)}")
        return found

    @server.tool()
    def turn_on(name: str) -> str:
        """Turn on a light of the home, by its name (for example "kitchen light")."""
        lights[light(name)] = True
        return f"The {light(name)} is on."

    @server.tool()
    def turn_off(name: str) -> str:
        """Turn off a light of the home, by its name (for example "kitchen light")."""
        lights[light(name)] = False
        return f"The {light(name)} is off."

    @server.prompt()
    def home() -> str:
        """What the home has, as Home Assistant's MCP server tells its devices."""
        return f"The lights of this home are: {', '.join(lights)}."

    @server.tool()
    def broken(name: str) -> str:
        """Open the garage door, by its name."""
        raise ToolError("the garage door does not answer")

    return server


class HomeMcpServer:
    def __init__(self, token: str = TOKEN):
        self.token = token
        self.lights = dict.fromkeys(LIGHTS, False)
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        app = home_server(self.lights, token).streamable_http_app()
        # Without a graceful-shutdown limit, a client's open stream keeps the server from stopping.
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True)

    def __enter__(self) -> HomeMcpServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the MCP server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._socket.close()
