"""Where a new prompt and the cached one agree, for reusing llama.cpp's KV cache.

`common_prefix` is what llama.cpp reuses by itself. `removed_spans` finds how the new prompt is the
cached one with spans taken out (old research, an old exchange), so the model can drop those spans
from its cache and shift what follows instead of evaluating it again (`LanguageModel._shift_cache`).
"""

from __future__ import annotations

MIN_RUN = 16  # tokens that must match to resume after a removed span (chat markup alone is shorter)


def common_prefix(old: list[int], new: list[int]) -> int:
    length = 0
    for a, b in zip(old, new, strict=False):
        if a != b:
            break
        length += 1
    return length


def removed_spans(old: list[int], new: list[int], min_run: int = MIN_RUN) -> tuple[list[tuple[int, int]], int]:
    """How `new` starts as `old` with spans removed: the spans (`old` positions, start to end) and
    how many leading tokens of `new` that accounts for. Matching resumes after a span only where at
    least `min_run` tokens agree; it stops at the first text that is new."""
    spans: list[tuple[int, int]] = []
    i = j = 0
    while i < len(new) and j < len(old):
        if new[i] == old[j]:
            i, j = i + 1, j + 1
            continue
        window = new[i:i + min_run]
        resume = _find(old, window, j + 1) if len(window) == min_run else None
        if resume is None:
            break
        spans.append((j, resume))
        j = resume
    return spans, i


def _find(tokens: list[int], window: list[int], start: int) -> int | None:
    at = start
    while True:
        try:
            at = tokens.index(window[0], at)
        except ValueError:
            return None
        if tokens[at:at + len(window)] == window:
            return at
        at += 1
