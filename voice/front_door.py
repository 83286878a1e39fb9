"""One port for websockets and plain HTTP: each TCP connection is routed by its first request.

`websockets` serves only the upgrade to a websocket (a GET); the chat APIs need POST bodies,
streamed replies and keep-alive. So every accepted connection starts as a `FrontDoor`, which reads
until the first request's head is complete. A websocket upgrade goes on as the websocket
connection it already is; anything else is handed, with the bytes read so far, to an asyncio
stream that `voice.http_api` serves over h11.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable

from websockets.asyncio.server import ServerConnection

HEAD_LIMIT = 65_536  # a request head longer than this is not a request this service serves
HEAD_SECONDS = 10  # the first request's head must arrive within this (websockets' own opening timeout)
_UPGRADE = re.compile(rb"^upgrade:[ \t]*websocket[ \t]*\r?$", re.IGNORECASE | re.MULTILINE)

HttpHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def front_door(http: HttpHandler) -> type[ServerConnection]:
    """The connection class to give `websockets.asyncio.server.serve(create_connection=...)`."""

    class FrontDoor(ServerConnection):
        """A websocket connection that becomes one only when its first request asks to upgrade."""

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self._head = b""
            self._routed = False
            self._raw = transport
            self._late = asyncio.get_running_loop().call_later(HEAD_SECONDS, self._give_up)

        def _give_up(self) -> None:
            if not self._routed:
                self._raw.close()

        def data_received(self, data: bytes) -> None:
            if self._routed:
                return super().data_received(data)
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end == -1 and len(self._head) < HEAD_LIMIT:
                return
            self._routed = True
            self._late.cancel()
            head, self._head = self._head, b""
            if end != -1 and head.startswith(b"GET ") and _UPGRADE.search(head[:end]):
                super().connection_made(self._raw)
                return super().data_received(head)
            reader = asyncio.StreamReader(limit=HEAD_LIMIT)
            plain = asyncio.StreamReaderProtocol(reader, http)
            self._raw.set_protocol(plain)
            plain.connection_made(self._raw)
            plain.data_received(head)

        def eof_received(self) -> None:
            if self._routed:
                super().eof_received()
                return
            self._raw.close()  # closed before a whole request head arrived

        def connection_lost(self, exc: Exception | None) -> None:
            if self._routed:
                super().connection_lost(exc)
            else:
                self._late.cancel()

    return FrontDoor
