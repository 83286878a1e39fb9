"""Tool calls the way small models really write them, turned into OpenAI `tool_calls`.

One parser for every shape seen from local models: Hermes `<tool_call>{...}</tool_call>` tags (a
missing closing tag too, or `<tools>` instead), a bare JSON object, a ```json fence, the doubled braces `{{...}}` that
Qwen's template shows in its own instructions, `{"function": {...}}` wrappers and JSON lists; several
calls in one reply; a reply that is half text, half call; and, for tools that take one string, a call
described in words ('you can use the search function with the query "boiler code"'), which is how
Qwen2.5-Coder-1.5B most often asks for a search. Calls to tools that were never offered (small
models invent `add` or `calculate`) are taken out of the text and returned apart, as `unknown`, so
the caller can answer in words instead of speaking JSON.

`CallScanner` does the same for a streamed reply: text before anything that may start a call is
released at once; from a possible call on, the rest is held and parsed when the reply ends.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

_DECODER = json.JSONDecoder()
_MARKUP = re.compile(r"</?tool(?:_call|s)?>|```(?:json)?")
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)|\n")
# The start of a call that never ended: its tag, or a ```json fence with nothing or a name after it.
_CUT_CALL = re.compile(r'\s*(?:<tool|```(?:json)?\s*(?:$|\{\s*"name"))')
# Python's words for JSON's, each as long as its JSON twin, so a call's span is the same in both.
_PYTHON_WORDS = re.compile(r"\b(?:None|True|False)\b")
_JSON_WORDS = {"None": "null", "True": "true", "False": "false"}
# What may begin a call, for the scanner here and for llm.stream's `open_with_call=False`.
MARKERS = ("<tool", "```", "{", "[{")  # "<tool" also starts the <tools> that Qwen sometimes writes


@dataclass
class ParsedReply:
    text: str  # the reply's words with the calls and their markup taken out
    calls: list[dict] = field(default_factory=list)  # OpenAI tool_calls to offered tools, in order
    unknown: list[dict] = field(default_factory=list)  # calls to tools that were never offered


def new_call(name: str, arguments: dict) -> dict:
    """An OpenAI tool call with a fresh id."""
    return {"id": f"call_{uuid.uuid4().hex[:16]}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}


def _as_call(data: object) -> tuple[str, dict] | None:
    """(name, arguments) when `data` has the shape of a call, whatever its name."""
    if not isinstance(data, dict):
        return None
    function = data.get("function")
    if isinstance(function, dict):  # {"type": "function", "function": {...}}
        data = function
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


def _scan(text: str) -> tuple[list[dict], list[tuple[int, int]]]:
    """Every call-shaped object in `text`, as calls, and their spans."""
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


def _described(text: str, described: Mapping[str, str]) -> list[dict]:
    """Calls written out in words: the tool's name, then within a few words the parameter's name (or
    "for") and a quoted argument: 'the search function with the query "x"', 'search for "x"'."""
    calls = []
    for name, parameter in described.items():
        pattern = (rf"\b{re.escape(name)}\b[^.\n]{{0,80}}?\b(?:{re.escape(parameter)}|for)"
                   rf"\W{{0,4}}\"([^\"\n]{{2,120}})\"")
        calls += [new_call(name, {parameter: match.strip()}) for match in re.findall(pattern, text, re.I)[:1]]
    return calls


def parse_tool_calls(text: str, names: Collection[str], described: Mapping[str, str] | None = None) -> ParsedReply:
    """Split a model's reply into its words and its calls to the tools in `names`. `described` maps
    tools that take one string to that parameter's name, so that a call written in words counts."""
    calls, spans = _scan(text)
    if not spans and described:
        in_words = _described(text, described)
        if in_words:
            return ParsedReply("", in_words)
    if not spans and "{{" in text:  # Qwen's template shows its call format with doubled braces
        undoubled = text.replace("{{", "{").replace("}}", "}")
        calls, spans = _scan(undoubled)
        if spans:
            text = undoubled
    if not spans and _PYTHON_WORDS.search(text):  # a call written as a Python dict: None, True, False
        calls, spans = _scan(_PYTHON_WORDS.sub(lambda word: _JSON_WORDS[word.group()], text))
    if not spans and _CUT_CALL.match(text):  # a call cut off by the length limit
        return ParsedReply("", [], [new_call("unreadable", {})])
    for call in calls:
        call["function"]["name"] = _offered_name(call["function"]["name"], names)
    offered = [call for call in calls if call["function"]["name"] in names]
    unknown = [call for call in calls if call["function"]["name"] not in names]
    return ParsedReply(_leftover(text, spans), offered, unknown)


def _offered_name(name: str, names: Collection[str]) -> str:
    """`name`, or the one offered tool it names without its prefix: Home Assistant's tools are
    `homeassistant__GetLiveContext` and the like, and a model may call `GetLiveContext`."""
    if name in names:
        return name
    matching = [offered for offered in names if offered.rsplit("__", 1)[-1].lower() == name.lower()]
    return matching[0] if len(matching) == 1 else name


def announces_call(sentence: str, names: Collection[str]) -> bool:
    """Words that introduce a call rather than answer: a sentence that ends in a colon ("you can
    use the following command:") or names a tool, whole or without its prefix (Home Assistant's
    `intent__HassTurnOn` is called "HassTurnOn")."""
    return sentence.strip().endswith(":") or bool(named_tools(sentence, names))


def named_tools(sentence: str, names: Collection[str]) -> list[str]:
    """The tools among `names` that `sentence` names, whole or without their prefix."""
    said = sentence.lower()
    return [name for name in names if name.lower() in said or name.rsplit("__", 1)[-1].lower() in said]


class CallScanner:
    """A streamed reply: `feed` returns the text that can be shown now; `finish` parses the rest.

    Text is released up to the first place that may begin a call (a marker, or the start of one at
    the end of what has arrived); from a marker on, everything is held until the reply ends. With
    `described` tools, or with `wary` (a client's tools are offered), the first sentence is held
    until it ends, since it may be a call in words or words that introduce one (`announces_call`):
    then the whole reply is held, and a reply that calls is a call and nothing else.
    """

    def __init__(self, names: Collection[str], described: Mapping[str, str] | None = None, wary: bool = False):
        self.names, self.described = names, described or {}
        self._text = ""
        self._released = 0
        self._holding = False
        self._first_sentence = bool(self.described) or wary
        self.announced = False  # the first sentence introduced a call ("I will use the ... tool")
        self.named: list[str] = []  # the tools it named

    def feed(self, piece: str) -> str:
        self._text += piece
        if self._holding:
            return ""
        if self._first_sentence:
            sentence_end = _SENTENCE_END.search(self._text)
            if not sentence_end:
                return ""
            self._first_sentence = False
            sentence = self._text[:sentence_end.end()]
            self.announced, self.named = announces_call(sentence, self.names), named_tools(sentence, self.names)
            if self.announced or _described(self._text, self.described):
                self._holding = True
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

    @property
    def held(self) -> str:
        return self._text[self._released:]

    def finish(self) -> ParsedReply:
        """The held text parsed: its words (to show now) and its calls."""
        return parse_tool_calls(self.held, self.names, self.described)
