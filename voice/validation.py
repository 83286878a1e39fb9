"""A pydantic validation error told as one field and one problem, for every door's error shape.

Each door types what a client sends with the client's own models (the `openai` package's for the
Realtime socket and the chat completions, the `ollama` package's for Ollama's API, the `wyoming`
package's event classes), and answers a failure in its own shape: an `error` event, a 400 body,
a Wyoming `error`. What they share is how a failure is read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pydantic


@dataclass(frozen=True)
class Problem:
    param: str  # the field's path, such as `messages.0.role`; `body` when it is the whole value
    message: str  # what is wrong with it, as pydantic says
    missing: bool  # the field is absent, rather than wrong

    def __str__(self) -> str:
        return f"{self.param}: {self.message}"


def explain(error: pydantic.ValidationError, root: str = "body") -> Problem:
    """The most specific problem: in a union, the member that got furthest into the value."""
    problems = error.errors(include_url=False, include_input=False)
    best = max(problems, key=lambda p: len(p["loc"]))
    path = [str(part) for part in best["loc"] if not _is_model_name(part)]
    return Problem(".".join(path) or root, best["msg"], best["type"] == "missing")


def _is_model_name(part: object) -> bool:
    # Union members appear in a location by class name ("RealtimeSessionCreateRequest") or by a
    # tagged-union tag with brackets, and typed dicts by their kind ("typed-dict"); none is a
    # field the client wrote.
    return isinstance(part, str) and (part[:1].isupper() or "[" in part or part in _KINDS)


_KINDS = {"str", "int", "float", "bool", "bytes", "dict", "list", "none", "typed-dict", "function-after",
          "function-before", "function-wrap", "lax-or-strict", "json-or-python"}


def json_value(text: str | bytes) -> object:
    """JSON text read, or `ValueError` saying why not. JSON may escape a lone surrogate
    (`"\\ud800"`), which is no character and which UTF-8, and so the session store, cannot hold:
    such text is refused here, at the door, like any other that is not JSON."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError("it is nested too deeply to read") from None
    try:
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise ValueError("it holds a lone surrogate, which is not text") from None
    return value


def parameters_problem(parameters: object) -> str | None:
    """What is wrong with a function tool's `parameters`, or None: the OpenAI packages type them as
    any object, and the prompt and the fitting of calls read `properties` (an object of JSON
    schemas) and `required` (a list of names). The field at fault is named."""
    if parameters is None:
        return None
    if not isinstance(parameters, dict):
        return "parameters: must be a JSON schema object"
    properties, required = parameters.get("properties", {}), parameters.get("required", [])
    if not isinstance(properties, dict) or not all(isinstance(p, dict) for p in properties.values()):
        return "parameters.properties: must be an object of JSON schemas"
    if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
        return "parameters.required: must be a list of names"
    return None
