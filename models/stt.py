"""Speech-to-text with faster-whisper (CTranslate2, int8 on the CPU).

`SpeechToText.transcribe` takes PCM16 bytes or a float array at any sample rate, resamples to the
16 kHz whisper expects and returns the text with how long it took. Silence and empty audio give an
empty transcript rather than an exception (whisper invents words on silence, so quiet input is never
decoded at all).
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
        self._model = WhisperModel(str(self.path), device="cpu", compute_type="int8", cpu_threads=threads)
        self._lock = threading.Lock()

    def transcribe(self, audio: bytes | np.ndarray, sample_rate: int = RATE, hotwords: str = "") -> Transcript:
        """`hotwords`: words the speaker is likely to say (a knowledge base's names), given to whisper
        as a prompt so that it hears them rather than the common words they sound like."""
        started = time.perf_counter()
        samples = resample(as_samples(audio), sample_rate, WHISPER_RATE)
        audio_seconds = samples.size / WHISPER_RATE
        if samples.size == 0 or float(np.max(np.abs(samples))) < SILENCE_PEAK:
            return Transcript("", time.perf_counter() - started, audio_seconds)
        with self._lock:
            segments, _info = self._model.transcribe(
                samples,
                language=self.language,
                beam_size=1,  # greedy: a third of beam-5's time on tiny.en, same words on clear speech
                vad_filter=True,
                condition_on_previous_text=False,
                without_timestamps=True,
                hotwords=hotwords or None,
            )
            text = " ".join(segment.text.strip() for segment in segments).strip()
        return Transcript(text, time.perf_counter() - started, audio_seconds)

    def has_speech(self, audio: bytes | np.ndarray, sample_rate: int = RATE) -> bool:
        """Whether the Silero VAD that filters whisper's input hears speech in `audio`."""
        from faster_whisper.vad import VadOptions, get_speech_timestamps

        samples = resample(as_samples(audio), sample_rate, WHISPER_RATE)
        if samples.size == 0 or float(np.max(np.abs(samples))) < SILENCE_PEAK:
            return False
        return bool(get_speech_timestamps(samples, VadOptions()))
