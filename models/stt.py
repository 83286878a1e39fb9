"""Speech-to-text with faster-whisper (CTranslate2, int8 on the CPU).

`SpeechToText.transcribe` takes PCM16 bytes or a float array at any sample rate, resamples to the
16 kHz whisper expects and returns the text with how long it took. Silence and empty audio give an
empty transcript rather than an exception (whisper invents words on silence, so quiet input is never
decoded at all).

A question of a few seconds is encoded in a 15-second window rather than whisper's 30
(`short_window`): the encoder's attention grows with the square of its window, so a draft takes
less than half the time, with the same words.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.audio import RATE, as_samples, resample

WHISPER_RATE = 16_000
# Peak level below which audio counts as silence (about -50 dBFS).
SILENCE_PEAK = 0.003
# Whisper's window (frames of 10 ms) for audio up to SHORT_AUDIO_S. Measured on tiny.en with 36
# spoken questions: a 15 s window hears them as well as 30 s (word error 0.120 against 0.124) in
# 0.18 s a draft against 0.44. A 10 s window was faster still (0.15 s) but repeated itself on 4 of
# 45 drafts cut mid-word with a knowledge base's hotwords ("Who is the harbor mass? Who is the
# harbor mass?"), 15 s on none of 133; windows under 10 s repeated for up to 17 s.
SHORT_WINDOW_FRAMES = 1500
SHORT_AUDIO_S = 9.0
SHORT_MAX_TOKENS = 100  # 9 s of speech is about 40 tokens
REPEATING_RATIO = 2.4  # faster-whisper's compression ratio over which text is a loop


@dataclass(frozen=True)
class Transcript:
    text: str
    seconds: float  # wall time spent transcribing
    audio_seconds: float  # length of the audio transcribed


class SpeechToText:
    """One loaded whisper model; calls from several threads take turns."""

    def __init__(self, model_dir: Path, threads: int = 0, language: str = "en"):
        from faster_whisper import WhisperModel

        self.path = Path(model_dir)
        self.language = language
        self._model = short_window(WhisperModel)(str(self.path), device="cpu", compute_type="int8",
                                                 cpu_threads=threads)
        self._lock = threading.Lock()

    def transcribe(self, audio: bytes | np.ndarray, sample_rate: int = RATE, hotwords: str = "",
                   beam_size: int = 1) -> Transcript:
        """`hotwords`: words the speaker is likely to say (a knowledge base's names), given to whisper
        as a prompt so that it hears them rather than the common words they sound like. `beam_size`:
        1 is greedy; more searches several hypotheses, at about that many times the decoder's time."""
        started = time.perf_counter()
        samples = resample(as_samples(audio), sample_rate, WHISPER_RATE)
        audio_seconds = samples.size / WHISPER_RATE
        if samples.size == 0 or float(np.max(np.abs(samples))) < SILENCE_PEAK:
            return Transcript("", time.perf_counter() - started, audio_seconds)
        with self._lock:
            text, repeated = self._decode(samples, hotwords, beam_size, short=audio_seconds <= SHORT_AUDIO_S)
            if repeated:  # whisper looped in the short window: heard again as whisper usually hears
                text, _ = self._decode(samples, hotwords, beam_size, short=False)
        return Transcript(text, time.perf_counter() - started, audio_seconds)

    def _decode(self, samples: np.ndarray, hotwords: str, beam_size: int, short: bool) -> tuple[str, bool]:
        """The text, and whether it loops. `short`: in the short window (audio of up to
        SHORT_AUDIO_S), at temperature 0 only and at most SHORT_MAX_TOKENS (a loop ends there, not
        at 448 tokens decoded again at five temperatures); otherwise faster-whisper's usual decode,
        which is never called a loop."""
        self._model.short = short
        bounded = {"temperature": 0.0, "max_new_tokens": SHORT_MAX_TOKENS} if short else {}
        segments, _info = self._model.transcribe(
            samples,
            language=self.language,
            beam_size=beam_size,
            vad_filter=True,
            condition_on_previous_text=False,
            without_timestamps=True,
            hotwords=hotwords or None,
            **bounded,
        )
        segments = list(segments)
        text = " ".join(segment.text.strip() for segment in segments).strip()
        return text, short and any(segment.compression_ratio > REPEATING_RATIO
                                   or len(segment.tokens) >= SHORT_MAX_TOKENS for segment in segments)

    def has_speech(self, audio: bytes | np.ndarray, sample_rate: int = RATE) -> bool:
        """Whether the Silero VAD that filters whisper's input hears speech in `audio`."""
        from faster_whisper.vad import VadOptions, get_speech_timestamps

        samples = resample(as_samples(audio), sample_rate, WHISPER_RATE)
        if samples.size == 0 or float(np.max(np.abs(samples))) < SILENCE_PEAK:
            return False
        return bool(get_speech_timestamps(samples, VadOptions()))


def short_window(whisper_model: type) -> type:
    """faster-whisper's WhisperModel, encoding in a SHORT_WINDOW_FRAMES window while `short` is set.

    faster-whisper pads every segment's log-mel features to 3,000 frames (30 s) before `encode`;
    with audio of at most SHORT_AUDIO_S all speech lies in the first SHORT_WINDOW_FRAMES. Only the
    encoder's input changes: the decoder reads a shorter encoding, as CTranslate2 allows.
    """

    class ShortWindow(whisper_model):
        short = False  # set for each call, holding the SpeechToText's lock

        def encode(self, features: np.ndarray):
            if self.short:
                features = np.ascontiguousarray(features[..., :SHORT_WINDOW_FRAMES])
            return super().encode(features)

    return ShortWindow
