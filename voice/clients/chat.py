"""`parlour chat`: a terminal client of the text chat stream.

Reads a line, sends it as a `conversation.item.create` and a `response.create` with
`output_modalities: ["text"]`, and prints the reply as it streams. Research the server did is
shown in a line. Ctrl-C during a reply cancels it; Ctrl-D (end of input) quits.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
from urllib.parse import urlencode

from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from voice.store.sessions import new_id

CANCEL = json.dumps({"type": "response.cancel"})
RESULT_TITLE = re.compile(r"(?m)^\[\d+\] (.+)$")  # the heading of each result in format_results


class ChatError(Exception):
    """The server could not be reached or refused the connection; one line for the user."""


def realtime_url(host: str, port: int, session_id: str | None = None) -> str:
    query = f"?{urlencode({'session_id': session_id})}" if session_id else ""
    return f"ws://{host}:{port}/v1/realtime{query}"


def research_line(item: dict) -> str | None:
    if item.get("type") == "function_call":
        try:
            query = json.loads(item.get("arguments") or "{}").get("query", "")
        except json.JSONDecodeError:
            query = item.get("arguments", "")
        return f"  [searching: {query}]"
    if item.get("type") == "function_call_output":
        titles = RESULT_TITLE.findall(item.get("output") or "")
        return f"  [found: {'; '.join(titles) if titles else 'nothing'}]"
    return None


def tool_line(item: dict) -> str | None:
    """A call the service ran on an MCP server, once it is done: what it called and what it got."""
    if item.get("type") != "mcp_call":
        return None
    outcome = (item.get("error") or {}).get("message") if item.get("error") else item.get("output")
    return f"  [{item.get('server_label')}: {item.get('name')} {item.get('arguments')} → {outcome}]"


async def _read_line(prompt: str) -> str | None:
    def read() -> str | None:
        if sys.stdin.isatty():
            print(prompt, end="", flush=True)
        line = sys.stdin.readline()
        return None if line == "" else line.rstrip("\n")

    return await asyncio.get_running_loop().run_in_executor(None, read)


async def open_connection(url: str, api_key: str | None):
    """A websocket to the server, or a ChatError saying in one line why there is none."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    try:
        return await connect(url, additional_headers=headers, max_size=None)
    except InvalidStatus as refused:
        body = refused.response.body.decode(errors="replace")
        try:
            body = json.loads(body).get("error", body)
        except (json.JSONDecodeError, AttributeError):
            pass
        raise ChatError(f"the server refused the connection: {body}") from None
    except OSError as error:
        raise ChatError(f"cannot reach {url}: {error.strerror or error}") from None


async def chat(url: str, api_key: str | None = None, out=sys.stdout) -> None:
    websocket = await open_connection(url, api_key)
    async with websocket:
        created = json.loads(await websocket.recv())
        print(f"session {created['session']['id']}", file=out, flush=True)
        loop = asyncio.get_running_loop()
        while (line := await _read_line("you> ")) is not None:
            if not line.strip():
                continue
            request_id = new_id("evt")
            await websocket.send(json.dumps({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": line}]}}))
            await websocket.send(json.dumps({"type": "response.create", "event_id": request_id,
                                             "response": {"output_modalities": ["text"]}}))
            try:
                loop.add_signal_handler(signal.SIGINT, lambda: asyncio.ensure_future(websocket.send(CANCEL)))
            except (NotImplementedError, RuntimeError):
                pass
            try:
                await _print_reply(websocket, request_id, out)
            finally:
                try:
                    loop.remove_signal_handler(signal.SIGINT)
                except (NotImplementedError, RuntimeError):
                    pass


async def _print_reply(websocket, request_id: str, out) -> None:
    started = False
    async for raw in websocket:
        event = json.loads(raw)
        kind = event.get("type")
        if kind == "conversation.item.added" and (line := research_line(event.get("item") or {})):
            print(line, file=out, flush=True)
        elif kind == "conversation.item.done" and (line := tool_line(event.get("item") or {})):
            print(line, file=out, flush=True)
        elif kind == "response.output_text.delta":
            if not started:
                print("parlour> ", end="", file=out)
                started = True
            print(event["delta"], end="", file=out, flush=True)
        elif kind == "error":
            print(f"error: {event['error']['message']}", file=out, flush=True)
            if event["error"].get("event_id") == request_id or event["error"].get("code") == "server_busy":
                return
        elif kind == "response.done":
            status = event["response"].get("status")
            print(" [cancelled]" if status == "cancelled" else "", file=out, flush=True)
            return
