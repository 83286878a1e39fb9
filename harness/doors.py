"""Valid requests and events for every door but the Realtime socket, and seeded mutations of them
on the wire: shared by tests/test_doors.py and scripts/fuzz_doors.py.

The Ollama bodies are what Home Assistant 2026.11's Ollama integration sent, set up through its UI
(`num_ctx` and `keep_alive` as floats, its tools named with a domain prefix, a call's result with
no call id), recorded from the real HA.
"""

from __future__ import annotations

import http.client
import json
import random
from pathlib import Path

from harness import home_assistant as ha
from harness.fuzz import sample

RECORDED = Path(__file__).parent / "recorded"
# What Home Assistant 2026.11 sent, recorded from it (harness/home_assistant_core.py's RecordingProxy):
# a command, and the request after it ran the call.
HOME_ASSISTANT_CHAT = json.loads((RECORDED / "home_assistant_2026_11_chat.json").read_text())
HOME_ASSISTANT_AFTER_CALL = json.loads((RECORDED / "home_assistant_2026_11_chat_after_call.json").read_text())
# Its shape with a prompt of a few tokens, for the live fuzz: each mutation that is still valid runs
# the model, and a changed prompt is evaluated whole.
SHORT_HOME_ASSISTANT_CHAT = {**HOME_ASSISTANT_CHAT, "tools": HOME_ASSISTANT_CHAT["tools"][4:6], "messages": [
    {"role": "system", "content": "You control a home."}, {"role": "user", "content": "Porch light on."}]}
SHORT_HOME_ASSISTANT_AFTER_CALL = {**HOME_ASSISTANT_AFTER_CALL, "tools": HOME_ASSISTANT_CHAT["tools"][4:6],
                                   "messages": [SHORT_HOME_ASSISTANT_CHAT["messages"][0],
                                                *HOME_ASSISTANT_AFTER_CALL["messages"][1:]]}
OLLAMA_BODIES = [
    HOME_ASSISTANT_CHAT,
    HOME_ASSISTANT_AFTER_CALL,
    {"model": "parlour:latest", "stream": False, "options": {"num_predict": 2, "temperature": 0.0},
     "messages": [{"role": "user", "content": "Lamp on."},
                  {"role": "assistant", "content": "", "tool_calls": [
                      {"function": {"name": "HassTurnOn", "arguments": {"name": "Lamp"}}}]},
                  {"role": "tool", "content": ha.tool_result("HassTurnOn", {"name": "Lamp"})}]},
]
OPENAI_CHAT = {"model": "parlour", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 2}
OPENAI_BODIES = [
    OPENAI_CHAT,
    {"model": "parlour", "stream": True, "stream_options": {"include_usage": True}, "temperature": 0.0,
     "max_completion_tokens": 2, "user": "fuzz", "tool_choice": {"type": "function", "function": {"name": "get_time"}},
     "tools": [{"type": "function", "function": {"name": "get_time", "description": "The time.",
                                                  "parameters": {"type": "object", "properties": {}}}}],
     "messages": [{"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
                  {"role": "user", "content": "Time?"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
                  {"role": "tool", "tool_call_id": "c1", "content": "noon"}]},
]
SHOW_BODY = {"model": "parlour:latest"}
NOT_OBJECTS = [b"", b"null", b"[]", b"5", b'"x"', b"{", b"\xff\xfe", b"[" * 100_000, b'{"model": "\\ud800"}']

WYOMING_EVENTS = [
    {"type": "describe"},
    {"type": "transcribe", "data": {"language": "en", "name": "whisper"}},
    {"type": "audio-start", "data": {"rate": 16000, "width": 2, "channels": 1, "timestamp": 0}},
    {"type": "audio-chunk", "data": {"rate": 16000, "width": 2, "channels": 1, "timestamp": 0}, "payload": b"\0" * 640},
    {"type": "audio-stop", "data": {"timestamp": 20}},
    {"type": "synthesize", "data": {"text": "Hi.", "voice": {"name": "joe"}}},
    {"type": "synthesize-start", "data": {"voice": {"name": "joe"}}},
    {"type": "synthesize-chunk", "data": {"text": "Hi "}},
    {"type": "synthesize-stop"},
    {"type": "transcript", "data": {"text": "Say hi.", "context": {"conversation_id": "fuzz"}}},
    {"type": "no-such-event", "data": {"x": 1}},
]
NOT_EVENTS = [b"not json\n", b"[1, 2]\n", b"5\n", b'{"data": {}}\n', b'{"type": 7}\n',
              b'{"type": "describe", "data": []}\n']


def chat_requests(count: int, seed: int) -> list[tuple[str, bytes]]:
    """`count` (path, body) pairs: mutated chat and show bodies, and some that are not objects."""
    rng = random.Random(seed)
    # Home Assistant's shapes with short prompts, and the mutations of each body one after another:
    # a valid one runs the model, and a prompt like the one before is mostly in its cache.
    valid = [("/api/chat", SHORT_HOME_ASSISTANT_CHAT), ("/api/chat", SHORT_HOME_ASSISTANT_AFTER_CALL),
             ("/api/chat", OLLAMA_BODIES[2]), ("/v1/chat/completions", OPENAI_BODIES[0]),
             ("/v1/chat/completions", OPENAI_BODIES[1]), ("/api/show", SHOW_BODY)]
    share = count * 9 // 10 // len(valid)
    wire = [(path, json.dumps(body).encode()) for n, (path, value) in enumerate(valid)
            for body in sample([value], share, seed + n, keep=())]
    while len(wire) < count:
        wire.insert(rng.randrange(len(wire) + 1),
                    (rng.choice(["/api/chat", "/v1/chat/completions", "/api/show"]), rng.choice(NOT_OBJECTS)))
    return wire


def frame(event: dict, payload: bytes | None = None) -> bytes:
    """An event on the wire as the `wyoming` package writes it, whatever its fields hold."""
    header = {key: value for key, value in event.items() if key != "payload"}
    data = json.dumps(header.pop("data", {}) or {}).encode()
    header |= {"version": "1.10.2", "data_length": len(data)}
    payload = payload if payload is not None else event.get("payload")
    if isinstance(payload, bytes) and payload:
        header["payload_length"] = len(payload)
    else:
        payload = b""
    return json.dumps(header).encode() + b"\n" + data + payload


def wyoming_lines(count: int, seed: int) -> list[bytes]:
    """`count` events on the wire: mutated types and data, and lines that are not events. Lengths
    stay right, so the stream can be followed; a header whose lengths are wrong closes it."""
    rng = random.Random(seed)
    events = [{**e, "payload": e.get("payload")} for e in sample(WYOMING_EVENTS, count, seed)]
    lines = [frame({k: v for k, v in e.items() if k != "payload"}, e["payload"]) for e in events]
    for _ in range(count // 10):
        lines.insert(rng.randrange(len(lines)), rng.choice(NOT_EVENTS))
    return lines[:count]


def post(port: int, path: str, body: bytes, timeout: float = 300) -> tuple[int, bytes]:
    """One request on a connection of its own: the status and the body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()
