"""OpenAI's chat completions shapes (`/v1/chat/completions`, `/v1/models`), for Home Assistant's
LiteLLM integration, Open WebUI, editors and scripts.

A streamed reply is server-sent events of `chat.completion.chunk`s ending in `data: [DONE]`; with
`stream_options.include_usage` a last chunk with no choices carries the usage. Errors are
`{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

import json
import time
import uuid

from voice.chat.turn import BadRequest, ChatRequest
from voice.turns.figures import TurnFigures
from voice.turns.events import Calls, Delta

ROLES = ("system", "developer", "user", "assistant", "tool")


def _text(content: object) -> str:
    """A message's content: text, or a list of text parts."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        if any(p.get("type") != "text" for p in content):
            raise BadRequest("only text content is supported: the model reads text")
        return "".join(str(p.get("text") or "") for p in content)
    raise BadRequest("a message's content must be text or a list of text parts")


def _message(raw: object) -> dict:
    if not isinstance(raw, dict) or raw.get("role") not in ROLES:
        raise BadRequest(f"a message must be an object with a role of {', '.join(ROLES)}: {str(raw)[:80]}")
    role = "system" if raw["role"] == "developer" else raw["role"]
    message: dict = {"role": role, "content": _text(raw.get("content"))}
    if role == "assistant" and raw.get("tool_calls"):
        calls = []
        for call in raw["tool_calls"]:
            function = (call or {}).get("function") or {}
            if not isinstance(function.get("name"), str) or not isinstance(function.get("arguments", ""), str):
                raise BadRequest("a tool call needs a function name and its arguments as JSON text")
            calls.append({"id": call.get("id") or "", "type": "function",
                          "function": {"name": function["name"], "arguments": function.get("arguments") or "{}"}})
        message["tool_calls"] = calls
    if role == "tool":
        message["tool_call_id"] = raw.get("tool_call_id") or ""
    return message


def chat_request(body: object) -> ChatRequest:
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        raise BadRequest("the request needs a model")
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        raise BadRequest("messages must be a non-empty list")
    tools = body.get("tools") or []
    if not isinstance(tools, list) or any(not isinstance(t, dict) or t.get("type") != "function"
                                          or not isinstance((t.get("function") or {}).get("name"), str) for t in tools):
        raise BadRequest("tools must be a list of {\"type\": \"function\", \"function\": {\"name\": ...}}")
    choice = body.get("tool_choice")
    if isinstance(choice, dict):  # {"type": "function", "function": {"name": ...}}: the engine's shape
        choice = {"type": "function", "name": (choice.get("function") or {}).get("name")}
    elif choice not in (None, "auto", "none", "required"):
        raise BadRequest("tool_choice must be auto, none, required or a function")
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise BadRequest("max_tokens must be a positive integer")
    temperature = body.get("temperature")
    if temperature is not None and not isinstance(temperature, (int, float)):
        raise BadRequest("temperature must be a number")
    user = body.get("user")
    return ChatRequest(body["model"], [_message(m) for m in body["messages"]],
                       [{"type": "function", "function": t["function"]} for t in tools], choice,
                       bool(body.get("stream")), limit, float(temperature) if temperature is not None else None,
                       device=f"openai-user:{user}" if isinstance(user, str) and user else None,
                       include_usage=bool((body.get("stream_options") or {}).get("include_usage")))


class Completion:
    """The reply's shapes, chunk by chunk or whole."""

    def __init__(self, model: str):
        self.id, self.model, self.created = f"chatcmpl-{uuid.uuid4().hex[:24]}", model, int(time.time())
        self.calls = 0

    def _chunk(self, delta: dict, finish: str | None = None) -> dict:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    def opening(self) -> dict:
        return self._chunk({"role": "assistant", "content": ""})

    def piece(self, event: Delta | Calls) -> dict:
        if isinstance(event, Delta):
            return self._chunk({"content": event.text})
        calls = [{"index": self.calls + i, "id": c["id"], "type": "function", "function": c["function"]}
                 for i, c in enumerate(event.calls)]
        self.calls += len(calls)
        return self._chunk({"tool_calls": calls})

    def closing(self, figures: TurnFigures) -> dict:
        return self._chunk({}, _finish(figures, self.calls))

    def usage_chunk(self, figures: TurnFigures) -> dict:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [], "usage": usage(figures)}

    def whole(self, text: str, calls: list[dict], figures: TurnFigures) -> dict:
        message: dict = {"role": "assistant", "content": text if text or not calls else None}
        if calls:
            message["tool_calls"] = calls
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": message, "finish_reason": _finish(figures, len(calls))}],
                "usage": usage(figures)}


def _finish(figures: TurnFigures, calls: int) -> str:
    return "tool_calls" if calls else "length" if figures.finish_reason == "length" else "stop"


def usage(figures: TurnFigures) -> dict:
    prompt, completion = figures.prompt_tokens or 0, figures.completion_tokens or 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": figures.cached_tokens or 0}}


def error(message: str, kind: str = "invalid_request_error", code: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def event(data: dict | str) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n".encode()
