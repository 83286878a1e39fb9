"""Ollama's API shapes (`/api/chat`, `/api/tags`, `/api/show`, ...), as the `ollama` package's
client (Home Assistant's Ollama integration uses it) sends and reads them.

Differences from OpenAI's that matter here: a call's arguments are an object, a tool result names
no call (results answer the calls in order), the stream is NDJSON ending in a line with
`done: true` and the counts, and an error is `{"error": "..."}`, as a line once a stream has begun.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

from voice.chat.turn import BadRequest, ChatRequest
from voice.turns.figures import TurnFigures
from voice.turns.events import Calls, Delta

ROLES = ("system", "user", "assistant", "tool")


def now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _message(raw: object) -> dict:
    if not isinstance(raw, dict) or raw.get("role") not in ROLES:
        raise BadRequest(f"a message must be an object with a role of {', '.join(ROLES)}: {str(raw)[:80]}")
    if raw.get("images"):
        raise BadRequest("images are not supported: the model reads text")
    content = raw.get("content")
    if content is not None and not isinstance(content, str):
        raise BadRequest("a message's content must be text")
    message: dict = {"role": raw["role"], "content": content or ""}
    if raw["role"] == "assistant" and raw.get("tool_calls"):
        calls = []
        for call in raw["tool_calls"]:
            function = (call or {}).get("function") or {}
            if not isinstance(function.get("name"), str) or not isinstance(function.get("arguments", {}), dict):
                raise BadRequest("a tool call needs a function name and arguments as an object")
            calls.append({"id": call.get("id") or "", "type": "function",
                          "function": {"name": function["name"],
                                       "arguments": json.dumps(function.get("arguments") or {}, ensure_ascii=False)}})
        message["tool_calls"] = calls
    if raw["role"] == "tool" and raw.get("tool_call_id"):
        message["tool_call_id"] = raw["tool_call_id"]
    return message


def chat_request(body: object) -> ChatRequest:
    """A `/api/chat` body. `options.num_ctx` below the service's context is the context the prompt
    and reply are fitted into; `keep_alive`, `think` and `format` are accepted (the model is
    always loaded, and replies are not constrained to a format)."""
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        raise BadRequest("the request needs a model")
    messages = body.get("messages") or []
    if not isinstance(messages, list):
        raise BadRequest("messages must be a list")
    options = body.get("options") or {}
    tools = body.get("tools") or []
    if not isinstance(options, dict) or not isinstance(tools, list):
        raise BadRequest("options must be an object and tools a list")
    for tool in tools:
        if not isinstance(tool, dict) or not isinstance((tool.get("function") or {}).get("name"), str):
            raise BadRequest("a tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}")
    predict, window = options.get("num_predict"), options.get("num_ctx")
    if window is not None and (not isinstance(window, int) or window < 1):
        raise BadRequest("options.num_ctx must be a positive integer")
    temperature = options.get("temperature")
    if temperature is not None and not isinstance(temperature, (int, float)):
        raise BadRequest("options.temperature must be a number")
    parsed = [_message(m) for m in messages]
    # Ollama's API is Home Assistant's door: its earlier commands leave the prompt (voice.turns.engine).
    # Home Assistant's prompt names the device's area, its exposed entities and its instructions:
    # the same prompt is the same device, whose memory outlasts the conversation (voice.chat.thread).
    system = parsed[0]["content"] if parsed and parsed[0]["role"] == "system" else ""
    return ChatRequest(body["model"], parsed, [{"type": "function", "function": t["function"]} for t in tools],
                       "auto" if tools else None, body.get("stream", True) is not False,
                       predict if isinstance(predict, int) and predict > 0 else None,
                       float(temperature) if temperature is not None else None,
                       device=_device(system) if system else None, earlier_calls=False, context=window)


def _device(system: str) -> str:
    """The system prompt without its digits: Home Assistant's holds the time and date."""
    return "ollama:" + "".join("#" if c.isdigit() else c for c in system)


def _calls(calls: list[dict]) -> list[dict]:
    return [{"id": c["id"], "function": {"name": c["function"]["name"],
                                         "arguments": json.loads(c["function"]["arguments"])}}
            for c in calls]


def piece(model: str, event: Delta | Calls) -> dict:
    """A stream line for reply text or the client's calls."""
    message: dict = {"role": "assistant", "content": event.text if isinstance(event, Delta) else ""}
    if isinstance(event, Calls):
        message["tool_calls"] = _calls(event.calls)
    return {"model": model, "created_at": now(), "message": message, "done": False}


def final(model: str, figures: TurnFigures, started: float, text: str = "", calls: list[dict] | None = None) -> dict:
    """The last line (or the whole reply, not streamed): `done`, why, and the counts. Ollama's
    `prompt_eval_count` is the prompt tokens it evaluated, so a reused prefix does not count."""
    message: dict = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = _calls(calls)
    total_ns = int((time.perf_counter() - started) * 1e9)
    first_ns = int((figures.ttft_ms or 0) * 1e6)
    return {"model": model, "created_at": now(), "message": message, "done": True,
            "done_reason": "length" if figures.finish_reason == "length" else "stop",
            "total_duration": total_ns, "load_duration": 0,
            "prompt_eval_count": figures.evaluated_tokens or 0, "prompt_eval_duration": first_ns,
            "eval_count": figures.completion_tokens or 0, "eval_duration": max(total_ns - first_ns, 0)}


def error(message: str) -> dict:
    return {"error": message}


def line(data: dict) -> bytes:
    return json.dumps(data, ensure_ascii=False).encode() + b"\n"
