"""The speaker of a streaming reply: each sentence is spoken by Piper as soon as it is complete.

`Speaker` is fed the reply's text as the model writes it. Synthesis runs in a task beside the
model, so one sentence is synthesized while the next is written. The first piece is a phrase
(`voice.text.sentences.Sentences`), and when the listener's audio is about to run out before the
next sentence is written, the phrases written so far are spoken rather than leaving a silence.
Each sentence is reported `delivered` once all its audio is sent, with the timeline of
[sentence, start_ms, end_ms] that `conversation.item.truncate` reads: the turn engine stores it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable

from models.audio import BYTES_PER_MS
from models.tts import TextToSpeech
from voice.text.sentences import Sentences
from voice.turns.figures import TurnFigures

# Seconds of audio still to play when the speaker stops waiting for the sentence and speaks the
# phrases written so far: Piper takes up to about that for a phrase while the model decodes beside it.
SPEAK_AHEAD = 0.8


class Speaker:
    def __init__(self, tts: TextToSpeech, speed: float, cancel: threading.Event,
                 send_audio: Callable[[bytes], Awaitable[None]], figures: TurnFigures):
        self.tts, self.speed, self.cancel, self.send_audio = tts, speed, cancel, send_audio
        # Told each sentence once its audio is sent: the turn engine stores it (voice.turns.delivery).
        self.delivered: Callable[[str, list[list]], Awaitable[None]] | None = None
        self.figures = figures  # the speaker writes the turn's `first_audio_ms`
        self.timeline: list[list] = []  # [sentence, start_ms, end_ms] of the audio sent
        self._sentences = Sentences()
        self._queue: asyncio.Queue = asyncio.Queue()
        self._task: asyncio.Task | None = None  # started by the first text

    def feed(self, text: str) -> None:
        """More of the reply's text; each sentence it completes is queued to be spoken."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._speak())
        for sentence in self._sentences.feed(text):
            self._queue.put_nowait(sentence)

    async def finish(self, whole: bool = True) -> None:
        """The reply is written: speak what is left of it (unless not `whole`: it failed or was
        stopped) and wait until the last audio is sent."""
        if self._task is None:
            return  # nothing was said
        if whole and (rest := self._sentences.flush()):
            self._queue.put_nowait(rest)
        self._queue.put_nowait(None)
        await self._task

    async def _next_piece(self, playing_since: float | None, sent_ms: int) -> str | None:
        """The next sentence; or, when the listener's audio is about to run out before it is
        written, the phrases written so far."""
        while self._queue.empty() and playing_since is not None and not self.cancel.is_set():
            left = playing_since + sent_ms / 1000 - SPEAK_AHEAD - time.perf_counter()
            if left <= 0 and (phrase := self._sentences.phrase()):
                return phrase
            try:
                return await asyncio.wait_for(self._queue.get(), max(left, 0.05))
            except TimeoutError:
                pass
        return await self._queue.get()

    async def _speak(self) -> None:
        sent_ms, playing_since = 0, None
        while (sentence := await self._next_piece(playing_since, sent_ms)) is not None:
            if self.cancel.is_set():
                continue
            chunks = await asyncio.to_thread(lambda: list(self.tts.synthesize(sentence, speed=self.speed)))
            start = sent_ms
            for chunk in chunks:
                if self.cancel.is_set():
                    break
                if self.figures.first_audio_ms is None:
                    self.figures.first_audio_ms = self.figures.since_start()
                playing_since = playing_since or time.perf_counter()
                await self.send_audio(chunk)
                sent_ms += len(chunk) // BYTES_PER_MS
            self.timeline.append([sentence, start, sent_ms])
            if not self.cancel.is_set() and self.delivered is not None:  # its audio is all sent
                await self.delivered(sentence, self.timeline)
