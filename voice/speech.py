"""Speech in the service: the push-to-talk input buffer, sentence-by-sentence replies, truncation.

A spoken reply streams its transcript as tokens arrive, groups the tokens into sentences, and has
Piper speak each sentence as soon as it is complete, so the first audio leaves after the first
sentence rather than after the whole reply. What was sent is kept as a timeline of sentences with
their audio offsets, so `conversation.item.truncate` can trim the stored reply to what the listener
actually heard.
"""

from __future__ import annotations

import base64
import binascii
import re

from models.audio import AudioError

BYTES_PER_MS = 48  # PCM16 mono at 24 kHz
_SENTENCE_END = re.compile(r"([.!?…]+[\"')\]]*)(\s+)|\n+")
_CLAUSE_END = re.compile(r"([,;:])(\s+)")


class AudioBuffer:
    """The input audio of the turn being spoken, bounded by `max_seconds`."""

    def __init__(self, max_seconds: int):
        self.limit = max_seconds * 1000 * BYTES_PER_MS
        self.max_seconds = max_seconds
        self.data = bytearray()

    def append(self, encoded: object) -> bytes:
        """Add base64 PCM16 audio; returns the decoded bytes."""
        if not isinstance(encoded, str):
            raise AudioError("'audio' must be a base64 string of PCM16 mono 24 kHz audio")
        try:
            chunk = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise AudioError("'audio' is not valid base64") from None
        if len(chunk) % 2:
            raise AudioError(f"PCM16 audio must have an even number of bytes, this append has {len(chunk)}")
        if len(self.data) + len(chunk) > self.limit:
            raise AudioError(f"the input audio would pass the limit of {self.max_seconds} seconds; commit or clear it")
        self.data += chunk
        return chunk

    def keep_last(self, milliseconds: int) -> int:
        """Drop all but the last `milliseconds` of audio (silence before speech); returns the ms dropped."""
        drop = max(0, len(self.data) - milliseconds * BYTES_PER_MS)
        del self.data[:drop]
        return drop // BYTES_PER_MS

    def take(self) -> bytes:
        data, self.data = bytes(self.data), bytearray()
        return data

    def clear(self) -> None:
        self.data = bytearray()


class Sentences:
    """Feed reply text as it streams; get back each sentence once it is complete.

    The first piece may end at a clause instead (a comma, colon or semicolon after at least
    `first_clause_words` words): the listener hears the reply begin while its first long
    sentence is still being written.
    """

    def __init__(self, first_clause_words: int = 6) -> None:
        self.pending = ""
        self.first_clause_words = first_clause_words
        self.started = False

    def feed(self, text: str) -> list[str]:
        self.pending += text
        done: list[str] = []
        while True:
            match = _SENTENCE_END.search(self.pending)
            if not self.started and self.first_clause_words:
                # The first clause end with enough words before it (a list's first commas come early).
                clause = next((c for c in _CLAUSE_END.finditer(self.pending)
                               if len(self.pending[: c.start()].split()) >= self.first_clause_words), None)
                if clause and (not match or clause.start() < match.start()):
                    match = clause
            if not match:
                return done
            sentence = self.pending[: match.end(1) if match.group(1) else match.start()].strip()
            self.pending = self.pending[match.end():]
            if re.search(r"\w", sentence):
                done.append(sentence)
                self.started = True

    def flush(self) -> str:
        rest, self.pending = self.pending.strip(), ""
        return rest if re.search(r"\w", rest) else ""


def heard_text(timeline: list[list], audio_end_ms: int) -> str:
    """What a listener heard of a reply when playback stopped at `audio_end_ms`.

    `timeline` holds [sentence, start_ms, end_ms] for each spoken sentence; a sentence cut off
    midway keeps the share of its words that was played.
    """
    heard = []
    for sentence, start, end in timeline:
        if audio_end_ms >= end:
            heard.append(sentence)
        elif audio_end_ms > start:
            words = sentence.split()
            share = (audio_end_ms - start) / max(1, end - start)
            kept = words[: int(len(words) * share)]
            if kept:
                heard.append(" ".join(kept) + "…")
            break
        else:
            break
    return " ".join(heard)


def audio_delta(chunk: bytes) -> str:
    return base64.b64encode(chunk).decode("ascii")
