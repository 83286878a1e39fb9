"""Section analysis: condensing the current turn's oversized input or evidence.

Text is split into sections by its own structure (headings, then paragraphs, then sentences)
under a token bound; a worker call per section extracts what bears on the question; the notes
take the text's place and the answer is written from them. `cut` is the last resort, which never
fails: it shortens a text to a share of its length.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from fitting.messages import Message
from fitting.summary import Generate

WORKER = (
    "You read one section of a longer text for someone answering a question. Copy out only what "
    "bears on the question: facts, figures, names, short quotes. If nothing does, answer NONE."
)
NOTHING = "NONE"
CUT_MARK = " […]"

_HEADING = re.compile(r"(?im)^(?=#{1,6}\s)|(?=<h[1-6][\s>])")
_PARAGRAPH = re.compile(r"\n\s*\n")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


class WorkerFailed(Exception):
    """A section worker raised or returned something unusable."""


def split_sections(text: str, limit: int, count: Callable[[str], int]) -> list[str]:
    """Sections of `text`, each about `limit` tokens or fewer, in order."""
    sections: list[str] = []
    for block in (b for b in _HEADING.split(text) if b.strip()):
        if count(block) <= limit:
            sections.append(block.strip())
        else:
            sections.extend(_pack(_PARAGRAPH.split(block), limit, count, depth=0))
    return sections


def _pack(parts: list[str], limit: int, count: Callable[[str], int], depth: int) -> list[str]:
    """Greedily join parts into sections under `limit`; a part too large alone is split finer."""
    sections: list[str] = []
    current: list[str] = []
    size = 0
    for part in (p.strip() for p in parts if p.strip()):
        tokens = count(part)
        if tokens > limit:
            if current:
                sections.append("\n\n".join(current))
                current, size = [], 0
            if depth == 0:
                sections.extend(_pack(_SENTENCE.split(part), limit, count, depth=1))
            else:  # a single sentence over the bound: cut it into equal runs of characters
                step = max(1, len(part) * limit // tokens)
                sections.extend(part[i : i + step] for i in range(0, len(part), step))
            continue
        if current and size + tokens > limit:
            sections.append("\n\n".join(current))
            current, size = [], 0
        current.append(part)
        size += tokens
    if current:
        sections.append("\n\n".join(current))
    return sections


def worker_prompt(question: str, section: str) -> list[Message]:
    return [
        {"role": "system", "content": WORKER},
        {"role": "user", "content": f"Question: {question}\n\nSection:\n{section}"},
    ]


def condense(text: str, question: str, generate: Generate, limit: int, count: Callable[[str], int]) -> str:
    """Notes from every section of `text` that bear on `question`; raises WorkerFailed."""
    notes = []
    for section in split_sections(text, limit, count):
        try:
            note = generate(worker_prompt(question, section))
        except Exception as error:
            raise WorkerFailed(str(error)) from error
        if not isinstance(note, str):
            raise WorkerFailed(f"a section worker returned {type(note).__name__}, not text")
        note = note.strip()
        if note and note.upper().rstrip(".") != NOTHING:
            notes.append(note)
    return "\n".join(notes)


def cut(text: str, share: float, keep: str = "head") -> str:
    """`text` shortened to about `share` of its length, at a word boundary, marked as cut."""
    length = max(0, int(len(text) * share))
    if length >= len(text):
        return text
    if keep == "tail":
        piece = text[len(text) - length :]
        space = piece.find(" ")
        return (CUT_MARK.strip() + " " + (piece[space + 1 :] if 0 <= space < 40 else piece)).strip()
    piece = text[:length]
    space = piece.rfind(" ")
    return (piece[:space] if space > length - 40 else piece) + CUT_MARK
