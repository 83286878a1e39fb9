"""Ollama's API shapes (`/api/chat`, `/api/tags`, `/api/show`, ...), as the `ollama` package's
client (Home Assistant's Ollama integration uses it) sends and reads them.

Differences from OpenAI's that matter here: a call's arguments are an object, a tool result names
no call (results answer the calls in order), the stream is NDJSON ending in a line with
`done: true` and the counts, and an error is `{"error": "..."}`, as a line once a stream has begun.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import ollama as ollama_types
import pydantic

from voice.chat.turn import BadRequest, ChatRequest, validated
from voice.turns.events import Calls, Delta
from voice.turns.figures import TurnFigures

ROLES = ("system", "user", "assistant", "tool")


def now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class ChatBody(pydantic.BaseModel):
    """A `/api/chat` body, typed with the `ollama` package's own `Message`, `Tool` and `Options`:
    its `ChatRequest` takes any mapping for a message or the options, and so checks neither."""

    model: str = pydantic.Field(min_length=1)
    messages: list[ollama_types.Message] | None = None
    tools: list[ollama_types.Tool] | None = None
    options: ollama_types.Options | None = None
    stream: bool | None = None
    keep_alive: float | str | None = None  # the model is always loaded
    think: bool | str | None = None  # the models here do not think aloud
    format: str | dict | None = None  # replies are not constrained to a format


def chat_request(body: object) -> ChatRequest:
    """A `/api/chat` body. `options.num_ctx` below the service's context is the context the prompt
    and reply are fitted into."""
    if isinstance(body, dict) and isinstance(body.get("messages"), list):
        for n, raw in enumerate(body["messages"]):
            if isinstance(raw, dict) and raw.get("images"):
                raise BadRequest(f"messages.{n}.images: images are not supported: the model reads text",
                                 f"messages.{n}.images")
    chat = validated(ChatBody, body)
    assert isinstance(body, dict)  # ChatBody refused anything else
    options = chat.options or ollama_types.Options()
    if options.num_ctx is not None and options.num_ctx < 1:
        raise BadRequest("options.num_ctx: must be a positive integer", "options.num_ctx")
    tools = [_tool(n, tool, body["tools"][n]) for n, tool in enumerate(chat.tools or [])]
    parsed = [_message(n, message, body["messages"][n]) for n, message in enumerate(chat.messages or [])]
    # Ollama's API is Home Assistant's door: its earlier commands leave the prompt (voice.turns.engine).
    # Home Assistant's prompt names the device's area, its exposed entities and its instructions:
    # the same prompt is the same device, whose memory outlasts the conversation (voice.chat.thread).
    system = parsed[0]["content"] if parsed and parsed[0]["role"] == "system" else ""
    predict = options.num_predict
    return ChatRequest(chat.model, parsed, tools, "auto" if tools else None, chat.stream is not False,
                       predict if predict is not None and predict > 0 else None, options.temperature,
                       device=_device(system) if system else None, earlier_calls=False, context=options.num_ctx)


def _tool(n: int, tool: ollama_types.Tool, raw: dict) -> dict:
    """The tool as the client wrote it (its schema whole), once its shape is known to be right."""
    if tool.type not in (None, "function") or tool.function is None or not tool.function.name:
        raise BadRequest(f'tools.{n}: a tool must be {{"type": "function", "function": {{"name": ...}}}}', f"tools.{n}")
    return {"type": "function", "function": raw["function"]}


def _message(n: int, message: ollama_types.Message, raw: dict) -> dict:
    if message.role not in ROLES:
        raise BadRequest(f"messages.{n}.role: must be one of {', '.join(ROLES)}", f"messages.{n}.role")
    parsed: dict = {"role": message.role, "content": message.content or ""}
    if message.role == "assistant" and message.tool_calls:
        parsed["tool_calls"] = [
            {"id": _text(raw["tool_calls"][i].get("id")), "type": "function",
             "function": {"name": call.function.name,
                          "arguments": json.dumps(dict(call.function.arguments), ensure_ascii=False)}}
            for i, call in enumerate(message.tool_calls)]
    if message.role == "tool" and _text(raw.get("tool_call_id")):
        parsed["tool_call_id"] = raw["tool_call_id"]
    return parsed


def _text(value: object) -> str:
    """An id a client may give (Ollama's API has none): text, or nothing."""
    return value if isinstance(value, str) else ""


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
