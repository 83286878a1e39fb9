"""Which Host (and Origin) values name this server: the defence against DNS rebinding.

A page on a rebinding domain (`evil.example` resolving to 127.0.0.1) reaches the service with
`Host: evil.example:8765` and a matching `Origin`, so comparing the two proves nothing. Instead a
request is served only when its Host names the server: the address it is bound to, `localhost`,
`127.0.0.1` or `[::1]`, with the server's port, or an entry of the `allowed_hosts` setting (`name`
for any port, `name:port` for one). A browser's Origin, when sent, must name the server the same way.
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

LOOPBACK = ("localhost", "127.0.0.1", "::1")
WILDCARDS = ("", "0.0.0.0", "::")


def _split(value: str) -> tuple[str, int | None] | None:
    """(hostname, port) of "name[:port]", lower-cased and unbracketed; None if it is not one."""
    try:
        parts = urlsplit("//" + value.strip())
        return (parts.hostname or "", parts.port) if parts.hostname else None
    except ValueError:  # a port that is not a number, an unclosed bracket
        return None


class HostCheck:
    """`names_server(host)` and `origin_allowed(origin)` for one running server."""

    def __init__(self, bound: str, port: int, allowed_hosts: list[str]):
        self.port = port
        own = set(LOOPBACK)
        if bound in WILDCARDS:
            # Bound to every interface: the machine's own name is a name of the server too; the
            # addresses others use to reach it belong in allowed_hosts.
            own.add(socket.gethostname().lower())
        else:
            own.add(bound.strip("[]").lower())
        self.own = own
        self.extra: set[tuple[str, int | None]] = {split for entry in allowed_hosts if (split := _split(entry))}

    def names_server(self, host: str | None, default_port: int = 80) -> bool:
        split = _split(host) if host else None
        if split is None:
            return False
        name, port = split
        port = port or default_port
        if name in self.own and port == self.port:
            return True
        return (name, None) in self.extra or (name, port) in self.extra

    def origin_allowed(self, origin: str) -> bool:
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and self.names_server(
            parts.netloc, 443 if parts.scheme == "https" else 80)
