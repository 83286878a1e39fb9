"""A GGUF's chat template, rendered as transformers renders it, and what rendering needs.

`ChatTemplate` compiles the template in a sandbox (the weights are data: no template can reach
Python) with transformers' `tojson`. Templates that know no tools (SmolLM2's ChatML among them) get
tool exchanges as plain text (`as_plain_text`): the call becomes a line in the assistant's message
and the results a user-role message, which keeps strict templates' role alternation intact.
`CountCache` keeps token counts of messages, so fitting measures each message once.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from markupsafe import Markup

Message = dict  # the OpenAI chat message shape: role, content, tool_calls, tool_call_id


class ChatTemplate:
    def __init__(self, source: str):
        environment = ImmutableSandboxedEnvironment(loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True)
        # Templates are written for transformers' `tojson`, which does not HTML-escape: Jinja's own
        # would turn a "<" in tool arguments into "\u003c", text the model never saw in training.
        environment.filters["tojson"] = _tojson
        self._template = environment.from_string(source)
        self.knows_tools = "tool_calls" in source

    def render(self, messages: list[Message], generation_prompt: bool, tools: list[dict] | None,
               bos: str, eos: str) -> str:
        """The prompt text; with `generation_prompt`, ending where the assistant's reply begins.
        A template's `raise_exception` raises jinja2.TemplateError."""
        if not self.knows_tools:
            messages = as_plain_text(messages)
        else:
            messages = [_for_template(m) for m in messages]
        return self._template.render(
            messages=messages, add_generation_prompt=generation_prompt, bos_token=bos,
            eos_token=eos, raise_exception=_raise, tools=tools if self.knows_tools else None,
        )


class CountCache:
    """Token counts of messages, keyed by a 16-byte digest of the message (so the cache's size does
    not depend on how long messages are), least recently used out first, safe from several threads.
    About 190 bytes an entry: 9.5 MB at the bound."""

    def __init__(self, entries: int = 50_000):
        self.entries = entries
        self._counts: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._counts.clear()

    def get(self, message: Message, count: Callable[[Message], int]) -> int:
        key = hashlib.blake2b(json.dumps(message, sort_keys=True).encode(), digest_size=16).digest()
        with self._lock:
            if key in self._counts:
                self._counts.move_to_end(key)
                return self._counts[key]
        value = count(message)  # outside the lock: counting renders and tokenizes
        with self._lock:
            self._counts[key] = value
            while len(self._counts) > self.entries:
                self._counts.popitem(last=False)
        return value


def tool_call_text(call: dict) -> str:
    function = call.get("function") or {}
    return f"[tool call {call.get('id', '')}: {function.get('name', '')}({function.get('arguments', '')})]"


def as_plain_text(messages: list[Message]) -> list[Message]:
    """Tool exchanges rewritten as ordinary turns, for templates that cannot express tools.

    A call becomes a line of the assistant's message and its results a user-role message;
    consecutive messages of one role are then joined, since strict templates want roles to
    alternate (parallel results, or results followed by the next question, would break that).
    """
    plain: list[Message] = []
    for message in messages:
        role, content = message.get("role"), message.get("content") or ""
        if role == "assistant" and message.get("tool_calls"):
            calls = "\n".join(tool_call_text(call) for call in message["tool_calls"])
            role, content = "assistant", f"{content}\n{calls}".strip()
        elif role == "tool":
            role, content = "user", f"[tool result {message.get('tool_call_id', '')}]\n{content}"
        if plain and plain[-1]["role"] == role and role != "system":
            plain[-1]["content"] += "\n\n" + content
        else:
            plain.append({"role": role, "content": content})
    return plain


def _for_template(message: Message) -> Message:
    """A message as chat templates expect it: content a string, and tool-call arguments an object
    (templates apply `tojson` to them; a JSON string would be encoded twice)."""
    shaped = {**message, "content": message.get("content") or ""}
    if message.get("tool_calls"):
        shaped["tool_calls"] = [
            {**call, "function": {**call["function"], "arguments": _arguments(call["function"].get("arguments"))}}
            for call in message["tool_calls"]
        ]
    return shaped


def _arguments(arguments: object) -> object:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return arguments


def _tojson(value: object, indent: int | None = None) -> Markup:
    return Markup(json.dumps(value, ensure_ascii=False, indent=indent))


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)
