"""Recall, on a real store: what the user said in their other sessions reaches a question about it,
and a command neither is memory nor recalls it."""

from __future__ import annotations

from voice.knowledge.recall import commands
from voice.knowledge.research import Research
from voice.store.sessions import SessionStore


def test_commands_said_without_functions_are_not_memory_and_recall_nothing(tmp_path):
    """Home Assistant's commands said over Wyoming are stored as plain messages: each was recalled into
    the next command that shared its words (scripts/eval_precision.py)."""
    store = SessionStore(tmp_path / "sessions.sqlite3")
    said = store.create("")
    for text in ["Turn off the hallway light.", "Now switch it off.", "The hallway light flickers since Monday."]:
        store.append(said, {"role": "user", "content": text})
    asking = store.create("")
    research = Research("auto", None, store)
    assert research.for_question("Turn on the hallway light.", session_id=asking) == []  # a command recalls nothing
    found = research.for_question("What did I say about the hallway light?", session_id=asking)[1]["content"]
    assert "flickers" in found and "Turn off" not in found and "switch" not in found
    store.close()


def test_a_command_begins_with_a_verb_that_works_a_device():
    assert commands("Now switch it off.") and commands("Please lock the front door.")
    assert not commands("The plumber turns up on Thursdays.") and not commands("Remember my code is 4512.")
