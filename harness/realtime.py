"""A real Parlour server on 127.0.0.1 (ephemeral port) and a strict protocol client, for tests and benchmarks."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
from dataclasses import replace

from openai.types.realtime import RealtimeServerEvent
from pydantic import TypeAdapter
from websockets.sync.client import connect

from voice.config import Config
from voice.server import Service

SERVER_EVENT = TypeAdapter(RealtimeServerEvent)
# A response that answered: whole, or cut at max_output_tokens (tests keep replies short).
ANSWERED = ("completed", "incomplete")

WEATHER_TOOL = {"type": "function", "name": "get_weather", "description": "The current weather in a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
# One valid event of each kind a client sends, every field set: what the fuzz of malformed events
# mutates (harness.fuzz), against a live server and straight against the protocol.
VALID_EVENTS = [
    {"type": "session.update", "session": {"type": "realtime", "instructions": "Be brief.",
                                           "output_modalities": ["text"], "audio": {"output": {"speed": 1.0}},
                                           "tools": [WEATHER_TOOL], "tool_choice": "auto"}},
    {"type": "conversation.item.create", "previous_item_id": "root", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hello."}], "id": "msg_x"}},
    {"type": "conversation.item.create", "item": {"type": "function_call_output", "call_id": "c1", "output": "x"}},
    {"type": "conversation.item.retrieve", "item_id": "msg_x"},
    {"type": "conversation.item.delete", "item_id": "msg_y"},
    {"type": "conversation.item.truncate", "item_id": "msg_x", "content_index": 0, "audio_end_ms": 10},
    {"type": "input_audio_buffer.append", "audio": "AAAA"},
    {"type": "input_audio_buffer.commit"},
    {"type": "input_audio_buffer.clear"},
    {"type": "response.cancel"},
    {"type": "response.create", "response": {"output_modalities": ["text"], "max_output_tokens": 1,
                                             "instructions": "x", "metadata": {"k": "v"}, "tool_choice": "none"}},
]


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now (for servers given a port, not port 0)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RunningServer:
    """`Service` serving in a thread with its own event loop; `stop()` shuts it down for real."""

    def __init__(self, config: Config, llm, stt, tts):
        self.config = replace(config, port=0)
        self.service = Service.load(self.config, llm=llm, stt=stt, tts=tts)
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the server did not start")

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await self.service.serve(ready=lambda port: self._ready.set(), stop=self._stop)

        asyncio.run(main())

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    @property
    def port(self) -> int:
        return self.service.port

    def url(self, session_id: str | None = None) -> str:
        query = f"?session_id={session_id}" if session_id else ""
        return f"ws://127.0.0.1:{self.port}/v1/realtime{query}"

    def idle(self, timeout: float = 120) -> None:
        """Wait for the engine's background work (summaries, warm-ups, refreshes)."""
        asyncio.run_coroutine_threadsafe(self.service.engine.idle(), self._loop).result(timeout)

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)
        self.service.store.close()


class Client:
    """A synchronous protocol client: every event it receives must validate as a RealtimeServerEvent."""

    def __init__(self, url: str, api_key: str | None = None, push_to_talk: bool = True, **options):
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self.ws = connect(url, additional_headers=headers, max_size=None, open_timeout=30, **options)
        self.events: list[dict] = []
        self.session = self.recv()
        assert self.session["type"] == "session.created"
        if push_to_talk:  # the test says when a question ends: a commit, not the server's VAD (the default)
            self.send({"type": "session.update", "session": {"type": "realtime",
                                                             "audio": {"input": {"turn_detection": None}}}})
            self.until("session.updated")

    @property
    def session_id(self) -> str:
        return self.session["session"]["id"]

    def send(self, event: dict | str) -> None:
        self.ws.send(event if isinstance(event, str) else json.dumps(event))

    def recv(self, timeout: float = 120) -> dict:
        event = json.loads(self.ws.recv(timeout))
        SERVER_EVENT.validate_python(event)  # strict: the SDK's own parsing is lenient
        self.events.append(event)
        return event

    def until(self, *kinds: str, timeout: float = 180) -> list[dict]:
        """Events up to and including the first of one of `kinds`."""
        seen = []
        while True:
            event = self.recv(timeout)
            seen.append(event)
            if event["type"] in kinds:
                return seen

    def say(self, text: str) -> None:
        self.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}})

    def ask(self, text: str, max_tokens: int = 24, **response) -> list[dict]:
        """Send a question and ask for a text reply; returns the events through response.done."""
        self.say(text)
        self.send({"type": "response.create",
                   "response": {"output_modalities": ["text"], "max_output_tokens": max_tokens, **response}})
        return self.until("response.done")

    def append_audio(self, pcm: bytes, chunk: int = 9_600) -> None:
        """PCM16 24 kHz audio as input_audio_buffer.append events of 200 ms each."""
        for start in range(0, len(pcm), chunk):
            self.send({"type": "input_audio_buffer.append",
                       "audio": base64.b64encode(pcm[start:start + chunk]).decode()})

    def speak(self, pcm: bytes, max_tokens: int = 40) -> list[dict]:
        """A push-to-talk turn: the audio, commit, a spoken response; the events through response.done."""
        self.append_audio(pcm)
        self.send({"type": "input_audio_buffer.commit"})
        self.send({"type": "response.create",
                   "response": {"output_modalities": ["audio"], "max_output_tokens": max_tokens}})
        return self.until("response.done")

    def close(self) -> None:
        self.ws.close()


def reply_text(events: list[dict]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


def done(events: list[dict]) -> dict:
    return next(e for e in events if e["type"] == "response.done")["response"]
