"""Recall: what the user told the assistant in their other sessions, found for a question.

Research searches it beside the knowledge base (voice.knowledge.research), so that "What did I tell you last
week about the plumber?" works in a new session. The store indexes every user message with FTS5
(`SessionStore.said_elsewhere`) and answers only from the sessions of the same owner: the same API
key, or, without keys, the one user of the service.

Only the user's statements count as memory. A question asked before ("What is the capital of
France?") says nothing about the user, and finding it again would put research into every turn
that asks something twice; a command is left out too, whether a client's function answered it (Home
Assistant's "Turn on the kitchen light." over its chat API) or not (the same said over Wyoming): it
begins with a verb that works a device (`COMMAND_VERBS`). A message is recalled when its statement
sentences share at least half the question's telling words; words that only point at the past
("told", "last week") are not telling. Each recalled sentence comes with the day it was said, which
"last week" needs. Only what is asked recalls anything (voice.knowledge.research: `asks`).
"""

from __future__ import annotations

import math
import re
import time
from datetime import date

from voice.knowledge.base import SearchResult, fts_query, telling_terms
from voice.store.sessions import SessionStore
from voice.text.sentences import Sentences

# Words that say a question is about the past, not what it is about.
PAST = frozenset(telling_terms(
    "tell told said say saying mention mentioned remember remind recall earlier before ago last week weeks "
    "month months yesterday today time times previous previously session conversation discuss discussed "
    "talk talked ask asked know knew"))
CANDIDATES = 20  # messages read by BM25 before the sentence check
# How a command to a device begins, after "and", "now", "please" or "then". Measured
# (scripts/eval_precision.py): Home Assistant's 20 evaluated commands, said in an earlier session over
# Wyoming, were recalled into each of the same commands said again.
COMMAND_VERBS = frozenset(
    "turn switch set lock unlock open close dim brighten start stop pause resume play skip mute unmute raise "
    "lower increase decrease activate deactivate arm disarm cancel".split())
LEADING = frozenset("and now please then okay ok so".split())


def recalled(store: SessionStore, session_id: str, question: str, limit: int = 2,
             now: float | None = None) -> list[SearchResult]:
    """At most `limit` passages of what the user said in their other sessions that bear on
    `question`, best first; each passage is the matching statements of one message."""
    asked = telling_terms(question) - PAST
    match = fts_query(" ".join(asked))
    if not asked or not match:
        return []
    needed = max(1, math.ceil(len(asked) / 2))
    found: list[SearchResult] = []
    for text, said_at, score in store.said_elsewhere(session_id, match, CANDIDATES):
        statements = [s for s in _sentences(text) if not s.rstrip().endswith("?") and not commands(s)]
        kept = [s for s in statements if len(telling_terms(s) & asked) >= needed]
        if kept and all(r.text != " ".join(kept) for r in found):
            found.append(SearchResult("", f"What the user told you {_when(said_at, now)}", " ".join(kept), score))
        if len(found) == limit:
            break
    return found


def commands(sentence: str) -> bool:
    """Whether `sentence` is a command to a device ("Now switch it off."), not something told."""
    words = re.findall(r"[a-z']+", sentence.lower())
    while words and words[0] in LEADING:
        words.pop(0)
    return bool(words) and words[0] in COMMAND_VERBS


def _sentences(text: str) -> list[str]:
    splitter = Sentences(first_words=0)
    return [s for s in [*splitter.feed(text + "\n"), splitter.flush()] if s]


def _when(said_at: float, now: float | None = None) -> str:
    """The day, and how long ago: "on Friday 27 November 2026 (6 days ago)"."""
    days = (date.fromtimestamp(now or time.time()) - date.fromtimestamp(said_at)).days
    ago = "today" if days == 0 else "yesterday" if days == 1 else f"{days} days ago"
    return f"on {time.strftime('%A %d %B %Y', time.localtime(said_at))} ({ago})"
