"""What a client may ask for, checked: modalities, function and MCP tools, tool choice, turn detection,
conversation items and response options. Each function takes the typed value from
`voice.realtime.client_events` and returns the service's own form of it, or raises `BadEvent`
naming the field. Nothing here does I/O.
"""

from __future__ import annotations

import json

from voice.realtime.client_events import BadEvent
from voice.realtime.turn_detection import VadSettings
from voice.tools.mcp import Approval, McpServer, url_allowed
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
    """Realtime function tools as OpenAI chat tool specs; an `mcp` tool is refused (`tools` takes them)."""
    return [_function_tool(tool, param, n) for n, tool in enumerate(tools)]


def _function_tool(tool, param: str, n: int) -> dict:
    if getattr(tool, "type", None) not in (None, "function") or not getattr(tool, "name", None):
        raise BadEvent(f"{param}[{n}]: only function tools with a name are supported here", "invalid_value",
                       f"{param}.{n}")
    if problem := parameters_problem(tool.parameters):
        raise BadEvent(f"{param}[{n}].{problem}", "invalid_value", f"{param}.{n}.{problem.split(':')[0]}")
    parameters = tool.parameters if isinstance(tool.parameters, dict) else {"type": "object", "properties": {}}
    return {"type": "function", "function": {"name": tool.name, "description": tool.description or "",
                                             "parameters": parameters}}


def tools(given: list, param: str, allowed_urls: list[str],
          known: dict[str, McpServer]) -> tuple[list[dict], list[McpServer]]:
    """A tools array: its function tools as OpenAI chat tool specs, and its `mcp` tools as the
    servers they name (`known`: those this session defined, which a label alone names again)."""
    functions: list[dict] = []
    servers: list[McpServer] = []
    for n, tool in enumerate(given):
        if getattr(tool, "type", None) == "mcp":
            server = mcp_server(tool, f"{param}.{n}", allowed_urls, known)
            if server.label in (each.label for each in servers):
                raise BadEvent(f"{param}[{n}]: the server_label {server.label!r} is given twice", "invalid_value",
                               f"{param}.{n}.server_label")
            servers.append(server)
        else:
            functions.append(_function_tool(tool, param, n))
    return functions, servers


def mcp_server(tool, param: str, allowed_urls: list[str], known: dict[str, McpServer]) -> McpServer:
    """One `mcp` tool as the server Parlour reaches for the session. Its authorization or headers
    live in the returned record only: nothing of them is stored or shown."""
    for hosted in ("connector_id", "tunnel_id"):
        if getattr(tool, hosted, None) is not None:
            both = " and a server_url: give one" if tool.server_url else ": give a server_url"
            raise BadEvent(f"{param}: OpenAI's hosted connectors and tunnels are not served, and this tool names "
                           f"a {hosted}{both}", "invalid_value", f"{param}.{hosted}")
    if tool.server_url is None:
        return _defined_before(tool, param, known)
    if not url_allowed(tool.server_url, allowed_urls):
        raise BadEvent(f"{param}: the server_url {tool.server_url!r} is not one this service may reach (the "
                       "mcp_allowed_urls setting lists those)", "invalid_value", f"{param}.server_url")
    return McpServer(tool.server_label, tool.server_url, _headers(tool, param), _allowed_tools(tool, param),
                     _approval(tool.require_approval, param), tool.server_description or "")


def _defined_before(tool, param: str, known: dict[str, McpServer]) -> McpServer:
    """A tool with a label alone names the server this session defined under that label."""
    given = tool.model_fields_set - {"type", "server_label"}
    if tool.server_label not in known or given:
        raise BadEvent(f"{param}: an mcp tool needs a server_url (only a label this session defined before may "
                       "be given alone)", "missing_field", f"{param}.server_url")
    return known[tool.server_label]


def _headers(tool, param: str) -> dict[str, str]:
    headers = dict(tool.headers or {})
    if tool.authorization is not None:
        if any(name.lower() == "authorization" for name in headers):
            raise BadEvent(f"{param}: the authorization is given twice (authorization and headers.Authorization)",
                           "invalid_value", f"{param}.authorization")
        headers["Authorization"] = f"Bearer {tool.authorization}"
    return headers


def _allowed_tools(tool, param: str) -> frozenset[str] | None:
    allowed = tool.allowed_tools
    if allowed is None or isinstance(allowed, list):
        return None if allowed is None else frozenset(allowed)
    if allowed.read_only is not None:
        raise BadEvent(f"{param}.allowed_tools: read_only filters are not served: name the tools",
                       "invalid_value", f"{param}.allowed_tools.read_only")
    return frozenset(allowed.tool_names or [])


def _approval(asked, param: str) -> Approval:
    """`require_approval`: "always" (the GA default), "never", or a filter. Under a filter a tool it
    names follows its list; any other waits for approval, unless the filter names only tools that
    always wait (then the others run at once)."""
    if asked is None or isinstance(asked, str):
        return Approval(others=asked != "never")
    lists = {}
    for key in ("always", "never"):
        chosen = getattr(asked, key, None)
        if chosen is not None and chosen.read_only is not None:
            raise BadEvent(f"{param}.require_approval: read_only filters are not served: name the tools",
                           "invalid_value", f"{param}.require_approval.{key}.read_only")
        lists[key] = frozenset(chosen.tool_names or []) if chosen is not None else frozenset()
    always, never = lists["always"], lists["never"]
    return Approval(others=not (always and not never), always=always, never=never)


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
