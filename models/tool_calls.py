"""Tool calls the way small models really write them, turned into OpenAI `tool_calls`.

One parser for every shape seen from local models: Hermes `<tool_call>{...}</tool_call>` tags (a
missing closing tag too), a bare JSON object, a ```json fence, the doubled braces `{{...}}` that
Qwen's template shows in its own instructions, `{"function": {...}}` wrappers and JSON lists; several
calls in one reply; and a reply that is half text, half call. Objects that name no offered tool are
taken out of the text (they are call-shaped noise, never words to speak) but not returned as calls.

`CallScanner` does the same for a streamed reply: text before anything that may start a call is
released at once; from a possible call on, the rest is held and parsed when the reply ends.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field

_DECODER = json.JSONDecoder()
_MARKUP = re.compile(r"</?tool_call>|```(?:json)?")
MARKERS = ("<tool_call>", "```", "{", "[{")


@dataclass
class ParsedReply:
    text: str  # the reply's words with the calls and their markup taken out
    calls: list[dict] = field(default_factory=list)  # OpenAI tool_calls, in the reply's order


def new_call(name: str, arguments: dict) -> dict:
    """An OpenAI tool call with a fresh id."""
    return {"id": f"call_{uuid.uuid4().hex[:16]}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}


def _as_call(data: object) -> tuple[str, dict] | None:
    """(name, arguments) when `data` has the shape of a call, whatever its name."""
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("function"), dict):  # {"type": "function", "function": {...}}
        data = data["function"]
    name = data.get("name")
    arguments = data.get("arguments", data.get("parameters"))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if arguments is None and isinstance(name, str):
        arguments = {}
    if not isinstance(name, str) or not isinstance(arguments, dict):
        return None
    return name, arguments


def _scan(text: str, names: Collection[str]) -> tuple[list[dict], list[tuple[int, int]]]:
    """Calls found in `text` and the spans of every call-shaped object (offered or not)."""
    calls, spans = [], []
    position = 0
    while (start := text.find("{", position)) != -1:
        try:
            data, end = _DECODER.raw_decode(text, start)
        except json.JSONDecodeError:
            position = start + 1
            continue
        found = _as_call(data)
        if found is None:
            position = start + 1
            continue
        spans.append((start, end))
        if found[0] in names:
            calls.append(new_call(*found))
        position = end
    return calls, spans


def _leftover(text: str, spans: list[tuple[int, int]]) -> str:
    kept, last = [], 0
    for start, end in spans:
        kept.append(text[last:start])
        last = end
    kept.append(text[last:])
    left = _MARKUP.sub("", "".join(kept)) if spans else "".join(kept)
    if not re.search(r"\w", left):  # only brackets and commas of a list of calls remain
        return ""
    return re.sub(r"[ \t]*\n\s*\n\s*", "\n\n", left).strip()


def parse_tool_calls(text: str, names: Collection[str]) -> ParsedReply:
    """Split a model's reply into its words and its calls to the tools in `names`."""
    calls, spans = _scan(text, names)
    if not spans and "{{" in text:  # Qwen's template shows its call format with doubled braces
        undoubled = text.replace("{{", "{").replace("}}", "}")
        calls, spans = _scan(undoubled, names)
        if spans:
            text = undoubled
    return ParsedReply(_leftover(text, spans), calls)


class CallScanner:
    """A streamed reply: `feed` returns the text that can be shown now; `finish` parses the rest.

    Text is released up to the first place that may begin a call (a marker, or the start of one at
    the end of what has arrived); from a marker on, everything is held until the reply ends.
    """

    def __init__(self, names: Collection[str]):
        self.names = names
        self._text = ""
        self._released = 0
        self._holding = False

    def feed(self, piece: str) -> str:
        self._text += piece
        if self._holding:
            return ""
        pending = self._text[self._released:]
        cut = len(pending)
        for marker in MARKERS:
            found = pending.find(marker)
            if found != -1 and found < cut:
                cut, self._holding = found, True
        if not self._holding:  # a marker may be arriving: hold its first characters back
            for marker in MARKERS:
                for size in range(min(len(marker) - 1, len(pending)), 0, -1):
                    if pending.endswith(marker[:size]):
                        cut = min(cut, len(pending) - size)
                        break
        self._released += cut
        return pending[:cut]

    @property
    def released(self) -> str:
        return self._text[:self._released]

    def finish(self) -> ParsedReply:
        """The held text parsed: its words (to show now) and its calls."""
        return parse_tool_calls(self._text[self._released:], self.names)
