"""A model's call made to fit the tool's own JSON schema, as far as the schema says how.

Small models write arguments a tool refuses: a list where a string is asked (`"area": ["porch"]`,
which Home Assistant answers with InvalidSlotInfo), a string where a list is, `None` for "not
given", numbers as text, parameters the tool does not have (`GetLiveContext` takes none), an enum's
value in another case. Each is mended here, or left out when it cannot be: the tool goes without
an argument it does not require. A required argument that cannot be mended stays as written, for
the client to refuse in its own words. Nothing here knows any one client's tools.
"""

from __future__ import annotations

import json
import math
import re

_DROP = object()  # an argument that cannot fit and is left out


def fit_call(call: dict, tools: list[dict], said: str | None = None) -> dict:
    """`call` (OpenAI's shape, arguments as JSON text) fitted to its tool among `tools`. With
    `said`, the request's own text (its system prompt and messages), an optional argument of free
    text that names nothing in it is left out: the model made it up (`"floor": "Ground"` in a home
    with no floors). Values from a schema's `enum` are the tool's own and stay."""
    schema, arguments = _read(call, tools)
    if schema is None:
        return call
    fitted = fit_arguments(arguments, schema)
    if said is not None:
        fitted = _grounded(fitted, schema, _words(said))
    return {**call, "function": {**call["function"], "arguments": json.dumps(fitted, ensure_ascii=False)}}


def made_up(call: dict, tools: list[dict], said: str) -> bool:
    """Whether a required argument of free text shares no word with `said` (the request's own
    text): asked "What is the capital of France?" with a weather tool offered, the 1.5B model called
    it for "Paris", and for "New York" when asked how many legs a spider has. A query or a message
    the model words itself still shares some ("2022 World Cup winner")."""
    schema, arguments = _read(call, tools)
    if schema is None:
        return False
    properties, heard = schema.get("properties") or {}, set(_words(said).split())
    required = {name: arguments[name] for name in schema.get("required") or [] if name in arguments}
    return any(isinstance(properties.get(name), dict) and "enum" not in properties[name]
               and isinstance(value, str) and not set(_words(value).split()) & heard
               for name, value in required.items())


def _read(call: dict, tools: list[dict]) -> tuple[dict | None, dict]:
    """The called tool's parameter schema and the call's arguments as an object; (None, {}) when
    either is not one (no such tool, no schema, arguments that are not a JSON object)."""
    schema = next((t["function"].get("parameters") for t in tools
                   if t["function"]["name"] == call["function"]["name"]), None)
    try:
        arguments = json.loads(call["function"]["arguments"] or "{}")
    except json.JSONDecodeError:
        return None, {}
    if not isinstance(schema, dict) or not isinstance(arguments, dict):
        return None, {}
    return schema, arguments


def _words(text: str) -> str:
    return " " + " ".join(re.findall(r"\w+", text.lower())) + " "


def _grounded(arguments: dict, schema: dict, said: str) -> dict:
    properties, required = schema.get("properties") or {}, set(schema.get("required") or [])

    def named(value: object, spec: dict) -> bool:
        if isinstance(value, list):
            return all(named(item, spec.get("items") or {}) for item in value)
        return not isinstance(value, str) or "enum" in spec or _words(value) in said

    return {name: value for name, value in arguments.items()
            if name in required or named(value, properties.get(name) or {})}


def fit_arguments(arguments: dict, schema: dict) -> dict:
    properties = schema.get("properties")
    required = set(schema.get("required") or [])
    known = properties if isinstance(properties, dict) else {}
    open_ended = not isinstance(properties, dict) or schema.get("additionalProperties") not in (None, False)
    fitted = {}
    for name, value in arguments.items():
        if name not in known and not open_ended:
            continue
        value_fitted = _fit(value, known.get(name) or {})
        if value_fitted is not _DROP:
            fitted[name] = value_fitted
        elif name in required:
            fitted[name] = value
    return fitted


def _types(schema: dict) -> list[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind]
    return [k for k in kind if isinstance(k, str)] if isinstance(kind, list) else []


def _fit(value: object, schema: dict) -> object:
    if not isinstance(schema, dict):
        return value
    types = _types(schema)
    if value is None:
        return None if "null" in types else _DROP
    if not types:  # anyOf, $ref, or no type: nothing to go by
        return value
    for kind in types:
        fitted = _FIT.get(kind, lambda v, s: v)(value, schema)
        if fitted is not _DROP:
            return _in_enum(fitted, schema)
    return _DROP


def _in_enum(value: object, schema: dict) -> object:
    enum = schema.get("enum")
    if not isinstance(enum, list) or value in enum:
        return value
    if isinstance(value, str):
        same = [e for e in enum if isinstance(e, str) and e.lower() == value.lower()]
        if same:
            return same[0]
    return _DROP


def _string(value: object, schema: dict) -> object:
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return _DROP


def _number(value: object, schema: dict, whole: bool = False) -> object:
    if isinstance(value, str):
        try:
            value = float(value.strip().rstrip("%"))
        except ValueError:
            return _DROP
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return _DROP
    if whole:
        if value != int(value):
            return _DROP
        value = int(value)
    low, high = schema.get("minimum"), schema.get("maximum")
    if isinstance(low, (int, float)) and value < low:
        value = low
    if isinstance(high, (int, float)) and value > high:
        value = high
    return value


def _boolean(value: object, schema: dict) -> object:
    if isinstance(value, bool):
        return value
    return {"true": True, "false": False}.get(str(value).strip().lower(), _DROP)


def _array(value: object, schema: dict) -> object:
    items = value if isinstance(value, list) else [value]
    fitted = [_fit(item, schema.get("items") or {}) for item in items]
    return [item for item in fitted if item is not _DROP] or _DROP


def _object(value: object, schema: dict) -> object:
    return fit_arguments(value, schema) if isinstance(value, dict) else _DROP


_FIT = {"string": _string, "integer": lambda v, s: _number(v, s, whole=True), "number": _number,
        "boolean": _boolean, "array": _array, "object": _object, "null": lambda v, s: _DROP}
