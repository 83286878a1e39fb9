"""Text-to-speech with Piper (ONNX on the CPU).

`TextToSpeech.synthesize` is a generator: Piper renders one sentence at a time, and each sentence is
resampled (soxr) from the voice's native rate, 22,050 Hz for the default voice, to the requested rate
and yielded as PCM16 chunks, so a caller can start playing the first sentence while the rest is made.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

from models.audio import RATE, float_to_pcm16, resample

OUTPUT_RATE = RATE
# 100 ms at 24 kHz, PCM16: small enough to start playback quickly, large enough to keep overhead low.
CHUNK_BYTES = 4_800


class TextToSpeech:
    """One loaded Piper voice; calls from several threads take turns, a sentence at a time."""

    def __init__(self, voice_path: Path, config_path: Path | None = None):
        from piper import PiperVoice

        self.path = Path(voice_path)
        self._voice = PiperVoice.load(str(self.path), config_path=str(config_path) if config_path else None)
        self.native_rate = self._voice.config.sample_rate
        self.name = self.path.name.removesuffix(".onnx")
        self._lock = threading.Lock()

    def synthesize(
        self, text: str, rate: int = OUTPUT_RATE, speed: float = 1.0, chunk_bytes: int = CHUNK_BYTES
    ) -> Iterator[bytes]:
        """PCM16 mono chunks of `text` spoken at `rate` Hz; `speed` > 1 talks faster."""
        from piper import SynthesisConfig

        if speed <= 0:
            raise ValueError(f"speed must be positive, got {speed}")
        config = SynthesisConfig(length_scale=1.0 / speed)
        sentences = iter(self._voice.synthesize(text, syn_config=config))
        while True:
            with self._lock:
                sentence = next(sentences, None)
            if sentence is None:
                return
            pcm = float_to_pcm16(resample(sentence.audio_float_array, self.native_rate, rate))
            for start in range(0, len(pcm), chunk_bytes):
                yield pcm[start : start + chunk_bytes]
