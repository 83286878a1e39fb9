"""Plain HTTP/1.1 on the service's port (h11 does the framing; `voice.front_door` routes here).

`serve_http` reads requests off one keep-alive connection, one after another, and writes each
`Reply`: a whole body, or a stream of chunks (the chat APIs' NDJSON and server-sent events). A body
over `max_body` bytes gets 413 (`BodyTooLarge`), a request h11 cannot parse gets 400, and the
connection closes; so does one that sends no whole request for `IDLE_SECONDS`. An error a route
raises is answered with the status it carries if it is a `ParlourError` (fitting.errors), else 500. If
the client goes away while a stream is written, the stream is closed, which cancels its turn.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

import h11

from fitting.errors import ParlourError
from voice.validation import json_value

log = logging.getLogger("parlour")
IDLE_SECONDS = 120  # a keep-alive connection with no new request for this long is closed
KEY_PROTOCOL = "openai-insecure-api-key."  # how browsers' websocket clients present a key


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: list[tuple[str, str]]
    body: bytes = b""

    def header(self, name: str) -> str | None:
        values = self.headers_named(name)
        return values[0] if values else None

    def headers_named(self, name: str) -> list[str]:
        name = name.lower()
        return [value for key, value in self.headers if key == name]

    def json(self) -> object:
        """The body as JSON; `ValueError` with a plain message if it is not."""
        try:
            return json_value(self.body or b"null")
        except ValueError as error:
            raise ValueError(f"the request body is not JSON: {error}") from None


@dataclass
class Reply:
    """A response: `body`, or `stream` (chunks written as they come, the connection kept)."""

    status: HTTPStatus
    body: bytes = b""
    content_type: str = "application/json"
    stream: AsyncGenerator[bytes, None] | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)


def presented_key(authorization: str, protocols: str = "") -> str | None:
    """The API key of an `Authorization: Bearer KEY` header, or of a browser's subprotocol."""
    if authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    for protocol in protocols.split(","):
        if protocol.strip().startswith(KEY_PROTOCOL):
            return protocol.strip()[len(KEY_PROTOCOL):]
    return None


def text_reply(status: HTTPStatus, text: str) -> Reply:
    return Reply(status, (text + "\n").encode(), "text/plain; charset=utf-8")


def json_reply(status: HTTPStatus, data: object) -> Reply:
    return Reply(status, json.dumps(data).encode())


def status_reply(status: HTTPStatus, problem: Exception) -> Reply:
    """A request that could not be read, told in plain text after its status line's words."""
    return text_reply(status, f"{status.value} {status.phrase}: {problem}")


def problem_reply(problem: ParlourError) -> Reply:
    """`problem` as the service's own routes tell errors: its status, `{"error": message}`."""
    return json_reply(problem.status, {"error": str(problem)})


Handler = Callable[[Request], Awaitable[Reply]]


async def serve_http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handle: Handler,
                     max_body: int) -> None:
    """Serve one connection's requests until either side closes it."""
    connection = h11.Connection(h11.SERVER)
    try:
        while True:
            try:
                request = await asyncio.wait_for(_read_request(connection, reader, max_body), IDLE_SECONDS)
            except TimeoutError:
                return
            except h11.RemoteProtocolError as error:
                if connection.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    await _send(connection, writer, status_reply(HTTPStatus(error.error_status_hint), error))
                return
            except BodyTooLarge as error:
                await _send(connection, writer, status_reply(error.status, error))
                return
            if request is None:
                return
            try:
                reply = await handle(request)
            except ParlourError as problem:  # a route that did not answer it in its own shape
                reply = problem_reply(problem)
            except Exception:  # a bug: say so in-band, keep serving
                log.exception("serving %s %s failed", request.method, request.path)
                reply = json_reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error (see the service log)"})
            await _send(connection, writer, reply)
            if connection.our_state is h11.MUST_CLOSE or connection.their_state is h11.MUST_CLOSE:
                return
            connection.start_next_cycle()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass  # the client went away
    finally:
        writer.close()


class BodyTooLarge(ParlourError):
    """A request whose body is over the connection's limit; the connection closes after its reply."""

    code, status = "body_too_large", HTTPStatus.REQUEST_ENTITY_TOO_LARGE


async def _next_event(connection: h11.Connection, reader: asyncio.StreamReader):
    while True:
        event = connection.next_event()
        if event is not h11.NEED_DATA:
            return event
        connection.receive_data(await reader.read(65_536))


async def _read_request(connection: h11.Connection, reader: asyncio.StreamReader, max_body: int) -> Request | None:
    event = await _next_event(connection, reader)
    if isinstance(event, h11.ConnectionClosed):
        return None
    assert isinstance(event, h11.Request)
    url = urlsplit(event.target.decode("latin-1"))
    headers = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in event.headers]
    if any(k == "content-length" and int(v) > max_body for k, v in headers):  # h11 checked it is a number
        raise BodyTooLarge(f"the body is over {max_body} bytes")
    body = bytearray()
    while not isinstance(part := await _next_event(connection, reader), h11.EndOfMessage):
        if isinstance(part, h11.ConnectionClosed):
            return None
        body += part.data
        if len(body) > max_body:
            raise BodyTooLarge(f"the body is over {max_body} bytes")
    return Request(event.method.decode(), url.path, parse_qs(url.query), headers, bytes(body))


async def _send(connection: h11.Connection, writer: asyncio.StreamWriter, reply: Reply) -> None:
    headers = [("Content-Type", reply.content_type), ("Cache-Control", "no-store"), *reply.headers]
    if reply.stream is None:
        headers.append(("Content-Length", str(len(reply.body))))
    writer.write(connection.send(h11.Response(status_code=reply.status.value, headers=headers,
                                              reason=reply.status.phrase)))
    if reply.stream is None:
        writer.write(connection.send(h11.Data(data=reply.body)))
    else:
        try:
            async for chunk in reply.stream:
                writer.write(connection.send(h11.Data(data=chunk)))
                await writer.drain()
        finally:
            await reply.stream.aclose()  # also when the client left mid-stream: the turn stops
    writer.write(connection.send(h11.EndOfMessage()))
    await writer.drain()
