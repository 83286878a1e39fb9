"""The session store: one SQLite file (WAL mode) holding sessions, their messages and summaries.

Messages are kept in the OpenAI chat shape, tool exchanges included, each with its status
(`complete`, or `interrupted` with the text that was delivered), its time and the turn's figures.
A session's system prompt is its `instructions`; `transcript()` is what fitting replays: the
system prompt first, then every stored message, so message N sits at index N + 1.

A user's message is committed before any reply is generated and the reply sentence by sentence as
it is delivered (`write_reply`, status `in_progress` until it ends), so a crash or a disconnect never
loses what was said or heard; at start the service marks replies left `in_progress` `interrupted`.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path

from fitting import Summary
from fitting.errors import ParlourError
from voice.store.schema import SAID, SCHEMA


class ItemConflict(ParlourError, ValueError):
    """A client's item id that is taken, or a previous_item_id that is not in the session."""

    code, status = "invalid_value", HTTPStatus.CONFLICT


class UnknownSession(ParlourError, KeyError):
    """No session with that id, or not one the caller's key may see: the only "not found" of a
    session (a bug's KeyError is not one)."""

    code, status = "session_not_found", HTTPStatus.NOT_FOUND

    def __init__(self, session_id: str):
        super().__init__(session_id)
        self.session_id = session_id

    def __str__(self) -> str:  # KeyError's own would quote the id
        return f"no such session: {self.session_id}"


def owner_of(api_key: str | None) -> str:
    """The owner recorded for a key: a hash, so the store never holds the key itself."""
    return hashlib.sha256(api_key.encode()).hexdigest()[:32] if api_key else ""


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


@dataclass
class StoredMessage:
    position: int
    item_id: str
    message: dict  # the OpenAI chat message
    status: str
    created: float
    figures: dict = field(default_factory=dict)


@dataclass
class SessionInfo:
    id: str
    instructions: str
    created: float
    updated: float
    messages: int
    title: str  # the first question, shortened


