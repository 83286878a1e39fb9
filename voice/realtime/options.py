"""What a client may ask for, checked: modalities, function tools, tool choice, turn detection,
conversation items and response options. Each function takes the typed value from
`voice.realtime.client_events` and returns the service's own form of it, or raises `BadEvent`
naming the field. Nothing here does I/O.
"""

from __future__ import annotations

import json

from voice.realtime.client_events import BadEvent
from voice.realtime.turn_detection import VadSettings
from voice.validation import parameters_problem

MODALITIES = ({"text"}, {"audio"})
# No model judges whether a sentence is finished here: semantic_vad's eagerness becomes a silence
# length (the Agents SDK asks for semantic_vad by default).
SEMANTIC_SILENCE_MS = {"low": 1_000, "medium": 600, "auto": 600, "high": 300}


def modalities(value: list[str], param: str) -> list[str]:
    if set(value) not in MODALITIES:
        raise BadEvent(f"{param} must be [\"text\"] or [\"audio\"]", "invalid_value", param)
    return list(value)


def speed(value: float) -> float:
    if not 0.25 <= value <= 4.0:
        raise BadEvent("session.audio.output.speed must be a number from 0.25 to 4", "invalid_value",
                       "session.audio.output.speed")
    return float(value)


def function_tools(tools: list, param: str) -> list[dict]:
    """Realtime function tools as OpenAI chat tool specs; other kinds (MCP) are not served."""
    specs = []
    for n, tool in enumerate(tools):
        if getattr(tool, "type", None) not in (None, "function") or not getattr(tool, "name", None):
            raise BadEvent(f"{param}[{n}]: only function tools with a name are supported", "invalid_value",
                           f"{param}.{n}")
        if problem := parameters_problem(tool.parameters):
            raise BadEvent(f"{param}[{n}].{problem}", "invalid_value", f"{param}.{n}.{problem.split(':')[0]}")
        parameters = tool.parameters if isinstance(tool.parameters, dict) else {"type": "object", "properties": {}}
        specs.append({"type": "function", "function": {"name": tool.name, "description": tool.description or "",
                                                       "parameters": parameters}})
    return specs


def tool_choice(choice, param: str) -> str | dict:
    if isinstance(choice, str):
        return choice
    if getattr(choice, "type", None) == "function" and getattr(choice, "name", None):
        return {"type": "function", "name": choice.name}
    raise BadEvent(f"{param} must be auto, none, required or a function", "invalid_value", param)


def turn_detection(value) -> VadSettings | None:
    """`audio.input.turn_detection`: None is push-to-talk; server_vad and semantic_vad are hands-free."""
    if value is None:
        return None
    given = {name: getattr(value, name, None) for name in (
        "threshold", "prefix_padding_ms", "silence_duration_ms", "create_response", "interrupt_response")}
    if value.type == "semantic_vad":
        given["silence_duration_ms"] = SEMANTIC_SILENCE_MS[value.eagerness or "auto"]
    settings = VadSettings(**{name: v for name, v in given.items() if v is not None})
    if not 0 < settings.threshold < 1 or settings.prefix_padding_ms < 0 or settings.silence_duration_ms < 32:
        raise BadEvent("turn_detection: threshold must be between 0 and 1, prefix_padding_ms at least 0 and "
                       "silence_duration_ms at least 32", "invalid_value", "session.audio.input.turn_detection")
    return settings


def max_output_tokens(value) -> int | None:
    if value is None or value == "inf":
        return None
    if value < 1:
        raise BadEvent("response.max_output_tokens must be a positive whole number or \"inf\"", "invalid_value",
                       "response.max_output_tokens")
    return value


def chat_message(item, max_chars: int) -> dict:
    """A Realtime conversation item (typed) as the OpenAI chat message the store keeps."""
    kind = item.type
    if kind == "function_call_output":
        message = {"role": "tool", "tool_call_id": item.call_id, "content": item.output}
    elif kind == "function_call":
        if not item.name:
            raise BadEvent("a function_call item needs a name", "missing_field", "item.name")
        message = {"role": "assistant", "content": None, "tool_calls": [
            {"id": item.call_id or f"call_{item.id or 'client'}", "type": "function",
             "function": {"name": item.name, "arguments": item.arguments or "{}"}}]}
    elif kind == "message":
        message = {"role": item.role, "content": "\n".join(_texts(item.content))}
    else:
        raise BadEvent(f"items of type '{kind}' are not supported", "invalid_value", "item.type")
    text = message.get("content") or ""
    if message["role"] == "user" and not text.strip():
        raise BadEvent("the message is empty", "invalid_value", "item.content")
    if len(text) > max_chars or len(json.dumps(message)) > max_chars * 2:
        raise BadEvent(f"the item has {len(text)} characters; the limit is {max_chars}", "text_too_long",
                       "item.content")
    return message


def _texts(content: list) -> list[str]:
    texts = []
    for part in content:
        text = getattr(part, "text", None) if part.type in ("input_text", "output_text", "text") else None
        if text is None:
            raise BadEvent(f"content parts of type '{part.type}' are not supported here: send text parts "
                           "(speech goes through input_audio_buffer)", "invalid_value", "item.content")
        texts.append(text)
    return texts
