"""A spoken question: transcribed, stored and announced before any reply begins.

`Transcription.draft` runs whisper on the audio so far while the key is held, and says whether the
draft ends in silence (settled: the turn engine may prefill it ahead, voice.turns.preemption).
`commit` runs whisper on the committed buffer (or takes the draft, when the draft is the whole
question; or the draft's text, when whisper heard the same words again), stores the
user item, sends `input_audio_buffer.committed`, the item and its transcript, and returns the
turn's figures with its clock started at the commit: first audio is timed from there.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from models.audio import BYTES_PER_MS, RATE
from models.stt import SpeechToText, Transcript
from voice.realtime import events
from voice.realtime.client_events import BadEvent
from voice.realtime.effects import Draft
from voice.realtime.items import Items
from voice.text.same_words import same_words
from voice.turns.figures import TurnFigures, ms

DRAFT_END_CHECK = 300  # ms of a draft's end that must be silent, so it did not stop mid-word


class Transcription:
    def __init__(self, stt: SpeechToText, transcribe: Callable[[bytes], Transcript], items: Items):
        """`transcribe` is the service's whisper call (with its vocabulary); `stt` checks for speech."""
        self.stt, self.transcribe, self.items = stt, transcribe, items

    async def commit(self, audio: bytes, item_id: str, draft: Draft | None = None) -> TurnFigures:
        """Transcribe, store and announce the question; `BadEvent` if no speech was heard."""
        committed_at = time.perf_counter()
        transcript = await asyncio.to_thread(self.from_draft, audio, draft)
        used_draft = transcript is not None
        if transcript is None:
            transcript = await asyncio.to_thread(self.transcribe, audio)
            if draft is not None and same_words(draft.text, transcript.text):
                # The draft's own text, which a prefill ahead of the commit read: the same words.
                transcript = Transcript(draft.text, transcript.seconds, transcript.audio_seconds)
        if not transcript.text:
            raise BadEvent(f"no speech was heard in {transcript.audio_seconds:.1f} s of audio", "no_speech")
        stored, previous = await self.items.store_item({"role": "user", "content": transcript.text}, item_id)
        await self.items.send(events.event("input_audio_buffer.committed", previous_item_id=previous,
                                           item_id=item_id))
        await self.items.announce(stored, previous, audio=True)
        await self.items.send(events.event(
            "conversation.item.input_audio_transcription.completed", item_id=item_id, content_index=0,
            transcript=transcript.text, usage={"type": "duration", "seconds": round(transcript.audio_seconds, 3)},
        ))
        stt_s = time.perf_counter() - committed_at if used_draft else transcript.seconds
        return TurnFigures(started=committed_at, stt_draft=used_draft, stt_ms=ms(stt_s))

    async def draft(self, audio: bytes, earlier: Draft | None = None) -> Draft | None:
        """What whisper hears in the audio so far, while the key is still held; None if nothing.
        A draft whose own last moments are silent is `settled`: probably the whole question. After
        a settled `earlier` draft, silence is only checked for, leaving the CPU to the prefill."""
        if earlier is not None and earlier.settled and await asyncio.to_thread(self._silent_from, audio,
                                                                                earlier.covered):
            return Draft(earlier.text, len(audio), True)
        text = (await asyncio.to_thread(self.transcribe, audio)).text
        if not text:
            return None
        return Draft(text, len(audio), await asyncio.to_thread(self._silent_from, audio, len(audio)))

    def _silent_from(self, audio: bytes, position: int) -> bool:
        """Whether the audio from `DRAFT_END_CHECK` before `position` on holds no speech."""
        return not self.stt.has_speech(audio[max(0, position - DRAFT_END_CHECK * BYTES_PER_MS):], RATE)

    def from_draft(self, audio: bytes, draft: Draft | None) -> Transcript | None:
        """The draft as the transcript, if the audio after it and its own last moments are silent."""
        if draft is None or not draft.text or draft.covered > len(audio):
            return None
        started = time.perf_counter()
        if not self._silent_from(audio, draft.covered):
            return None  # speech after the draft, or the draft ended mid-word
        return Transcript(draft.text, time.perf_counter() - started, len(audio) / (1000 * BYTES_PER_MS))