class SessionStore:
    """Thread-safe access to the store file; every write is its own committed transaction."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            # FULL: each commit is on disk before it returns, so a power loss keeps every sentence
            # already stored (NORMAL would keep them through a process crash but not a power loss).
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(SCHEMA)
            if not self._db.execute("SELECT 1 FROM sqlite_master WHERE name = 'said'").fetchone():
                self._db.executescript(f"BEGIN; {SAID} COMMIT;")  # a store from before: its messages too

    def recover(self) -> int:
        """Mark replies a killed process left `in_progress` as `interrupted` (what was stored of them
        had been delivered); the service calls it once at start. Returns how many there were."""
        return self._write("UPDATE messages SET status = 'interrupted' WHERE status = 'in_progress'").rowcount

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _write(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        with self._lock:
            return self._db.execute(sql, args)

    def _read(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # Sessions ---------------------------------------------------------------------------------
    def create(self, instructions: str, owner: str = "", session_id: str | None = None) -> str:
        session_id = session_id or new_id("sess")
        now = time.time()
        self._write(
            "INSERT INTO sessions (id, owner, instructions, created, updated) VALUES (?, ?, ?, ?, ?)",
            (session_id, owner, instructions, now, now),
        )
        return session_id

    def _check(self, session_id: str, owner: str | None) -> sqlite3.Row:
        rows = self._read("SELECT * FROM sessions WHERE id = ?", (session_id,))
        if not rows or (owner is not None and rows[0]["owner"] != owner):
            raise UnknownSession(session_id)
        return rows[0]

    def exists(self, session_id: str, owner: str | None = None) -> bool:
        try:
            self._check(session_id, owner)
        except UnknownSession:
            return False
        return True

    def instructions(self, session_id: str) -> str:
        return self._check(session_id, None)["instructions"]

    def set_instructions(self, session_id: str, instructions: str) -> None:
        self._write("UPDATE sessions SET instructions = ?, updated = ? WHERE id = ?",
                    (instructions, time.time(), session_id))

    # Past this method, `list` in the class's annotations names it: they say builtins.list.
    def list(self, owner: str | None = None) -> list[SessionInfo]:
        """Sessions, newest activity first; with `owner`, only that owner's."""
        where, args = ("WHERE s.owner = ?", (owner,)) if owner is not None else ("", ())
        rows = self._read(
            f"""SELECT s.id, s.instructions, s.created, s.updated,
                       (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) AS count,
                       (SELECT content FROM messages m WHERE m.session_id = s.id AND m.role = 'user'
                        ORDER BY position LIMIT 1) AS first
                FROM sessions s {where} ORDER BY s.updated DESC""",
            args,
        )
        return [
            SessionInfo(r["id"], r["instructions"], r["created"], r["updated"], r["count"],
                        " ".join((r["first"] or "").split())[:60])
            for r in rows
        ]

    def delete(self, session_id: str, owner: str | None = None) -> None:
        self._check(session_id, owner)
        self._write("DELETE FROM sessions WHERE id = ?", (session_id,))

    # Messages ---------------------------------------------------------------------------------
    def append(self, session_id: str, message: dict, status: str = "complete", figures: dict | None = None,
               item_id: str | None = None) -> StoredMessage:
        with self._transaction():
            return self._insert(session_id, self._next_position(session_id), item_id or new_id("item"),
                                message, status, figures)

    def _next_position(self, session_id: str) -> int:
        (position,) = self._db.execute(
            "SELECT COALESCE(MAX(position) + 1, 0) FROM messages WHERE session_id = ?", (session_id,)).fetchone()
        return position

    def _insert(self, session_id: str, position: int, item_id: str, message: dict, status: str,
                figures: dict | None) -> StoredMessage:
        """The one INSERT of a message row; the caller holds the lock and the transaction."""
        now = time.time()
        tool_calls = json.dumps(message["tool_calls"]) if message.get("tool_calls") else None
        self._db.execute(
            """INSERT INTO messages (session_id, position, item_id, role, content, tool_calls,
               tool_call_id, status, created, figures) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            (session_id, position, item_id, message["role"], message.get("content"), tool_calls,
             message.get("tool_call_id"), status, now, json.dumps(figures) if figures else None),
        )
        self._db.execute("UPDATE sessions SET updated = ? WHERE id = ?", (now, session_id))
        return StoredMessage(position, item_id, message, status, now, figures or {})

    def write_reply(self, session_id: str, item_id: str, content: str, status: str,
                    figures: dict | None = None) -> None:
        """Create or bring up to date a streaming reply's row (voice.store.reply_row), in one transaction."""
        with self._transaction():
            found = self._db.execute("SELECT 1 FROM messages WHERE session_id = ? AND item_id = ?",
                                     (session_id, item_id)).fetchone()
            if found:
                self._db.execute(
                    "UPDATE messages SET content = ?, status = ?, figures = COALESCE(?, figures) "
                    "WHERE session_id = ? AND item_id = ?",
                    (content, status, json.dumps(figures) if figures is not None else None, session_id, item_id))
            else:
                self._insert(session_id, self._next_position(session_id), item_id,
                             {"role": "assistant", "content": content}, status, figures)

    def insert_before(self, session_id: str, item_id: str,
                      messages: builtins.list[dict]) -> builtins.list[StoredMessage]:
        """Store `messages` just ahead of the message `item_id` (at the end if it is not stored)."""
        with self._transaction():
            row = self._db.execute("SELECT position FROM messages WHERE session_id = ? AND item_id = ?",
                                   (session_id, item_id)).fetchone()
            at = row["position"] if row else self._next_position(session_id)
            self._shift(session_id, at, len(messages))
            return [self._insert(session_id, at + n, new_id("item"), m, "complete", None)
                    for n, m in enumerate(messages)]

    def add_item(self, session_id: str, message: dict, item_id: str | None = None,
                 after: str | None = None) -> tuple[StoredMessage, str | None]:
        """A client's item: under its own id if it gave one (a taken id is an `ItemConflict`), at the
        end, first (`after="root"`) or after the item `after`. Returns it and the id of the item
        before it. An item placed inside the conversation resets the fit state, whose indices moved."""
        with self._transaction():
            if item_id and self._db.execute("SELECT 1 FROM messages WHERE session_id = ? AND item_id = ?",
                                            (session_id, item_id)).fetchone():
                raise ItemConflict(f"an item with id {item_id} already exists in this session")
            end = self._next_position(session_id)
            if after is None:
                at = end
            elif after == "root":
                at = 0
            else:
                row = self._db.execute("SELECT position FROM messages WHERE session_id = ? AND item_id = ? "
                                       "AND status != 'deleted'", (session_id, after)).fetchone()
                if row is None:
                    raise ItemConflict(f"previous_item_id {after} is not an item of this session")
                at = row["position"] + 1
            if at < end:
                self._shift(session_id, at, 1)
                self._reset_fit(session_id)
            stored = self._insert(session_id, at, item_id or new_id("item"), message, "complete", None)
            before = self._db.execute("SELECT item_id FROM messages WHERE session_id = ? AND position < ? AND "
                                      "status != 'deleted' ORDER BY position DESC LIMIT 1", (session_id, at)).fetchone()
            return stored, before["item_id"] if before else None

    def delete_item(self, session_id: str, item_id: str) -> builtins.list[str]:
        """Take an item out of the conversation (a tool call takes its outputs with it); the rows stay,
        marked `deleted`, so an export still shows them. Returns the ids deleted; none if not found."""
        with self._transaction():
            row = self._db.execute("SELECT * FROM messages WHERE session_id = ? AND item_id = ? AND "
                                   "status != 'deleted'", (session_id, item_id)).fetchone()
            if row is None:
                return []
            ids = [item_id]
            for call in json.loads(row["tool_calls"] or "[]"):
                ids += [r["item_id"] for r in self._db.execute(
                    "SELECT item_id FROM messages WHERE session_id = ? AND tool_call_id = ? AND status != 'deleted'",
                    (session_id, call.get("id"))).fetchall()]
            self._db.executemany("UPDATE messages SET status = 'deleted' WHERE session_id = ? AND item_id = ?",
                                 [(session_id, i) for i in ids])
            self._reset_fit(session_id)
            return ids

    def _shift(self, session_id: str, at: int, count: int) -> None:
        # Two steps, so no moved row ever collides with another's (session, position) key.
        self._db.execute("UPDATE messages SET position = -position - 1 WHERE session_id = ? AND position >= ?",
                         (session_id, at))
        self._db.execute("UPDATE messages SET position = -position - 1 + ? WHERE session_id = ? AND position < 0",
                         (count, session_id))

    def _reset_fit(self, session_id: str) -> None:
        """The conversation changed in the middle: removals and summaries by index no longer apply."""
        self._db.execute("UPDATE sessions SET removed = '[]' WHERE id = ?", (session_id,))
        self._db.execute("DELETE FROM summaries WHERE session_id = ?", (session_id,))

    @contextmanager
    def _transaction(self):
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def update(self, session_id: str, item_id: str, content: str, status: str) -> None:
        """Change a stored message's text and status (a reply cut short to what was heard)."""
        self._write("UPDATE messages SET content = ?, status = ? WHERE session_id = ? AND item_id = ?",
                    (content, status, session_id, item_id))

    def messages(self, session_id: str, deleted: bool = False) -> builtins.list[StoredMessage]:
        """The session's messages in order; `deleted=True` includes those taken out of it."""
        rows = self._read("SELECT * FROM messages WHERE session_id = ? AND (? OR status != 'deleted') "
                          "ORDER BY position", (session_id, deleted))
        return [_stored(row) for row in rows]

    def last_message(self, session_id: str) -> StoredMessage | None:
        """The session's last message (deleted ones left out), if it has any."""
        rows = self._read("SELECT * FROM messages WHERE session_id = ? AND status != 'deleted' "
                          "ORDER BY position DESC LIMIT 1", (session_id,))
        return _stored(rows[0]) if rows else None

    def message(self, session_id: str, item_id: str) -> StoredMessage | None:
        rows = self._read("SELECT * FROM messages WHERE session_id = ? AND item_id = ? AND status != 'deleted'",
                          (session_id, item_id))
        return _stored(rows[0]) if rows else None

    def transcript(self, session_id: str) -> builtins.list[dict]:
        """The fitting input: the system prompt, then every stored message in order, except a reply
        still being written (it is the answer the prompt is for)."""
        system = {"role": "system", "content": self.instructions(session_id)}
        return [system] + [stored.message for stored in self.messages(session_id) if stored.status != "in_progress"]

    # Fitting state ----------------------------------------------------------------------------
    def fit_state(self, session_id: str) -> tuple[builtins.list[int], Summary | None]:
        """Last turn's removals (transcript indices) and the newest stored summary."""
        removed = json.loads(self._check(session_id, None)["removed"])
        rows = self._read("SELECT start, end, text FROM summaries WHERE session_id = ? ORDER BY end DESC, "
                          "created DESC LIMIT 1", (session_id,))
        summary = Summary(rows[0]["start"], rows[0]["end"], rows[0]["text"]) if rows else None
        return removed, summary

    def save_removed(self, session_id: str, removed: builtins.list[int]) -> None:
        self._write("UPDATE sessions SET removed = ? WHERE id = ?", (json.dumps(removed), session_id))

    def save_summary(self, session_id: str, summary: Summary) -> None:
        self._write("INSERT OR REPLACE INTO summaries (session_id, start, end, text, created) VALUES (?, ?, ?, ?, ?)",
                    (session_id, summary.start, summary.end, summary.text, time.time()))

    def summaries(self, session_id: str) -> builtins.list[Summary]:
        rows = self._read("SELECT start, end, text FROM summaries WHERE session_id = ? ORDER BY end", (session_id,))
        return [Summary(r["start"], r["end"], r["text"]) for r in rows]

    # What the user said in other sessions (voice.knowledge.recall) -----------------------------------------
    def said_elsewhere(self, session_id: str, match: str, limit: int) -> builtins.list[tuple[str, float, float]]:
        """The user's messages matching the FTS5 query `match`, best first by BM25, from the other
        sessions of the owner of `session_id` (never another owner's): (text, time said, score). A message
        answered by a call to a client's function was a command (Home Assistant's "turn on the
        light"), not something the user told: it is left out."""
        return [(r["content"], r["created"], r["score"]) for r in self._read(
            """SELECT m.content, m.created, bm25(said) AS score FROM said
               JOIN messages m ON m.rowid = said.rowid JOIN sessions s ON s.id = m.session_id
               WHERE said MATCH ? AND m.session_id != ? AND m.status != 'deleted'
                 AND s.owner = (SELECT owner FROM sessions WHERE id = ?)
                 AND NOT EXISTS (
                   SELECT 1 FROM messages a WHERE a.session_id = m.session_id AND a.position > m.position
                     AND a.role = 'assistant' AND a.tool_calls IS NOT NULL
                     AND a.tool_calls NOT LIKE '%"name": "search"%'
                     AND a.position < COALESCE((SELECT MIN(position) FROM messages u WHERE u.session_id = m.session_id
                                                AND u.role = 'user' AND u.position > m.position), a.position + 1))
               ORDER BY score LIMIT ?""", (match, session_id, session_id, limit))]

    # Threads: how a stateless chat client's conversations find their sessions (voice.chat.thread) --
    def thread(self, owner: str, key: str) -> str | None:
        rows = self._read("SELECT session_id FROM threads WHERE owner = ? AND key = ?", (owner, key))
        return rows[0]["session_id"] if rows else None

    def save_thread(self, owner: str, key: str, session_id: str, only: bool = False) -> None:
        """Let `key` lead to the session; with `only`, the session's other keys of the same kind
        (the part before the first ':') are forgotten."""
        with self._transaction():
            if only:
                kind = key.split(":", 1)[0] + ":"
                self._db.execute("DELETE FROM threads WHERE session_id = ? AND substr(key, 1, ?) = ?",
                           (session_id, len(kind), kind))
            self._db.execute("INSERT OR REPLACE INTO threads (owner, key, session_id, updated) VALUES (?, ?, ?, ?)",
                       (owner, key, session_id, time.time()))

    # Export and import ------------------------------------------------------------------------
    def import_messages(self, messages: builtins.list[dict], owner: str = "", default_instructions: str = "") -> str:
        """A new session from a JSON list of chat messages (a leading system message sets its instructions)."""
        instructions = default_instructions
        if messages and messages[0].get("role") == "system":
            instructions, messages = messages[0].get("content") or "", messages[1:]
        session_id = self.create(instructions, owner)
        for message in messages:
            clean = {k: message[k] for k in ("role", "content", "tool_calls", "tool_call_id") if k in message}
            self.append(session_id, clean)
        return session_id


def _stored(row: sqlite3.Row) -> StoredMessage:
    message: dict = {"role": row["role"], "content": row["content"]}
    if row["tool_calls"]:
        message["tool_calls"] = json.loads(row["tool_calls"])
    if row["tool_call_id"]:
        message["tool_call_id"] = row["tool_call_id"]
    return StoredMessage(row["position"], row["item_id"], message, row["status"], row["created"],
                         json.loads(row["figures"]) if row["figures"] else {})
