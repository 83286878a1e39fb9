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

import pydantic
from openai.types import chat as chat_types
from openai.types.chat import completion_create_params

from voice.chat.turn import BadRequest, ChatRequest, validated
from voice.turns.events import Calls, Delta
from voice.turns.figures import TurnFigures
from voice.validation import parameters_problem


class _Body(completion_create_params.CompletionCreateParamsBase, total=False):
    stream: bool | None  # the package types it apart, in its streaming and non-streaming bodies


_BODY = pydantic.TypeAdapter(_Body)
# Each message is typed by its role, so an error names what is wrong with that role's message
# rather than with whichever member of the package's union got furthest.
_MESSAGES = {role: pydantic.TypeAdapter(kind) for role, kind in (
    ("system", chat_types.ChatCompletionSystemMessageParam),
    ("developer", chat_types.ChatCompletionDeveloperMessageParam),
    ("user", chat_types.ChatCompletionUserMessageParam),
    ("assistant", chat_types.ChatCompletionAssistantMessageParam),
    ("tool", chat_types.ChatCompletionToolMessageParam))}
ROLES = tuple(_MESSAGES)


def chat_request(body: object) -> ChatRequest:
    """A `/v1/chat/completions` body, typed with the `openai` package's own request types."""
    if isinstance(body, dict) and not (isinstance(body.get("messages"), list) and body["messages"]):
        raise BadRequest("messages: must be a non-empty list", "messages")
    params = validated(_BODY, {**body, "messages": []} if isinstance(body, dict) else body)
    assert isinstance(body, dict)  # _BODY refused anything else
    messages = [_message(n, raw) for n, raw in enumerate(body["messages"])]
    tools = params.get("tools") or []
    if not isinstance(body.get("tools") or [], list) or any(t.get("type") != "function" for t in tools):
        raise BadRequest('tools: must be a list of {"type": "function", "function": {"name": ...}}', "tools")
    for n, tool in enumerate(tools):
        if problem := parameters_problem(tool["function"].get("parameters")):
            raise BadRequest(f"tools.{n}.function.{problem}", f"tools.{n}.function.{problem.split(':')[0]}")
    limit_field = "max_completion_tokens" if "max_completion_tokens" in params else "max_tokens"
    limit = params.get(limit_field)
    if limit is not None and limit < 1:
        raise BadRequest(f"{limit_field}: must be a positive integer", limit_field)
    user = params.get("user")
    return ChatRequest(params["model"], messages, [{"type": "function", "function": body["tools"][n]["function"]}
                                                  for n in range(len(tools))],
                       _tool_choice(params.get("tool_choice")), bool(params.get("stream")), limit,
                       params.get("temperature"), device=f"openai-user:{user}" if user else None,
                       include_usage=bool((params.get("stream_options") or {}).get("include_usage")))


def _tool_choice(choice: str | dict | None) -> str | dict | None:
    if choice is None or isinstance(choice, str):
        return choice
    if choice.get("type") == "function":  # {"type": "function", "function": {"name": ...}}: the engine's shape
        return {"type": "function", "name": choice["function"]["name"]}
    raise BadRequest("tool_choice: must be auto, none, required or a function", "tool_choice")


def _message(n: int, raw: object) -> dict:
    role = raw.get("role") if isinstance(raw, dict) else None
    if not isinstance(role, str) or role not in _MESSAGES:
        raise BadRequest(f"messages.{n}.role: must be one of {', '.join(ROLES)}", f"messages.{n}.role")
    given = validated(_MESSAGES[role], raw, f"messages.{n}")
    role = "system" if role == "developer" else role
    message: dict = {"role": role, "content": _text(n, given.get("content"))}
    if role == "assistant" and given.get("tool_calls"):
        if any(call["type"] != "function" for call in given["tool_calls"]):
            raise BadRequest(f"messages.{n}.tool_calls: only function calls are supported", f"messages.{n}.tool_calls")
        message["tool_calls"] = [{"id": call["id"], "type": "function",
                                  "function": {"name": call["function"]["name"],
                                               "arguments": call["function"]["arguments"] or "{}"}}
                                 for call in given["tool_calls"]]
    if role == "tool":
        message["tool_call_id"] = given["tool_call_id"]
    return message


def _text(n: int, content: str | list[dict] | None) -> str:
    """A message's content: text, or text parts."""
    if content is None or isinstance(content, str):
        return content or ""
    if any(part.get("type") != "text" for part in content):
        raise BadRequest(f"messages.{n}.content: only text is supported: the model reads text",
                         f"messages.{n}.content")
    return "".join(part["text"] for part in content)


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


def error(message: str, kind: str = "invalid_request_error", code: str | None = None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def event(data: dict | str) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n".encode()
