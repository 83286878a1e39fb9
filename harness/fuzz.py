"""Mutation fuzzing shared by every door's tests and scripts/fuzz_doors.py: a valid request or
event with one field, at any depth, removed or replaced by junk.

`mutations(value)` yields every such mutation in order (the Realtime socket's test sends them
all); `sample(values, count, seed)` draws `count` of them, from any of `values`, reproducibly.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator

JUNK = [None, True, -1, 0, 10**30, 1e308, "", "x" * 5_000, "\u0000\ud7ff", [], {}, [[[[[]]]]], {"a": {"b": {"c": []}}},
        [None, 1, "two"], {"type": "nonsense"}, -10**30, 3.5, "[]", "ünïcødé ✓", [{"type": "input_text"}],
        {"type": "function", "name": 5}, "inf", "root", "\ud800", 8192.0]
REMOVED = ...


def paths(value, prefix: tuple = ()) -> Iterator[tuple]:
    """The path of every field and item in `value`, outermost first."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for key, inner in items:
        yield prefix + (key,)
        yield from paths(inner, prefix + (key,))


def mutated(value, path: tuple, junk) -> object:
    """A copy of `value` with the field at `path` removed (`REMOVED`) or replaced by `junk`."""
    copied = copy.deepcopy(value)
    parent = copied
    for step in path[:-1]:
        parent = parent[step]
    if junk is REMOVED:
        parent.pop(path[-1])
    else:
        parent[path[-1]] = junk
    return copied


def mutations(value, keep: tuple = ("type",)) -> Iterator[object]:
    """Every field of `value` but the top-level ones in `keep`, removed or replaced by each junk."""
    for path in paths(value):
        if path[0] in keep and len(path) == 1:
            continue
        for junk in [REMOVED, *JUNK]:
            yield mutated(value, path, junk)


def sample(values: list, count: int, seed: int, keep: tuple = ("type",)) -> list:
    """`count` mutations drawn from `values` with `seed`: each a value, a path in it and a junk."""
    rng = random.Random(seed)
    fields = [(value, [p for p in paths(value) if not (len(p) == 1 and p[0] in keep)]) for value in values]
    fields = [(value, candidates) for value, candidates in fields if candidates]
    drawn = []
    while len(drawn) < count:
        value, candidates = rng.choice(fields)
        drawn.append(mutated(value, rng.choice(candidates), rng.choice([REMOVED, *JUNK])))
    return drawn
