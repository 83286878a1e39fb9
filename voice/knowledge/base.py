"""The local knowledge base: text, Markdown and HTML files chunked into SQLite FTS5, ranked by BM25.

`parlour index DIR` builds it; re-indexing reads only files whose size or modification time changed
(and re-chunks only those whose content hash changed), and forgets files that are gone. `search`
returns a few results, each one whole chunk of at most `CHUNK_CHARS` (2,000) characters, within
the decision record's 4,000 a result; a question that names documents is answered from them
(`named_documents`).
`vocabulary` gives the names the texts are about, for whisper to expect.
"""

from __future__ import annotations

import hashlib
import math
import re
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from voice.knowledge.mending import Mender

SUFFIXES = {".txt", ".md", ".markdown", ".html", ".htm"}
CHUNK_CHARS = 2_000
RELEVANCE = 0.5  # a result is kept when its score is at least half the best one's
ADDRESS = re.compile(r"\S+://\S+|www\.\S+|\S+@\S+|<[^>\s]+>")  # URLs and mail: gnu.org is no lower-case gnu
# A postal address's line ("51 Franklin Street, Fifth Floor, Boston, MA 02110-1301 USA"): its
# capitalized words are places, not what the texts are about, and whisper given "Street" and
# "Boston" heard "copyright" as "Coon Str".
POSTAL = re.compile(r"[^\n]*(?:\b\d+[ ,]+(?:[A-Z][a-z]+ ){1,3}(?:Street|St|Avenue|Ave|Road|Rd|Place|Lane|Drive|Way"
                    r"|Row|Close|Crescent|Court|Terrace|Gardens)\b|\b[A-Z]{2},? \d{5}(?:-\d{4})?\b"
                    r"|\b[A-Z]{1,2}\d{1,2}[A-Z]? \d[A-Z]{2}\b|\b(?:First|Second|Third|Fourth|Fifth) Floor\b)[^\n]*")
# Capitalized as calendar words and company suffixes are, not as names a question would use.
NOT_NAMES = frozenset("january february march april may june july august september october november december "
                      "monday tuesday wednesday thursday friday saturday sunday christmas inc ltd llc corp".split())
VOCABULARY_WORDS = 40  # names given to whisper: its prompt holds about 220 tokens, half for these
# A question that names no document bears on the knowledge base when its best passage scores at
# least this many times the weight (BM25's IDF) of a word found in one passage alone. By measurement
# on the license texts (178 passages): questions about the conversation or the world ("What did I
# ask you first?", "Summarize what we discussed.", "Who wrote Hamlet?") scored at most 1.14, research
# questions that name no license ("What does Creative Commons Zero do with copyright?") 2.35 and up.
BEARS_ON = 1.5

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, size INTEGER, mtime REAL, sha256 TEXT);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks USING fts5(path UNINDEXED, title, text, tokenize='porter unicode61');
"""


@dataclass(frozen=True)
class SearchResult:
    path: str
    title: str
    text: str  # a whole chunk: at most CHUNK_CHARS characters
    score: float
    opening: bool = False  # the document's first passage: its title, version, date and author


@dataclass
class _Name:
    """A name the knowledge base uses: the documents that mention it, and how often it occurs."""

    paths: set[str] = field(default_factory=set)
    count: int = 0


@dataclass
class IndexReport:
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    chunks: int = 0


class _HTMLText(HTMLParser):
    """Visible text of an HTML page; headings become Markdown headings so chunking can follow them."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.title = ""
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self._skip += 1
        elif tag == "title":
            self._in_title = True
        elif re.fullmatch(r"h[1-6]", tag):
            self.parts.append("\n\n" + "#" * int(tag[1]) + " ")
        elif tag in ("p", "div", "br", "li", "tr", "section", "article"):
            self.parts.append("\n\n" if tag != "br" else "\n")

    def handle_endtag(self, tag):
        if tag in ("script", "style") and self._skip:
            self._skip -= 1
        elif tag == "title":
            self._in_title = False
        elif re.fullmatch(r"h[1-6]", tag):
            self.parts.append("\n\n")

    def handle_data(self, data):
        if self._in_title:
            self.title += data.strip()
        elif not self._skip:
            self.parts.append(data)


