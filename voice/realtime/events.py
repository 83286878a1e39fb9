"""Server events of the Realtime protocol (GA shapes, as in the `openai` package's
`openai.types.realtime`), built as plain dicts and validated by the package's model of their type
as they are built, so every event sent has the protocol's shape.
"""

from __future__ import annotations

import json
import typing

from openai.types.realtime import realtime_server_event

from models.audio import RATE
from voice.store.sessions import StoredMessage, new_id

PCM = {"type": "audio/pcm", "rate": RATE}


_UNION = typing.get_args(typing.get_args(realtime_server_event.RealtimeServerEvent)[0])
EVENT_TYPES = {typing.get_args(model.model_fields["type"].annotation)[0]: model for model in _UNION}


def event(kind: str, **fields) -> dict:
    """A server event, validated by the `openai` package's model of its type as it is built: one
    that does not match the protocol is a bug, raised here rather than sent to a client."""
    payload = {"type": kind, "event_id": new_id("event"), **fields}
    EVENT_TYPES[kind].model_validate(payload)
    return payload


def error(message: str, code: str = "invalid_request", kind: str = "invalid_request_error",
          event_id: str | None = None, param: str | None = None) -> dict:
    body = {"type": kind, "code": code, "message": message}
    if event_id:
        body["event_id"] = event_id
    if param:
        body["param"] = param
    return event("error", error=body)


def session(session_id: str, instructions: str, modalities: list[str], speed: float, voice: str,
            turn_detection: dict | None = None) -> dict:
    """The session object of session.created and session.updated; `id` is the stored session's id."""
    return {
        "type": "realtime",
        "object": "realtime.session",
        "id": session_id,
        "model": "parlour",
        "instructions": instructions,
        "output_modalities": modalities,
        "audio": {
            "input": {"format": PCM, "turn_detection": turn_detection, "transcription": {"model": "whisper-1"}},
            "output": {"format": PCM, "voice": voice, "speed": speed},
        },
    }


def item(stored: StoredMessage, audio: bool = False) -> dict:
    """A stored message as a Realtime conversation item."""
    message = stored.message
    role = message["role"]
    status = {"complete": "completed", "in_progress": "in_progress"}.get(stored.status, "incomplete")
    if role == "tool":
        return {"id": stored.item_id, "object": "realtime.item", "type": "function_call_output",
                "call_id": message.get("tool_call_id") or "", "output": message.get("content") or "",
                "status": "completed"}
    if message.get("tool_calls"):
        call = message["tool_calls"][0]
        if call.get("approval") == "requested":  # an MCP call that waits for the user's approval
            return mcp_approval_request_item(stored.item_id, call)
        if "server_label" in call:  # Parlour ran it on an MCP server; its result is the next item
            return mcp_call_item(stored.item_id, call, None, None)
        return {"id": stored.item_id, "object": "realtime.item", "type": "function_call",
                "call_id": call["id"], "name": call["function"]["name"],
                "arguments": call["function"]["arguments"], "status": "completed"}
    text = message.get("content") or ""
    if role in ("user", "system"):
        part = {"type": "input_audio", "transcript": text} if audio else {"type": "input_text", "text": text}
    else:
        part = {"type": "output_audio", "transcript": text} if audio else {"type": "output_text", "text": text}
    return {"id": stored.item_id, "object": "realtime.item", "type": "message", "role": role,
            "status": status, "content": [part]}


def items(stored: StoredMessage) -> list[dict]:
    """A stored message as items: an assistant message with parallel calls is one item per call."""
    calls = stored.message.get("tool_calls") or []
    if len(calls) <= 1:
        return [item(stored)]
    return [
        {**item(StoredMessage(stored.position, stored.item_id, {**stored.message, "tool_calls": [c]},
                              stored.status, stored.created)), "id": f"{stored.item_id}_{n}"}
        for n, c in enumerate(calls)
    ]


def mcp_call_item(item_id: str, call: dict, output: str | None, error: dict | None,
                  approval_request_id: str | None = None) -> dict:
    """A call Parlour ran on an MCP server (a stored call carries its `server_label`)."""
    return {"id": item_id, "object": "realtime.item", "type": "mcp_call", "server_label": call["server_label"],
            "name": call["function"]["name"], "arguments": call["function"]["arguments"],
            "approval_request_id": approval_request_id, "output": output, "error": error}


def mcp_approval_request_item(item_id: str, call: dict) -> dict:
    """A call to an MCP server's tool that waits for the user's approval."""
    return {"id": item_id, "type": "mcp_approval_request", "server_label": call["server_label"],
            "name": call["function"]["name"], "arguments": call["function"]["arguments"]}


def mcp_approval_response_item(item_id: str, approval_request_id: str, approve: bool, reason: str | None) -> dict:
    return {"id": item_id, "type": "mcp_approval_response", "approval_request_id": approval_request_id,
            "approve": approve, "reason": reason}


def mcp_list_tools_item(item_id: str, server_label: str, tools: list[dict]) -> dict:
    """The tools of a session's MCP server, as listed (`tools` as `McpTool.listed` gives them)."""
    return {"id": item_id, "type": "mcp_list_tools", "server_label": server_label, "tools": tools}


def assistant_item(item_id: str, text: str, status: str, audio: bool) -> dict:
    part = {"type": "output_audio", "transcript": text} if audio else {"type": "output_text", "text": text}
    return {"id": item_id, "object": "realtime.item", "type": "message", "role": "assistant",
            "status": status, "content": [part] if text or status != "in_progress" else []}


def response(response_id: str, session_id: str, status: str, modalities: list[str], output: list[dict],
             figures: dict | None = None, reason: str | None = None, failure: dict | None = None,
             metadata: dict | None = None) -> dict:
    """A response object; `failure` ({"type", "code", "message"}) says why a `failed` one failed, and
    `metadata` (the client's, from response.create) is echoed, beside the turn's figures."""
    body: dict = {"id": response_id, "object": "realtime.response", "conversation_id": session_id,
                  "status": status, "output_modalities": modalities, "output": output}
    if reason or failure:
        body["status_details"] = {"type": status, **({"reason": reason} if reason else {}),
                                  **({"error": failure} if failure else {})}
    if figures is not None:
        prompt, cached = figures.get("prompt_tokens", 0), figures.get("cached_tokens", 0)
        completion = figures.get("completion_tokens", 0)
        body["usage"] = {
            "input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion,
            "input_token_details": {"cached_tokens": cached, "text_tokens": prompt},
            "output_token_details": {"text_tokens": completion, "audio_tokens": 0},
        }
    body["metadata"] = response_metadata(metadata, figures)
    return body


# The protocol allows 16 metadata keys. The client's own come first (LiveKit matches responses by
# them); the turn's figures fill the rest in this order. Token counts and the status are already in
# `usage` and `status`; every figure is in GET /v1/figures and the store.
METADATA_LIMIT = 16
METADATA_FIGURES = ("first_audio_ms", "ttft_ms", "stt_ms", "stt_draft", "queue_ms", "research_ms", "fit_ms", "total_ms",
                    "evaluated_tokens", "prompt_tokens_fitted", "removed", "dropped", "summary", "summarized_ms",
                    "fit_steps", "tool_calls")


def response_metadata(client: dict | None, figures: dict | None) -> dict | None:
    metadata = dict(client or {})
    for name in METADATA_FIGURES:
        if len(metadata) >= METADATA_LIMIT:
            break
        if figures and name in figures and name not in metadata:
            value = figures[name]  # values are strings in the protocol; flags and numbers as JSON
            metadata[name] = value if isinstance(value, str) else json.dumps(value)
    return metadata or None
