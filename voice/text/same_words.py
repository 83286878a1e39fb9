"""Whether two transcripts say the same words: a draft and the committed question compared, case
and punctuation aside."""

from __future__ import annotations

import re


def same_words(a: str, b: str) -> bool:
    """Whether two transcripts say the same words, whatever their case and punctuation."""
    words = lambda text: re.sub(r"[^\w\s']", " ", text.lower()).split()  # noqa: E731
    return words(a) == words(b)
