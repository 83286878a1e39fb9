"""The Parlour service: the websocket endpoint `/v1/realtime` (voice and text) and a few HTTP pages.

- `GET /`: the push-to-talk page (voice/clients/page.html), no outside assets.
- `GET /healthz`: the loaded models, the CPU features and settings the local engine runs with, and how many
  turns wait for the model.
- `GET /v1/sessions`, `GET /v1/figures`: the caller's stored sessions and its last turns' figures.

`Service` holds the loaded engines, the session store and the turn engine; each websocket
connection gets a `Connection`. With API keys configured, a connection must present one
(`Authorization: Bearer KEY`, or the subprotocol `openai-insecure-api-key.KEY` that browser clients
use) and sees only the sessions made with that key. Every request must name the server in its Host
(voice.hosts), and at most `max_connections` websockets are open at once.

Blocking work (SQLite, the models) runs in worker threads (`asyncio.to_thread`); the event loop
only moves events.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from http import HTTPStatus
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response
from websockets.protocol import State
from websockets.typing import Subprotocol

from models.audio import RATE
from models.stt import Transcript
from voice import http_api
from voice.chat import routes as chat_routes
from voice.config import Config
from voice.front_door import front_door
from voice.hosts import HostCheck
from voice.knowledge.base import KnowledgeBase
from voice.knowledge.research import Research, result_tokens
from voice.realtime.connection import Connection
from voice.store.sessions import SessionStore, UnknownSession, owner_of
from voice.tools.mcp import configured_servers
from voice.tools.toolbox import Toolbox
from voice.turns.engine import TurnEngine

log = logging.getLogger("parlour")
REALTIME_PATH = "/v1/realtime"
PAGE = (Path(__file__).parent / "clients" / "page.html").read_bytes()  # read once, not per request
MAX_UNREAD_MESSAGES = 4


def plain_response(status: HTTPStatus, text: str) -> Response:
    return _response(status, (text + "\n").encode(), "text/plain; charset=utf-8")


def _response(status: HTTPStatus, body: bytes, content_type: str) -> Response:
    headers = Headers([("Content-Type", content_type), ("Content-Length", str(len(body))),
                       ("Cache-Control", "no-store")])
    return Response(status.value, status.phrase, headers, body)


def json_response(status: HTTPStatus, data: object) -> Response:
    return _response(status, json.dumps(data).encode(), "application/json")


class Service:
    def __init__(self, config: Config, llm, stt, tts, store: SessionStore, knowledge: KnowledgeBase | None):
        self.config, self.llm, self.stt, self.tts = config, llm, stt, tts
        self.store, self.knowledge = store, knowledge
        # Whisper expects the knowledge base's names: "GNU" rather than "G&U"
        # (docs/research.md: Hearing the knowledge base).
        self.hotwords = " ".join(knowledge.vocabulary()) if knowledge is not None else ""
        # ...and a name it still mishears ("boss brand") is mended into the name ("Vossbrandt").
        self.mender = knowledge.mender() if knowledge is not None else None
        self.research = Research(config.research, knowledge, store, spoken_tokens=config.voice_research_tokens,
                                 count=result_tokens(llm))
        remote = llm.backend != "local"
        # A server's context is what it says one request gets (llama.cpp's /props), else `context`.
        self.engine = TurnEngine(llm, store, self.research, llm.context if remote else config.context,
                                 config.reply_tokens, config.max_queue,
                                 config.temperature, config.max_inflight if remote else 1)
        self.mcp_servers = configured_servers(config, os.environ)
        self.owners = {owner_of(key) for key in config.api_keys}
        self.voice_name = tts.name
        self.port: int | None = None
        self.hosts: HostCheck | None = None  # set once the port is known
        self.admitted: set[ServerConnection] = set()  # websocket connections let in, until they close
        self.started = time.time()
        self.http_connections: set[asyncio.Task] = set()

    @classmethod
    def load(cls, config: Config, llm=None, stt=None, tts=None) -> Service:
        """Load the engines (unless given) and open the store and knowledge base under `config`."""
        from voice.engines import load_llm, load_stt, load_tts

        knowledge = KnowledgeBase(config.knowledge_path) if config.knowledge_path.exists() else None
        return cls(config, llm or load_llm(config), stt or load_stt(config), tts or load_tts(config),
                   SessionStore(config.database), knowledge)

    def _load_model_cache(self) -> int:
        restored = self.llm.load_cache(self.config.model_cache) if hasattr(self.llm, "load_cache") else 0
        if restored:
            log.info("the model's cache of %d tokens from the last run is restored", restored)
        return restored

    def transcribe(self, audio: bytes, rate: int = RATE) -> Transcript:
        """What whisper hears in `audio`, expecting the knowledge base's names, misheard names
        mended; blocking, so callers run it in a worker thread. Drafts, commits and Wyoming audio
        all come through here."""
        heard = self.stt.transcribe(audio, rate, hotwords=self.hotwords, beam_size=self.config.stt_beam_size)
        return replace(heard, text=self.mender.mend(heard.text)) if self.mender else heard

    def owner(self, request: Request) -> str | None:
        """The owner a websocket handshake acts for (see `owner_of_key`)."""
        return self.owner_of_key(http_api.presented_key(request.headers.get("Authorization", ""),
                                               request.headers.get("Sec-WebSocket-Protocol", "")))

    # HTTP and the handshake ------------------------------------------------------------------
    def refusal(self, hosts: list[str], origins: list[str]) -> str | None:
        """Why a request (HTTP or websocket) is refused before anything else, or None."""
        assert self.hosts is not None  # known once serving, before any request is read
        host = hosts[0] if len(hosts) == 1 else ", ".join(hosts)
        if len(hosts) != 1 or not self.hosts.names_server(host):
            # A page on a rebinding domain sends its own Host (and a matching Origin).
            return f"403 Forbidden: the Host {host!r} does not name this server (add it to allowed_hosts to serve it)"
        origin = ", ".join(origins)
        if origin and not self.hosts.origin_allowed(origin):
            # A page from another site may not drive this service through the user's browser.
            return f"403 Forbidden: cross-origin requests are refused: {origin}"
        return None

    def owner_of_key(self, key: str | None) -> str | None:
        """The owner a key acts for: "" without API keys, None if the key is missing or wrong."""
        if not self.owners:
            return ""
        owner = owner_of(key) if key else None
        return owner if owner in self.owners else None

    def scope(self, owner: str) -> str | None:
        """The owner whose sessions a caller sees: without keys, every session is the user's."""
        return owner if self.owners else None

    async def http(self, request: http_api.Request) -> http_api.Reply:
        """Plain HTTP requests: the pages, the figures, and the chat APIs (voice.chat)."""
        if refused := self.refusal(request.headers_named("host"), request.headers_named("origin")):
            return http_api.text_reply(HTTPStatus.FORBIDDEN, refused)
        if request.method == "GET" and request.path == "/":
            return http_api.Reply(HTTPStatus.OK, PAGE, "text/html; charset=utf-8")
        if request.method == "GET" and request.path == "/healthz":
            return http_api.json_reply(HTTPStatus.OK, await self.health())
        if request.path in chat_routes.PATHS:
            return await chat_routes.serve(self, request)
        if request.path not in (REALTIME_PATH, "/v1/sessions", "/v1/figures"):
            return http_api.json_reply(HTTPStatus.NOT_FOUND, {"error": f"no such path: {request.path}"})
        owner = self.owner_of_key(http_api.presented_key(request.header("authorization") or ""))
        if owner is None:
            return http_api.json_reply(HTTPStatus.UNAUTHORIZED, {"error": "a valid API key is required"})
        if request.path == REALTIME_PATH:
            return http_api.text_reply(HTTPStatus.UPGRADE_REQUIRED,
                                       f"426 Upgrade Required: {REALTIME_PATH} takes websocket connections")
        sessions = await asyncio.to_thread(self.store.list, self.scope(owner))
        if request.path == "/v1/sessions":
            return http_api.json_reply(HTTPStatus.OK, [
                {"id": s.id, "title": s.title, "updated": s.updated, "messages": s.messages}
                for s in sessions if s.messages])
        mine = {s.id for s in sessions}
        return http_api.json_reply(HTTPStatus.OK, [f.as_json() for f in self.engine.recent if f.session_id in mine])

    async def health(self) -> dict:
        return {"status": "ok", "model": self.llm.name, "backend": self.llm.backend,
                "stt": f"{self.stt.path.parent.name}/{self.stt.path.name}", "voice": self.voice_name,
                "waiting": self.engine.waiting, **await asyncio.to_thread(self.llm.health)}

    async def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        """The websocket handshake (voice.front_door sends only upgrades here)."""
        url = urlsplit(request.path)
        if refused := self.refusal(request.headers.get_all("Host"), request.headers.get_all("Origin")):
            return plain_response(HTTPStatus.FORBIDDEN, refused)
        if url.path != REALTIME_PATH:
            return json_response(HTTPStatus.NOT_FOUND, {"error": f"no such path: {url.path}"})
        owner = self.owner(request)
        if owner is None:
            return json_response(HTTPStatus.UNAUTHORIZED, {"error": "a valid API key is required"})
        session_id = (parse_qs(url.query).get("session_id") or [""])[0]
        if session_id and not await asyncio.to_thread(self.store.exists, session_id, self.scope(owner)):
            missing = UnknownSession(session_id)
            return json_response(missing.status, {"error": str(missing)})
        self.admitted = {c for c in self.admitted if c.state is not State.CLOSED}
        if len(self.admitted) >= self.config.max_connections:
            return plain_response(HTTPStatus.SERVICE_UNAVAILABLE, f"503 Service Unavailable: "
                                  f"{len(self.admitted)} connections are open, the limit (max_connections)")
        self.admitted.add(connection)
        return None

    @staticmethod
    def select_subprotocol(connection: ServerConnection, offered: Sequence[Subprotocol]) -> Subprotocol | None:
        return Subprotocol("realtime") if "realtime" in offered else None

    async def handle(self, websocket: ServerConnection) -> None:
        request = websocket.request
        assert request is not None  # the handler runs once the handshake is done
        owner = self.owner(request) or ""
        session_id = (parse_qs(urlsplit(request.path).query).get("session_id") or [""])[0]
        if not session_id:
            session_id = await asyncio.to_thread(self.store.create, self.config.instructions, owner)
        elif await asyncio.to_thread(self.store.messages, session_id):
            self.engine.upkeep.warm(session_id)  # a resumed session: its history is evaluated before its next turn
        connection = Connection(websocket, self, session_id)
        try:
            await connection.run()
        finally:
            self.admitted.discard(websocket)
            if not await asyncio.to_thread(self.store.messages, session_id):  # leave no empty session behind
                await asyncio.to_thread(self.store.delete, session_id)

    # Running ---------------------------------------------------------------------------------
    def max_message_bytes(self) -> int:
        """Room for the longest text message, or all the allowed audio in one base64 append."""
        audio = self.config.max_audio_seconds * 48_000 * 4 // 3
        return max(self.config.max_text_chars * 4, audio) + 65_536

    async def serve_http(self, reader, writer) -> None:
        """One plain HTTP connection (voice.front_door), until it closes or the service stops."""
        task = asyncio.current_task()
        assert task is not None  # a coroutine runs in a task
        self.http_connections.add(task)
        try:
            await http_api.serve_http(reader, writer, self.http, max_body=self.max_message_bytes())
        except asyncio.CancelledError:
            writer.close()  # the service is stopping: an idle keep-alive connection just closes
        finally:
            self.http_connections.discard(task)

    async def serve(self, ready: Callable[[int], None] | None = None, stop: asyncio.Event | None = None) -> None:
        """Serve until `stop` is set (or SIGINT/SIGTERM when none is given)."""
        stop = stop or asyncio.Event()
        async with serve(
            self.handle, self.config.host, self.config.port, process_request=self.process_request,
            select_subprotocol=self.select_subprotocol, max_size=self.max_message_bytes(),
            create_connection=front_door(self.serve_http),
            # At most this many received messages wait unread per connection (each up to max_size):
            # beyond it the socket is not read, so a connection busy with a turn holds little memory.
            max_queue=MAX_UNREAD_MESSAGES, ping_interval=30, ping_timeout=60,
        ) as server:
            self.port = next(iter(server.sockets)).getsockname()[1]
            self.hosts = HostCheck(self.config.host, self.port, self.config.allowed_hosts)
            if recovered := await asyncio.to_thread(self.store.recover):
                log.info("%d replies cut short by a crash are marked interrupted", recovered)
            if self.mcp_servers:
                self.engine.use_tools(await Toolbox.gather(self.mcp_servers))
            wyoming = None
            if self.config.wyoming_port:
                from voice.wyoming import service as wyoming_service

                wyoming = await wyoming_service.start(self, self.config.host, self.config.wyoming_port)
            # The cache as the last run left it: a device that spoke before (Home Assistant's prompt
            # of 2,000 tokens and more) is answered at once. Without one, new sessions' prompt is warmed.
            if not await asyncio.to_thread(self._load_model_cache):
                self.engine.upkeep.warm(instructions=self.config.instructions)
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    loop.add_signal_handler(sig, stop.set)
                except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
                    pass
            if ready:  # after the handlers: a stop asked for once the service says it listens is a clean one
                ready(self.port)
            await stop.wait()
            for task in list(self.http_connections):
                task.cancel()
            await asyncio.gather(*self.http_connections, return_exceptions=True)
            if wyoming is not None:
                await wyoming.stop()
        await self.engine.close()
        if hasattr(self.llm, "save_cache"):
            saved = await asyncio.to_thread(self.llm.save_cache, self.config.model_cache)
            log.info("the model's cache of %d tokens is kept for the next start", saved)
