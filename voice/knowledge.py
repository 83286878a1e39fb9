"""The local knowledge base: text, Markdown and HTML files chunked into SQLite FTS5, ranked by BM25.

`parlour index DIR` builds it; re-indexing reads only files whose size or modification time changed
(and re-chunks only those whose content hash changed), and forgets files that are gone. `search`
returns a few results of at most 4,000 characters each, the research tool's result size in the
decision record.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

SUFFIXES = {".txt", ".md", ".markdown", ".html", ".htm"}
CHUNK_CHARS = 2_000
RESULT_CHARS = 4_000
RELEVANCE = 0.5  # a result is kept when its score is at least half the best one's

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, size INTEGER, mtime REAL, sha256 TEXT);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks USING fts5(path UNINDEXED, title, text, tokenize='porter unicode61');
"""


@dataclass(frozen=True)
class SearchResult:
    path: str
    title: str
    text: str  # at most RESULT_CHARS characters
    score: float


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
    return (heading.group(1).strip() if heading else path.stem), raw.strip()


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
    "when where which who whom why will with would you your about tell please much many".split()
)


def fts_query(text: str) -> str:
    """A question as an FTS5 query: its content words quoted (no syntax errors), any may match."""
    words = [w for w in dict.fromkeys(re.findall(r"\w+", text.lower())) if len(w) > 1]
    content = [w for w in words if w not in STOPWORDS] or words
    return " OR ".join(f'"{w}"' for w in content)


class KnowledgeBase:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(SCHEMA)

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
        return report

    def search(self, query: str, limit: int = 3) -> list[SearchResult]:
        match = fts_query(query)
        if not match:
            return []
        with self._lock:
            rows = self._db.execute(
                "SELECT path, title, text, bm25(chunks) AS score FROM chunks WHERE chunks MATCH ? "
                "ORDER BY score LIMIT ?", (match, limit),
            ).fetchall()
        # BM25 scores are negative, best first: results far weaker than the best one are noise that
        # would cost the model seconds of prefill, so they are left out.
        best = rows[0][3] if rows else 0.0
        return [SearchResult(p, t, text[:RESULT_CHARS], s) for p, t, text, s in rows if s <= best * RELEVANCE]

    def size(self) -> tuple[int, int]:
        with self._lock:
            files = self._db.execute("SELECT COUNT(*) FROM files").fetchone()[0]
            chunks = self._db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        return files, chunks


ANSWER_FROM_RESULTS = "Answer the question from these passages."
NO_RESULTS = "No results in the knowledge base."


def format_results(results: list[SearchResult]) -> str:
    """The search tool's result as the model reads it."""
    if not results:
        return NO_RESULTS
    passages = "\n\n".join(f"[{n}] {r.title} ({Path(r.path).name})\n{r.text}" for n, r in enumerate(results, 1))
    # Without this line the small models often repeat the call instead of answering (eval_model.py).
    return f"{passages}\n\n{ANSWER_FROM_RESULTS}"
