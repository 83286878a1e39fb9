"""Research: how a turn consults the knowledge base and the user's other sessions, stored as a real
tool exchange.

The `search` tool looks in both: what the user said in their other sessions (voice.knowledge.recall), then
the knowledge base's passages.
- `auto`: every question the knowledge base bears on (it names a document, or a passage matches it
  well: `KnowledgeBase.bears_on`) is searched; the turn stores an assistant message with a `search`
  tool call and the tool result answering it. Other questions get the exchange only if they recall
  something from the user's other sessions.
- `model`: the model is told about the `search` tool and decides: templates that know tools get it
  declared natively, others get it described in the system prompt (voice.turns.tools). A reply that is a tool
  call is parsed (`models.tool_calls`: every shape small models write), run, stored, and the model
  answers again with the results.
- `off`: no research.

The model reads an `auto` search as its results followed by the question, in the question's own
message (voice.turns.prompt_layout: `compact_calls` marks such a search by dropping its query,
which is the question; `evidence_first` folds it after fitting): the evidence leads, so it can be
evaluated while the question is still being spoken.

A spoken answer is two or three sentences, and every token of evidence is prefill the listener
waits for: a spoken turn's results are cut to the sentences that bear on the question
(`spoken_evidence`), under `spoken_tokens`, before they are stored. Text turns keep the passages,
and read the sentences that bear most on the question again after them (`key_sentences`).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from fitting.measure import estimate_text
from models.tool_calls import new_call
from voice.knowledge.base import (
    NO_RESULTS,
    KnowledgeBase,
    SearchResult,
    asked_terms,
    format_results,
    heading,
    telling_terms,
)
from voice.knowledge.recall import recalled
from voice.store.sessions import SessionStore
from voice.text.clock import without_clock
from voice.text.sentences import Sentences

SEARCH_TOOL: dict = {
    "type": "function",
    "function": {
        "name": "search",
        # Worded by measurement (scripts/eval_model.py): saying what the notes hold, and what they
        # are not for, keeps the small models from searching for arithmetic and general knowledge.
        "description": "Search the user's personal notes: appointments, codes, contacts, plans and documents. "
                       "Only for the user's own information, never for general knowledge or arithmetic.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "keywords to look for"}},
            "required": ["query"],
        },
    },
}

SEARCH_IN_WORDS = {"search": "query"}  # a search asked for in words: 'search ... with the query "..."'


class Research:
    """The research policy of a service, and the search tool it runs."""

    def __init__(self, policy: str, knowledge: KnowledgeBase | None, store: SessionStore | None = None,
                 results: int = 3, spoken_tokens: int = 180, count: Callable[[str], int] | None = None,
                 spoken_results: int = 6):
        """`store`, if given, is searched too: what the user said in their other sessions
        (voice.knowledge.recall). A spoken turn's sentences are chosen from `spoken_results` passages, a text
        turn gets `results` whole. `count` gives a text's tokens (the model's tokenizer); without
        it, characters / 3."""
        self.policy = policy if knowledge is not None or store is not None else "off"
        self.knowledge, self.store = knowledge, store
        self.results, self.spoken_results = results, spoken_results
        self.spoken_tokens = spoken_tokens
        self.count = count or estimate_text

    def run(self, calls: list[dict], found_only: bool = False, spoken_question: str | None = None,
            session_id: str | None = None, knowledge: bool = True) -> list[dict]:
        """The assistant message holding `calls` and the tool results answering each. With
        `found_only`, calls that found nothing (or name a tool that does not exist) are left out,
        and [] means none found anything. For a spoken turn, `spoken_question` is the question the
        results are cut down to. `session_id` is the session asking: its owner's other sessions
        are searched, and the knowledge base unless `knowledge` is false."""
        answers = [(call, self._answer(call, spoken_question, session_id, knowledge)) for call in calls]
        if found_only:
            answers = [(call, answer) for call, answer in answers if answer is not None]
            if not answers:
                return []
        messages: list[dict] = [{"role": "assistant", "content": None, "tool_calls": [c for c, _ in answers]}]
        for call, answer in answers:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": answer or NO_RESULTS})
        return messages

    def _answer(self, call: dict, spoken_question: str | None, session_id: str | None,
                knowledge: bool = True) -> str | None:
        """The search results as the model reads them, what the user said elsewhere first; None when
        there are none, or when the call names a tool that does not exist or has no query (small
        models invent tools such as `add`)."""
        query = json.loads(call["function"]["arguments"]).get("query")
        if call["function"]["name"] != "search" or not isinstance(query, str) or not query.strip():
            return None
        found = recalled(self.store, session_id, query) if self.store is not None and session_id else []
        passages = self.results if spoken_question is None else self.spoken_results
        found += self.knowledge.search(query, passages) if self.knowledge and knowledge else []
        if not found:
            return None
        # Sentences are chosen for what the search looked for: "Brightwater" too, for "Bright Watcher".
        asked = spoken_question or query
        asked = " ".join([asked, *self.knowledge.searched_for(asked)]) if self.knowledge and knowledge else asked
        if spoken_question is not None:
            return format_results(spoken_evidence(asked, found, self.spoken_tokens, self.count))
        return format_results(found, key_sentences(asked, found, KEY_SENTENCE_TOKENS, self.count))

    def for_question(self, question: str, spoken: bool = False, session_id: str | None = None,
                     acting: bool = False) -> list[dict]:
        """The `auto` policy's tool exchange for a question ([] under other policies). A question
        the knowledge base has nothing for (`KnowledgeBase.bears_on`; or there is none) and that
        recalls nothing gets no exchange: it is answered as if research were off, at its speed.
        An `acting` turn offers tools that act (a client's, Home Assistant's, or an MCP server's): the
        user's other sessions are not searched, and only what is asked as a question is (`asks`). A
        command ("Turn on the kitchen light.") gets no passages: the household notes bore on 16 of Home
        Assistant's 20 evaluated commands by their words ("kitchen", "front door"), and each cost the
        command their prefill."""
        question = without_clock(question)  # Home Assistant's time of day is not what was asked
        if self.policy != "auto" or not question.strip() or acting and not asks(question):
            return []
        bears = self.knowledge is not None and self.knowledge.bears_on(question)
        if not bears and acting:
            return []
        # Memory answers what is asked: a command or a remark recalls nothing.
        return self.run([new_call("search", {"query": question})], found_only=not bears,
                        spoken_question=question if spoken else None,
                        session_id=None if acting or not asks(question) else session_id, knowledge=bears)


def result_tokens(llm) -> Callable[[str], int]:
    """A tool result's tokens as `llm`'s tokenizer counts them in a prompt, its message's framing
    left out: the `count` a `Research` bounds spoken evidence with."""
    framing = llm.count_message({"role": "tool", "content": ""})
    return lambda text: llm.count_message({"role": "tool", "content": text}) - framing


# How a question begins, or ends: a sentence that neither begins with one of these words nor ends in
# a question mark is a statement or a command.
QUESTION_WORDS = frozenset(
    "who whom whose what when where which why how is are was were am do does did can could should would will "
    "shall may might must has have had isn't aren't wasn't weren't don't doesn't didn't can't couldn't won't "
    "tell remind explain describe".split())


def asks(text: str) -> bool:
    """Whether `text` is asked as a question (or a request to be told), not given as a command.
    Whisper often writes a question without its mark, so its first word decides ("what's" is "what")."""
    words = re.findall(r"[\w']+", text.lower())
    first = re.sub(r"'(s|re|ll|d|ve)$", "", words[0]) if words else ""
    return text.rstrip().endswith("?") or first in QUESTION_WORDS


# A text turn's passages are followed by their sentences that bear most on the question, this many
# tokens of them: the 1.5B model, given only the passages, took a neighbouring sentence's figure
# (eval_research.py).
KEY_SENTENCE_TOKENS = 120
KEY_SENTENCE_FLOOR = 0.5

# A document's opening sentences that begin in its first this many characters, and hold a figure,
# are kept in spoken evidence: its title, version and date, author and address (the GPL 2's Boston
# is at 150). Its boilerplate ("Everyone is permitted to copy ...") competes like any sentence: kept
# whole, it crowded out the GPL 3's 60 days.
OPENING_CHARS = 200


def spoken_evidence(question: str, results: list[SearchResult], bound: int,
                    count: Callable[[str], int]) -> list[SearchResult]:
    """The passages cut to their sentences that share the most telling words with `question`
    (rarer words count more), under `bound` tokens with each passage's heading, each passage's
    sentences kept in their order. Passages with none of them are left out; if no sentence shares a
    word, the first passage's opening sentences are kept. A document's opening keeps its first
    sentences that hold a figure, whatever they share: they say its version, date, author and
    address, which a question asks in words they do not use ("In which city is the address ...").
    No generation is needed.
    `count` gives a text's tokens."""
    chosen = _bearing_sentences(question, results, bound, count)
    kept = {p for p, _, _ in chosen}
    return [replace(result, text=" ".join(sentence for q, _, sentence in chosen if q == p))
            for p, result in enumerate(results) if p in kept]


def key_sentences(question: str, results: list[SearchResult], bound: int, count: Callable[[str], int]) -> str:
    """The sentences of `results` that share the most telling words with `question`, under `bound`
    tokens, each after its passage's number ("[2] ..."), in the passages' order: a text turn reads
    them after the whole passages. A document's opening is not preferred here: the passages hold it.
    Only sentences that share at least half as much as the best one are kept: the 1.5B model
    answered with a sentence that shared only "license" when it was there."""
    plain = [replace(result, opening=False) for result in results]
    chosen = _bearing_sentences(question, plain, bound, count, floor=KEY_SENTENCE_FLOOR)
    return "\n".join(f"[{p + 1}] {sentence}" for p, _, sentence in chosen)


def _bearing_sentences(question: str, results: list[SearchResult], bound: int,
                       count: Callable[[str], int], floor: float = 0.0) -> list[tuple[int, int, str]]:
    """(passage, position, sentence) of the sentences `spoken_evidence` keeps, in passage order;
    with `floor`, only those that share at least that share of the best one's weight."""
    asked = asked_terms(question)
    candidates = []  # (passage, position, sentence, its terms, whether it opens a document)
    for p, result in enumerate(results):
        splitter, start = Sentences(first_words=0), 0
        text, columns = _unwrap(result.text)
        for n, sentence in enumerate([*splitter.feed(text + "\n"), splitter.flush()]):
            if sentence and not sentence.startswith("#"):
                opens = result.opening and start < OPENING_CHARS and re.search(r"\d", sentence) is not None
                # A table row shares what its cells say: its column names are every row's.
                shared = (telling_terms(sentence) - telling_terms(columns.get(sentence, ""))) & asked
                candidates.append((p, n, sentence, shared, opens))
            start += len(sentence) + 1
    frequency = Counter(term for _, _, _, shared, _ in candidates for term in shared)
    weight = {term: math.log(1 + len(candidates) / df) for term, df in frequency.items()}
    # Each sentence's score once: the sum of its shared terms' weights (0: it shares none).
    ranked = sorted((not opens, -sum(weight[t] for t in shared), p, n, sentence)
                    for p, n, sentence, shared, opens in candidates)
    best = max((-negated for _, negated, _, _, _ in ranked), default=0.0)
    chosen: list[tuple[int, int, str]] = []
    used, opened = 0, set()
    for later, negated, p, n, sentence in ranked:
        if chosen and later and (negated == 0 or -negated < floor * best):
            break
        cost = count(sentence) + (0 if p in opened else count(heading(p + 1, results[p])))
        if used + cost <= bound or not chosen:  # the best sentence is kept even alone over the bound
            chosen.append((p, n, sentence))
            used += cost
            opened.add(p)
    return sorted(chosen)


def _unwrap(text: str) -> tuple[str, dict[str, str]]:
    """Hard-wrapped lines joined into their paragraphs, so that the splitter finds sentences rather
    than lines (license texts break every 70 characters). Headings and list items keep their lines,
    and a table's rows become lines of their own (`_table_rows`): with the text, each row's column
    names."""
    lines: list[str] = []
    columns: dict[str, str] = {}
    table: list[str] = []
    for line in [*text.split("\n"), ""]:
        if line.lstrip().startswith("|"):
            table.append(line)
            continue
        if table:
            names, rows = _table_rows(table)
            columns.update(dict.fromkeys(rows, " ".join(names)))
            lines += [row for row_text in rows for row in (row_text, "")]
            table = []
        if lines and lines[-1].strip() and line.strip() and not lines[-1].lstrip().startswith("#") \
                and not re.match(r"\s*([#*-]|\d+[.)])\s", line):
            lines[-1] = f"{lines[-1].rstrip()} {line.strip()}"
        else:
            lines.append(line)
    return "\n".join(lines), columns


def _table_rows(lines: list[str]) -> tuple[list[str], list[str]]:
    """A Markdown table's column names, and its rows as sentences that name each cell by its column:
    "Breaker: 9; Circuit: Electric shower." A row read alone, or a table read whole, left the 1.5B
    model to count columns, and it gave the shower the first row's breaker. A table cut off from its
    header (a passage that begins inside it) keeps its cells unnamed."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines]
    header: list[str] = []
    if len(rows) > 1 and all(re.fullmatch(r":?-+:?", cell) for cell in rows[1]):
        header, rows = rows[0], rows[2:]
    sentences = []
    for row in rows:
        cells = zip(header or [""] * len(row), row, strict=False)
        sentences.append("; ".join(f"{name}: {cell}" if name else cell for name, cell in cells if cell) + ".")
    return header, sentences