def read_document(path: Path) -> tuple[str, str]:
    """A file's title and plain text."""
    raw = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix.lower() in (".html", ".htm"):
        parser = _HTMLText()
        parser.feed(raw)
        text = re.sub(r"[ \t]+", " ", "".join(parser.parts))
        text = re.sub(r"\n\s*\n\s*", "\n\n", text).strip()
        return parser.title or path.stem, text
    heading = re.search(r"(?m)^#\s+(.+)$", raw)
    if heading:
        return heading.group(1).strip(), raw.strip()
    # Plain text: a short first line that is no sentence is its title ("GNU GENERAL PUBLIC LICENSE").
    first = next((line.strip().strip('"') for line in raw.splitlines() if line.strip()), "")
    titled = 0 < len(first) <= 60 and not first.endswith((".", ":", ",")) and re.search(r"[A-Za-z]", first)
    return (first if titled else path.stem), raw.strip()


def chunk_text(text: str, limit: int = CHUNK_CHARS) -> list[str]:
    """Paragraph-aligned chunks of at most `limit` characters; a new heading starts a new chunk."""
    chunks: list[str] = []
    current = ""
    for paragraph in (p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()):
        while len(paragraph) > limit:  # one huge paragraph: split at a sentence or a space
            cut = max(paragraph.rfind(". ", 0, limit), paragraph.rfind(" ", 0, limit))
            cut = cut + 1 if cut > limit // 2 else limit
            if current:
                chunks.append(current)
                current = ""
            chunks.append(paragraph[:cut].strip())
            paragraph = paragraph[cut:].strip()
        starts_section = paragraph.startswith("#")
        if current and (len(current) + 2 + len(paragraph) > limit or starts_section):
            chunks.append(current)
            current = ""
        current = f"{current}\n\n{paragraph}" if current else paragraph
    if current:
        chunks.append(current)
    return chunks


# Words too common to say what a question is about; BM25 would still let them outrank the topic.
STOPWORDS = frozenset(
    "a an and are as at be but by can could did do does for from had has have how i if in into is it its "
    "me my of on or our she so than that the their them then there these they this to was we were what "
    "when where which who whom why will with would you your about tell please much many after before under "
    "without".split()
)


# A spoken "version three" is the texts' "Version 3": whisper writes numbers either way.
NUMBERS = {word: str(n) for n, word in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())}
TENS = {word: 10 * n for n, word in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), 2)}


def digits(text: str) -> str:
    """Number words as digits, as the texts write them: "version two point one" is "version 2.1",
    "twenty two" is "22", and a code said letter then number ("F twenty two") is "F22"."""
    units = "|".join(list(NUMBERS)[1:10])
    text = re.sub(rf"\b({'|'.join(TENS)})(?:[ -]({units}))?\b",
                  lambda m: str(TENS[m.group(1).lower()] + (int(NUMBERS[m.group(2).lower()]) if m.group(2) else 0)),
                  text, flags=re.IGNORECASE)
    text = re.sub(r"\b(" + "|".join(NUMBERS) + r")\b", lambda m: NUMBERS[m.group(1).lower()], text,
                  flags=re.IGNORECASE)
    text = re.sub(r"\b([B-HJ-Zb-hj-z])[ -](\d{1,3})\b", r"\1\2", text)
    return re.sub(r"\b(\d+) point (\d+)\b", r"\1.\2", text)


def _acronyms(title_words: list[str]) -> set[str]:
    """What a title is called by its initials: "GPL" and "GGPL" for the GNU General Public License,
    "LGPL" for the Lesser one, "GFDL", "MPL"; three letters at least, so no common word is one."""
    initials = "".join(word[0] for word in title_words if not word.isdigit())
    return {a for a in (initials, initials[1:] if title_words[0] == "gnu" else "") if len(a) >= 3}


def fts_query(text: str, also: Sequence[str] = ()) -> str:
    """A question as an FTS5 query: its content words quoted (no syntax errors), any may match;
    number words also as digits, neighbouring content words also joined, and the names `also`
    (`KnowledgeBase.searched_for`)."""
    said = re.findall(r"\w+", text.lower())
    words = [w for w in dict.fromkeys(said + re.findall(r"\w+", digits(text.lower()))) if len(w) > 1 or w.isdigit()]
    content = [w for w in words if w not in STOPWORDS] or words
    return " OR ".join(f'"{w}"' for w in [*content, *joined_words(text), *also])


def title_words(title: str) -> list[str]:
    """A title's words as a question would write them: "GNU", but "General" for "GENERAL"."""
    return [w if not w.isupper() or len(w) <= 5 else w.capitalize() for w in re.findall(r"[A-Za-z][A-Za-z0-9]+", title)]


