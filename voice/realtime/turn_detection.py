"""Hands-free turns: the Silero VAD model that faster-whisper ships, over input audio as it arrives.

`SpeechDetector.feed(pcm)` takes PCM16 mono 24 kHz audio (an `input_audio_buffer.append`) and
returns what changed: `("started", ms)` when speech begins and `("stopped", ms)` once it has been
followed by `silence_duration_ms` of silence, in milliseconds of the audio fed so far. The
connection turns these into `input_audio_buffer.speech_started`/`speech_stopped`, commits the
buffer and asks for the response. Audio is resampled to the model's 16 kHz with soxr and judged in
its 32 ms windows; nothing is downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.audio import RATE, pcm16_to_float, resample

VAD_RATE = 16_000
WINDOW = 512  # samples at 16 kHz: 32 ms, the model's frame
WINDOW_MS = WINDOW * 1000 // VAD_RATE


@dataclass
class VadSettings:
    """`audio.input.turn_detection` of type `server_vad`, with the protocol's defaults."""

    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    create_response: bool = True
    interrupt_response: bool = True

    def as_event(self) -> dict:
        return {"type": "server_vad", "threshold": self.threshold, "prefix_padding_ms": self.prefix_padding_ms,
                "silence_duration_ms": self.silence_duration_ms, "create_response": self.create_response,
                "interrupt_response": self.interrupt_response}


class SpeechDetector:
    def __init__(self, settings: VadSettings):
        from faster_whisper.vad import get_vad_model  # loaded once per process, from the package's assets

        self.settings = settings
        self._model = get_vad_model()
        self._pending = np.zeros(0, dtype=np.float32)  # 16 kHz samples short of a whole window
        self._windows = 0  # windows judged so far
        self.speaking = False
        self._silent_windows = 0

    def feed(self, pcm: bytes) -> list[tuple[str, int]]:
        samples = np.concatenate([self._pending, resample(pcm16_to_float(pcm), RATE, VAD_RATE).astype(np.float32)])
        whole = len(samples) // WINDOW * WINDOW
        self._pending = samples[whole:]
        if not whole:
            return []
        probabilities = self._model(samples[:whole].copy()).reshape(-1)
        changes = []
        # Hysteresis as Silero's own segmenter does it: speech ends below threshold - 0.15.
        low = max(0.01, self.settings.threshold - 0.15)
        silent_needed = max(1, self.settings.silence_duration_ms // WINDOW_MS)
        for probability in probabilities:
            at = self._windows * WINDOW_MS
            self._windows += 1
            if not self.speaking and probability >= self.settings.threshold:
                self.speaking, self._silent_windows = True, 0
                changes.append(("started", at))
            elif self.speaking:
                self._silent_windows = self._silent_windows + 1 if probability < low else 0
                if self._silent_windows >= silent_needed:
                    self.speaking = False
                    changes.append(("stopped", at + WINDOW_MS))
        return changes
