"""Small helpers that several test modules use (test modules do not import each other)."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_docs(folder) -> None:
    """A small knowledge base: Galway (a rain fact, then twelve long sections) and Cork (HTML)."""
    folder.mkdir()
    (folder / "galway.md").write_text(
        "# Galway\n\nGalway is a city on the west coast of Ireland. It gets about 1,200 mm of rain a year.\n\n"
        + "\n\n".join(f"## Section {i}\n\n" + f"Galway history paragraph {i}. " * 40 for i in range(12)))
    (folder / "cork.html").write_text(
        "<html><head><title>Cork</title></head><body><h1>Cork</h1><p>Cork is in Munster.</p></body></html>")