# Abbreviations notes use for words a question says: "Dr Castellane" is the doctor asked about.
ABBREVIATIONS = {"dr": "doctor", "min": "minute", "mins": "minutes", "hr": "hour", "hrs": "hours",
                 "approx": "approximately", "tel": "telephone"}


def telling_terms(text: str) -> set[str]:
    """Content words and numbers (number words as digits), abbreviations written out, with plural
    and verb endings and a final e taken off, so "tides" meets "tide", "services" meets "serviced"
    and "doctor" meets "Dr"."""
    said = (ABBREVIATIONS.get(w, w) for w in re.findall(r"\w+", digits(text.lower())))
    words = (w for w in said if (len(w) > 2 or w.isdigit()) and w not in STOPWORDS)
    return {re.sub(r"(?<=\w{4})e$", "", re.sub(r"(?<=\w{3})(ing|ed|(?<!s)s)$", "", w)) for w in words}


def asked_terms(question: str) -> set[str]:
    """A question's telling terms, and its neighbouring content words joined (`joined_words`)."""
    return telling_terms(question) | telling_terms(" ".join(joined_words(question)))


def joined_words(text: str) -> list[str]:
    """Each pair of neighbouring content words, joined: a name heard as the words it is made of
    ("quick wash") still meets the name (Quickwash)."""
    words = re.findall(r"[a-z]+", text.lower())
    return [a + b for a, b in zip(words, words[1:], strict=False) if a not in STOPWORDS and b not in STOPWORDS]


