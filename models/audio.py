"""Audio plumbing shared by the engines and the service: PCM16 bytes, float arrays, WAV files, resampling.

Samples in memory are mono float32 in [-1, 1]. On the wire and in files they are PCM16 little-endian.
Resampling uses soxr (a real band-limited resampler): Piper's 22,050 Hz becomes 24 kHz for clients,
and clients' 24 kHz becomes whisper's 16 kHz.
"""

from __future__ import annotations

import wave
from http import HTTPStatus
from pathlib import Path

import numpy as np
import soxr

from fitting.errors import ParlourError

# The audio Parlour speaks and hears on the wire (the Realtime protocol's audio/pcm): PCM16 mono.
RATE = 24_000
BYTES_PER_MS = RATE * 2 // 1000  # 48


class AudioError(ParlourError, ValueError):
    """Audio that cannot be used as given; the message says what is wrong in one line."""

    code, status = "invalid_audio", HTTPStatus.BAD_REQUEST


def pcm16_to_float(data: bytes) -> np.ndarray:
    if len(data) % 2:
        raise AudioError(f"PCM16 audio must have an even number of bytes, got {len(data)}")
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


def float_to_pcm16(samples: np.ndarray) -> bytes:
    clipped = np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0)
    return (clipped * 32767.0).round().astype("<i2").tobytes()


def resample(samples: np.ndarray, from_rate: int, to_rate: int) -> np.ndarray:
    samples = np.asarray(samples, dtype=np.float32)
    if from_rate == to_rate or samples.size == 0:
        return samples
    return soxr.resample(samples, from_rate, to_rate, quality="HQ").astype(np.float32)


def as_samples(audio: bytes | np.ndarray) -> np.ndarray:
    """PCM16 bytes or a float/int array as mono float32 samples."""
    if isinstance(audio, (bytes, bytearray, memoryview)):
        return pcm16_to_float(bytes(audio))
    array = np.asarray(audio)
    if array.ndim == 2:  # (frames, channels)
        array = array.mean(axis=1)
    if array.ndim != 1:
        raise AudioError(f"audio must be one channel of samples, got an array of shape {array.shape}")
    if np.issubdtype(array.dtype, np.integer):
        return array.astype(np.float32) / 32768.0
    return array.astype(np.float32)


_SAMPLE_TYPES = {1: ("u1", 128.0, 128.0), 2: ("<i2", 0.0, 32768.0), 4: ("<i4", 0.0, 2147483648.0)}


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """A WAV file's samples, mixed down to mono float32, and its sample rate."""
    try:
        with wave.open(str(path), "rb") as wav:
            width, channels, rate = wav.getsampwidth(), wav.getnchannels(), wav.getframerate()
            frames = wav.readframes(wav.getnframes())
    except FileNotFoundError:
        raise AudioError(f"{path}: no such file") from None
    except (wave.Error, EOFError) as error:
        raise AudioError(f"{path} is not a PCM WAV file ({error})") from None
    if width not in _SAMPLE_TYPES:
        raise AudioError(f"{path}: {8 * width}-bit samples are not supported; use 8, 16 or 32-bit PCM")
    dtype, offset, scale = _SAMPLE_TYPES[width]
    usable = len(frames) - len(frames) % (width * channels)
    samples = (np.frombuffer(frames[:usable], dtype=dtype).astype(np.float32) - offset) / scale
    if channels > 1:
        samples = samples.reshape(-1, channels).mean(axis=1)
    return samples, rate


def write_wav(path: str | Path, pcm16: bytes, rate: int) -> None:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(pcm16)
