"""Recall: what the user told the assistant in their other sessions, found for a question.

Research searches it beside the knowledge base (voice.knowledge.research), so that "What did I tell you last
week about the plumber?" works in a new session. The store indexes every user message with FTS5
(`SessionStore.said_elsewhere`) and answers only from the sessions of the same owner: the same API
key, or, without keys, the one user of the service.

Only the user's statements count as memory. A question asked before ("What is the capital of
France?") says nothing about the user, and finding it again would put research into every turn
that asks something twice; a command answered by a client's function (Home Assistant's "Turn on the
kitchen light.") is left out too. A message is recalled when its statement sentences share at least half
the question's telling words; words that only point at the past ("told", "last week") are not
telling. Each recalled sentence comes with the day it was said, which "last week" needs.
"""

from __future__ import annotations

import math
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
        statements = [s for s in _sentences(text) if not s.rstrip().endswith("?")]
        kept = [s for s in statements if len(telling_terms(s) & asked) >= needed]
        if kept and all(r.text != " ".join(kept) for r in found):
            found.append(SearchResult("", f"What the user told you {_when(said_at, now)}", " ".join(kept), score))
        if len(found) == limit:
            break
    return found


def _sentences(text: str) -> list[str]:
    splitter = Sentences(first_words=0)
    return [s for s in [*splitter.feed(text + "\n"), splitter.flush()] if s]


def _when(said_at: float, now: float | None = None) -> str:
    """The day, and how long ago: "on Friday 27 November 2026 (6 days ago)"."""
    days = (date.fromtimestamp(now or time.time()) - date.fromtimestamp(said_at)).days
    ago = "today" if days == 0 else "yesterday" if days == 1 else f"{days} days ago"
    return f"on {time.strftime('%A %d %B %Y', time.localtime(said_at))} ({ago})"