class KnowledgeBase:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(SCHEMA)
        # Read from the chunks on first use, and again after each index.
        self._found_names: dict[str, _Name] | None = None
        self._found_lower: frozenset[str] = frozenset()
        self._found_titles: dict[str, str] | None = None
        self._found_passages: int | None = None
        self._found_mender: Mender | None = None

    def close(self) -> None:
        self._db.close()

    def index(self, folder: str | Path, progress: Callable[[int, int, str], None] | None = None) -> IndexReport:
        """Bring the index up to date with the files under `folder`."""
        root = Path(folder).expanduser().resolve()
        if not root.is_dir():
            raise NotADirectoryError(f"{folder} is not a folder")
        files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES)
        report = IndexReport()
        with self._lock:
            known = {row[0]: row[1:] for row in self._db.execute("SELECT path, size, mtime, sha256 FROM files")}
            for number, path in enumerate(files, 1):
                if progress:
                    progress(number, len(files), str(path))
                stat = path.stat()
                key = str(path)
                old = known.pop(key, None)
                if old and (old[0], old[1]) == (stat.st_size, stat.st_mtime):
                    report.unchanged += 1
                    continue
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                if old and old[2] == digest:
                    report.unchanged += 1
                else:
                    self._db.execute("DELETE FROM chunks WHERE path = ?", (key,))
                    title, text = read_document(path)
                    pieces = chunk_text(text)
                    self._db.executemany("INSERT INTO chunks (path, title, text) VALUES (?, ?, ?)",
                                         [(key, title, piece) for piece in pieces])
                    report.chunks += len(pieces)
                    if old:
                        report.updated += 1
                    else:
                        report.added += 1
                self._db.execute("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?)",
                                 (key, stat.st_size, stat.st_mtime, digest))
            for gone in (p for p in known if Path(p).is_relative_to(root)):
                self._db.execute("DELETE FROM chunks WHERE path = ?", (gone,))
                self._db.execute("DELETE FROM files WHERE path = ?", (gone,))
                report.removed += 1
            self._db.commit()
            self._found_names = self._found_titles = self._found_passages = self._found_mender = None
        return report

    def vocabulary(self, limit: int = VOCABULARY_WORDS) -> list[str]:
        """The words whisper should expect: the documents' titles' words first (Apache, Mozilla:
        what a question names), then the names the texts use (GNU, Netscape), in the most documents
        first, then the most often. Measured: a defined term among the names ("Opaque", from the
        GFDL) once turned a spoken "Apache" into "Opaque" while the titles were not yet first; and
        on voices Parlour never uses, names alone (acronyms and sample names, without the titles'
        plain words) made whisper's word error worse than no words at all (docs/research.md)."""
        words = [w for title in self._sorted_titles() for w in title_words(title)
                 if len(w) > 2 and w.lower() not in STOPWORDS]
        names = self._names()
        ranked = sorted(names, key=lambda w: (-len(names[w].paths), -names[w].count, w))
        first: dict[str, str] = {}
        for word in words + ranked:
            first.setdefault(word.lower(), word)
        return list(first.values())[:limit]

    def _titles(self) -> dict[str, str]:
        """Each document's title by its path; read once per index, since every search asks."""
        with self._lock:
            if self._found_titles is None:
                self._found_titles = dict(self._db.execute("SELECT DISTINCT path, title FROM chunks"))
            return self._found_titles

    def _names(self) -> dict[str, _Name]:
        """Acronyms of up to five capitals, and words written capitalized inside sentences, that the
        texts never write in lower case (outside addresses such as gnu.org); read once per index."""
        with self._lock:
            if self._found_names is not None:
                return self._found_names
            texts = self._db.execute("SELECT path, text FROM chunks").fetchall()
        lower: set[str] = set()
        names: dict[str, _Name] = {}
        for path, text in texts:
            text = POSTAL.sub(" ", ADDRESS.sub(" ", text))
            for match in re.finditer(r"\b[A-Za-z][A-Za-z0-9]+\b", text):
                word = match.group()
                if word[0].islower():
                    lower.add(word.lower())
                    continue
                acronym = word.isupper() and len(word) <= 5
                inside = re.search(r"[A-Za-z0-9,;:)] $", text[max(0, match.start() - 2):match.start()])
                plain = word.lower()
                if (len(word) > 2 and plain not in STOPWORDS and not {plain, plain[:-1]} & NOT_NAMES
                        and (acronym or (inside and not word.isupper()))):
                    name = names.setdefault(word, _Name())
                    name.paths.add(path)
                    name.count += 1
        found = {word: name for word, name in names.items() if word.lower() not in lower}
        with self._lock:
            self._found_names, self._found_lower = found, frozenset(lower)
        return found

    def mender(self) -> Mender:
        """What mends a transcript's misheard names into the texts' names (voice.knowledge.mending)."""
        if self._found_mender is None:
            titles = [title_words(title) for title in self._sorted_titles()]
            self._found_mender = Mender(list(self._names()), self._lower(), STOPWORDS, titles)
        return self._found_mender

    def searched_for(self, text: str) -> list[str]:
        """The names a search for `text` looks for as well: those its heard words sound like, even
        words the texts use (`Mender.searched_for`)."""
        return self.mender().searched_for(text)

    def _sorted_titles(self) -> list[str]:
        return sorted(set(self._titles().values()))

    def _lower(self) -> frozenset[str]:
        """The words the texts write in lower case (outside addresses): common words, not names."""
        self._names()
        return self._found_lower

    def named_documents(self, question: str) -> set[str] | None:
        """The documents a question names: those whose title it says word for word ("the GNU General
        Public License" is not the GNU Lesser one), the longest title first; else, of the documents
        that mention any of the knowledge base's names the question uses ("Apache", "Mozilla"), the
        ones that mention the most of them. None when it does neither."""
        asked = f" {' '.join(re.findall(r'[a-z0-9]+', question.lower()))} "
        said = []
        for path, title in self._titles().items():
            # A title's version is left out: "Mozilla Public License Version 2.0" is said "version two".
            words = re.findall(r"[a-z0-9]+", re.split(r"(?i)\bversion\b", title)[0].lower())
            if len(words) > 1 and (f" {' '.join(words)} " in asked
                                   or any(f" {a} " in asked for a in _acronyms(words))):
                said.append((len(words), path))
        if said:
            longest = max(length for length, _ in said)
            return self._of_version({path for length, path in said if length == longest}, question)
        names = {word.lower(): name for word, name in self._names().items()}
        used = [names[w] for w in dict.fromkeys(re.findall(r"\w+", question.lower())) if w in names]
        mentions = Counter(path for name in used for path in name.paths)
        if not mentions:
            return None
        most = max(mentions.values())
        return self._of_version({path for path, count in mentions.items() if count == most}, question)

    def _of_version(self, paths: set[str], question: str) -> set[str]:
        """Of `paths`, those whose opening states the version the question asks about ("version two
        point one": "Version 2.1"), if the question asks about one and some do."""
        asked = re.search(r"\bversion (\d+(?:\.\d+)?)", digits(question.lower()))
        if not asked:
            return paths
        pattern = re.compile(rf"\bversion {re.escape(asked.group(1))}(?!\d|\.[1-9])", re.IGNORECASE)
        stated = {path for path in paths if (opening := self._opening(path)) and pattern.search(opening.text[:500])}
        return stated or paths

    def bears_on(self, question: str) -> bool:
        """Whether the knowledge base has something for `question`: it names a document, or its best
        passage matches well (`BEARS_ON`). A question it has nothing for is answered without research."""
        also = self.searched_for(question)
        match = fts_query(question, also)
        if not match:
            return False
        if self.named_documents(" ".join([question, *also])):
            return True
        rows = self._ranked(match, 1, None)
        if not rows:
            return False
        # FTS5's IDF of a word in one passage of N; a collection of one or two passages has none.
        one_passage = max(0.0, math.log((self._passages() - 0.5) / 1.5))
        return -rows[0][3] >= BEARS_ON * one_passage

    def _passages(self) -> int:
        """How many passages the knowledge base holds; counted once per index, since every question asks."""
        with self._lock:
            if self._found_passages is None:
                self._found_passages = self._db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
            return self._found_passages

    def search(self, query: str, limit: int = 3) -> list[SearchResult]:
        """The best passages for `query` by BM25, from the documents it names if it names any
        (a question about the Apache license gets no MPL passages)."""
        also = self.searched_for(query)
        match = fts_query(query, also)
        if not match:
            return []
        named = self.named_documents(" ".join([query, *also]))
        # Twice the rows, since texts that several documents share (GFDL 1.2's definitions are 1.3's)
        # are read once.
        rows = (self._ranked(match, 2 * limit, named) if named else []) or self._ranked(match, 2 * limit, None)
        first_of_text: dict[str, tuple] = {}
        for row in rows:
            first_of_text.setdefault(row[2], row)
        rows = list(first_of_text.values())[:limit]
        # BM25 scores are negative, best first: results far weaker than the best one are noise that
        # would cost the model seconds of prefill, so they are left out.
        best = rows[0][3] if rows else 0.0
        found = [SearchResult(p, t, text, s) for p, t, text, s in rows if s <= best * RELEVANCE]
        if named and found:
            # The opening of the document asked about says what it is (its version, date, author),
            # which a question about it often wants and its body rarely repeats.
            opening = self._opening(found[0].path)
            if opening is not None:
                found = [opening, *(r for r in found if r.text != opening.text)][:limit]
        return found

    def _opening(self, path: str) -> SearchResult | None:
        with self._lock:
            row = self._db.execute("SELECT path, title, text FROM chunks WHERE path = ? ORDER BY rowid LIMIT 1",
                                   (path,)).fetchone()
        return SearchResult(row[0], row[1], row[2], 0.0, opening=True) if row else None

    def _ranked(self, match: str, limit: int, paths: set[str] | None) -> list[tuple]:
        within = f" AND path IN ({', '.join('?' * len(paths))})" if paths else ""
        with self._lock:
            return self._db.execute(
                f"SELECT path, title, text, bm25(chunks) AS score FROM chunks WHERE chunks MATCH ?{within} "
                "ORDER BY score LIMIT ?", (match, *sorted(paths or ()), limit),
            ).fetchall()

    def size(self) -> tuple[int, int]:
        with self._lock:
            files = self._db.execute("SELECT COUNT(*) FROM files").fetchone()[0]
            chunks = self._db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        return files, chunks


ANSWER_FROM_RESULTS = "Answer the question from these passages."
KEY_SENTENCES = "The sentences that bear most on the question:"
NO_RESULTS = "No results in the knowledge base."


def heading(number: int, result: SearchResult) -> str:
    """A passage's heading as the model reads it: its number, title and file name."""
    return f"[{number}] {result.title}{f' ({Path(result.path).name})' if result.path else ''}"


def format_results(results: list[SearchResult], key_sentences: str = "") -> str:
    """The search tool's result as the model reads it: the passages, numbered, then the
    `key_sentences` if any (those that bear most on the question, so that the small models read the
    fact next to the question rather than its neighbour in a long passage)."""
    if not results:
        return NO_RESULTS
    passages = "\n\n".join(f"{heading(n, r)}\n{r.text}" for n, r in enumerate(results, 1))
    if key_sentences:
        passages += f"\n\n{KEY_SENTENCES}\n{key_sentences}"
    # Without this line the small models often repeat the call instead of answering (eval_model.py).
    return f"{passages}\n\n{ANSWER_FROM_RESULTS}"
