"""Realtime audio on the wire: the push-to-talk input buffer (base64 PCM16 in) and audio deltas out."""

from __future__ import annotations

import base64
import binascii

from models.audio import BYTES_PER_MS, AudioError


class AudioBuffer:
    """The input audio of the turn being spoken, bounded by `max_seconds`."""

    def __init__(self, max_seconds: int):
        self.limit = max_seconds * 1000 * BYTES_PER_MS
        self.max_seconds = max_seconds
        self.data = bytearray()

    def append(self, chunk: bytes) -> bytes:
        """Add PCM16 audio (decoded by `decode_audio`); returns it."""
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


def decode_audio(encoded: object) -> bytes:
    """A client's base64 audio, decoded (in the reader's worker thread, not on the event loop)."""
    if not isinstance(encoded, str):
        raise AudioError("'audio' must be a base64 string of PCM16 mono 24 kHz audio")
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise AudioError("'audio' is not valid base64") from None


def audio_delta(chunk: bytes) -> str:
    return base64.b64encode(chunk).decode("ascii")
