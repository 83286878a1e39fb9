"""The part of a call that its template leaves the model no choice over, written for it.

A call opened the way the chat template writes one (Qwen's `<tool_call>\\n{"name": "`) goes on in a
fixed shape: once the name written so far begins only one offered tool's name, the rest of that
name and what follows it up to the arguments (`", "arguments": {`) can only be one text. llama.cpp
evaluates such a text as one batch, which on a CPU costs far less than decoding it a token at a
time (docs/home-assistant.md: What Parlour does with a command). Sans-I/O: `CallWriting` reads the
name as it is written and says what to write next; models.llm turns that into tokens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class CallShape:
    """How a template writes one call: the text before the tool's name, and from the name to the
    arguments' opening brace."""

    before: str  # '<tool_call>\n{"name": "'
    after_name: str  # '", "arguments": {'


@dataclass
class CallWriting:
    """One call being written, from just after `shape.before`. `names` are the offered tools'."""

    shape: CallShape
    names: tuple[str, ...]
    written: str = ""  # the call's text so far, after `shape.before`
    finished: bool = False  # the arguments have begun, or the name is no tool's: nothing more to write

    def next_forced(self, piece: str = "") -> str:
        """Take the model's `piece` of the call (nothing, right after the opening); the text that
        must follow it ("" when the model has a choice). The text returned counts as written."""
        if self.finished:
            return ""
        self.written += piece
        heads = [json.dumps(name)[1:-1] + self.shape.after_name for name in self.names]
        possible = [head for head in heads if head.startswith(self.written) or self.written.startswith(head)]
        self.finished = not possible or any(self.written.startswith(head) for head in possible)
        if len(possible) != 1 or self.finished:
            return ""
        rest = possible[0][len(self.written):]
        self.written += rest
        self.finished = True
        return rest

    def take_back(self, text: str) -> None:
        """The end of what `next_forced` returned was not written after all (`text`): the model
        writes it, its own way."""
        if text and self.written.endswith(text):
            self.written = self.written[:-len(text)]
