"""The session store's tables (voice.store.sessions): sessions, their messages, summaries and chat threads,
and the full-text index of what users said that keeps itself in step with the messages."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL DEFAULT '',
    instructions TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    removed TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS messages (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    item_id TEXT NOT NULL,
    role TEXT NOT NULL,
    content TEXT,
    tool_calls TEXT,
    tool_call_id TEXT,
    status TEXT NOT NULL DEFAULT 'complete',
    created REAL NOT NULL,
    figures TEXT,
    PRIMARY KEY (session_id, position)
);
CREATE TABLE IF NOT EXISTS summaries (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    start INTEGER NOT NULL,
    end INTEGER NOT NULL,
    text TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (session_id, start, end)
);
CREATE TABLE IF NOT EXISTS threads (
    owner TEXT NOT NULL,
    key TEXT NOT NULL,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    updated REAL NOT NULL,
    PRIMARY KEY (owner, key)
);
"""

# What the user said, searchable across sessions (voice.knowledge.recall). SQLite keeps it in step with the
# messages (the one writer of a message row stays `_insert`); a row's rowid links the two.
SAID = """
CREATE VIRTUAL TABLE said USING fts5(content, tokenize='porter unicode61');
CREATE TRIGGER said_added AFTER INSERT ON messages WHEN new.role = 'user' AND new.content IS NOT NULL
BEGIN INSERT INTO said (rowid, content) VALUES (new.rowid, new.content); END;
CREATE TRIGGER said_removed AFTER DELETE ON messages WHEN old.role = 'user'
BEGIN DELETE FROM said WHERE rowid = old.rowid; END;
CREATE TRIGGER said_changed AFTER UPDATE OF content ON messages WHEN new.role = 'user'
BEGIN DELETE FROM said WHERE rowid = old.rowid;
      INSERT INTO said (rowid, content) SELECT new.rowid, new.content WHERE new.content IS NOT NULL; END;
INSERT INTO said (rowid, content) SELECT rowid, content FROM messages WHERE role = 'user' AND content IS NOT NULL;
"""
