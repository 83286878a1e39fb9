"""Synthetic speakers Parlour never uses, for evaluations and tests.

Parlour speaks with Piper (en_US-joe-medium); an evaluation that asks its questions in that same
voice flatters whisper, which then hears the kind of audio it is tested on. These voices come from
other synthesisers altogether (flite, festival, espeak-ng, all Debian packages), so that the
hearing is tested on speakers it has not been tuned to, at several speaking rates and with noise.

`speak` returns PCM16 little-endian mono: the clip trimmed to the speech with 0.2 s of silence
either side, its peak at -6 dBFS, then (if asked) mixed with seeded sox noise at an exact
speech-to-noise power ratio.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

import numpy as np

from models.audio import float_to_pcm16, pcm16_to_float, read_wav, resample

# flite's clunit and diphone voices; festival's diphone voice or its HTS voice (whose speed is the
# HTS engine's own -r, as HTS ignores festival's Duration_Stretch); espeak-ng's formant voices.
Engine = Literal["flite", "festival", "festival-hts", "espeak"]
Noise = Literal["pink", "brown", "white"]

# The program each engine runs and the Debian package that installs it.
PROGRAMS: dict[Engine, tuple[str, str]] = {
    "flite": ("flite", "flite"),
    "festival": ("text2wave", "festival"),
    "festival-hts": ("text2wave", "festival"),
    "espeak": ("espeak-ng", "espeak-ng"),
}
ESPEAK_WORDS_PER_MINUTE = 175  # espeak-ng's own default rate, the one speed=1.0 keeps
LEAD_S = 0.2  # silence kept before and after the speech, as a held key would catch it
PEAK = 10 ** (-6 / 20)  # the speech's peak: loud enough to hear, with room for the noise
SILENCE_DB = -40.0  # a 10 ms frame this far below the loudest one is silence
NOISE_SLACK_S = 10.0  # the seed picks where in this much extra noise the clip's noise starts
TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Voice:
    """A speaker: its name here, the engine, the engine's own name for the voice, and the Debian
    package that holds the voice (which may differ from the program's)."""

    name: str
    engine: Engine
    voice: str  # flite's -voice, festival's voice function, espeak-ng's -v
    package: str

    @property
    def program(self) -> str:
        return PROGRAMS[self.engine][0]

    def available(self) -> bool:
        """Whether the program is installed (a missing voice is found when it is asked to speak)."""
        return shutil.which(self.program) is not None


UNSEEN: tuple[Voice, ...] = (
    Voice("flite-slt", "flite", "slt", "flite"),
    Voice("flite-rms", "flite", "rms", "flite"),
    Voice("flite-awb", "flite", "awb", "flite"),
    Voice("flite-kal16", "flite", "kal16", "flite"),
    Voice("festival-slt-hts", "festival-hts", "voice_cmu_us_slt_arctic_hts", "festvox-us-slt-hts"),
    Voice("festival-kal", "festival", "voice_kal_diphone", "festvox-kallpc16k"),
    Voice("espeak-us", "espeak", "en-us", "espeak-ng"),
    Voice("espeak-us-m3", "espeak", "en-us+m3", "espeak-ng"),
    Voice("espeak-us-f2", "espeak", "en-us+f2", "espeak-ng"),
    Voice("espeak-scotland", "espeak", "en-gb-scotland", "espeak-ng"),
)
# flite's awb_time is left out: a limited-domain voice that can only tell the time.


def voice(name: str) -> Voice:
    """The voice of UNSEEN with this name."""
    for candidate in UNSEEN:
        if candidate.name == name:
            return candidate
    raise KeyError(f"no voice {name!r}; there are {', '.join(v.name for v in UNSEEN)}")


def speak(voice: Voice, text: str, rate: int = 16_000, speed: float = 1.0, snr_db: float | None = None,
          seed: int = 0, noise: Noise = "pink") -> bytes:
    """`text` said by `voice` as PCM16 little-endian mono at `rate` Hz.

    `speed` is the speaking rate against the voice's own: above 1 faster (a shorter clip), below 1
    slower. With `snr_db`, `noise` made by sox is mixed in so that the clean clip's mean power over
    the noise's is exactly that ratio, over the whole clip; `seed` picks which stretch of noise.
    """
    if speed <= 0:
        raise ValueError(f"speed must be above 0, got {speed}")
    samples, native = _render(voice, text, speed)
    clean = _trim(resample(samples, native, rate), rate)
    peak = float(np.max(np.abs(clean))) if clean.size else 0.0
    if peak == 0.0:
        raise RuntimeError(f"{voice.program} ({voice.name}) rendered only silence for {text!r}")
    clean *= PEAK / peak
    return float_to_pcm16(clean if snr_db is None else noisy(clean, rate, snr_db, seed, noise))


def noisy(clean: np.ndarray, rate: int, snr_db: float, seed: int = 0, noise: Noise = "pink") -> np.ndarray:
    """`clean` with `noise` made by sox mixed in, so that the clean clip's mean power over the
    noise's is exactly `snr_db`; `seed` picks which stretch of noise."""
    hiss = _noise(clean.size, rate, seed, noise)
    hiss *= np.sqrt(np.mean(clean.astype(np.float64) ** 2) / (np.mean(hiss**2) * 10 ** (snr_db / 10)))
    mixed = clean + hiss
    loudest = float(np.max(np.abs(mixed)))
    if loudest > 1.0:  # only at very low ratios; scaling both keeps the ratio
        mixed /= loudest
    return mixed.astype(np.float32)


def _render(voice: Voice, text: str, speed: float) -> tuple[np.ndarray, int]:
    """The engine's own output: float samples and their rate. Text goes in by file or stdin, never
    on the command line, so that a text starting with '-' is still text."""
    _require(voice.program, PROGRAMS[voice.engine][1])
    with tempfile.TemporaryDirectory(prefix="parlour-voice-") as folder:
        wav, words = Path(folder) / "out.wav", Path(folder) / "text.txt"
        words.write_text(text + "\n")
        if voice.engine == "flite":
            if voice.voice not in _flite_voices():  # flite falls back to its default voice silently
                raise RuntimeError(f"flite has no voice {voice.voice!r} (it has {', '.join(_flite_voices())}); "
                                   f"install the Debian package {voice.package}")
            command = ["flite", "-voice", voice.voice, "--setf", f"duration_stretch={1 / speed:.4f}",
                       "-f", str(words), "-o", str(wav)]
        elif voice.engine in ("festival", "festival-hts"):
            stretch = (f'(set! hts_engine_params (cons (list "-r" {speed:.4f}) hts_engine_params))'
                       if voice.engine == "festival-hts" else f"(Parameter.set 'Duration_Stretch {1 / speed:.4f})")
            command = ["text2wave", "-eval", f"({voice.voice})", "-eval", stretch, "-o", str(wav), str(words)]
        else:
            words_per_minute = max(80, round(ESPEAK_WORDS_PER_MINUTE * speed))
            command = ["espeak-ng", "-v", voice.voice, "-s", str(words_per_minute), "-w", str(wav), "-f", str(words)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        # festival reports an unknown voice function on stderr and exits 0 without writing the file.
        if result.returncode != 0 or "SIOD ERROR" in result.stderr or not wav.exists() or wav.stat().st_size <= 44:
            raise RuntimeError(f"{voice.program} could not speak as {voice.name} ({voice.voice}); is the Debian "
                               f"package {voice.package} installed? {result.stderr.strip()[-300:]}")
        return read_wav(wav)


def _trim(samples: np.ndarray, rate: int) -> np.ndarray:
    """The speech with exactly LEAD_S of silence either side: engines pad differently (flite hardly
    at all, festival more), and a person's clip starts a moment before they speak."""
    frame = rate // 100
    frames = samples[: samples.size - samples.size % frame].reshape(-1, frame)
    if frames.size == 0:
        return samples.copy()
    power = np.mean(frames.astype(np.float64) ** 2, axis=1)
    loud = np.flatnonzero(power > power.max() * 10 ** (SILENCE_DB / 10))
    speech = samples[loud[0] * frame: (loud[-1] + 1) * frame]
    pad = np.zeros(round(LEAD_S * rate), dtype=np.float32)
    return np.concatenate([pad, speech, pad]).astype(np.float32)


def _noise(count: int, rate: int, seed: int, colour: Noise) -> np.ndarray:
    """`count` samples of sox noise. sox has no seed, only -R (the same numbers every run), so the
    seed picks an offset into a longer stretch of it."""
    _require("sox", "sox")
    seconds = count / rate + NOISE_SLACK_S
    command = ["sox", "-R", "-n", "-r", str(rate), "-c", "1", "-b", "16", "-e", "signed-integer", "-L",
               "-t", "raw", "-", "synth", f"{seconds:.3f}", f"{colour}noise"]
    result = subprocess.run(command, capture_output=True, timeout=TIMEOUT_S, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"sox could not make {colour} noise: {result.stderr.decode(errors='replace').strip()}")
    stream = np.frombuffer(result.stdout, dtype="<i2").astype(np.float64) / 32768.0
    start = int(np.random.default_rng(seed).integers(0, stream.size - count + 1))
    return stream[start: start + count]


def _require(program: str, package: str) -> None:
    if shutil.which(program) is None:
        raise RuntimeError(f"{program} is not installed: install the Debian package {package} "
                           f"(apt-get install {package})")


@cache
def _flite_voices() -> tuple[str, ...]:
    """The voices built into this flite (`flite -lv`)."""
    listed = subprocess.run(["flite", "-lv"], capture_output=True, text=True, timeout=TIMEOUT_S, check=False).stdout
    return tuple(listed.split(":", 1)[-1].split())


PIPER = "piper-joe"  # Parlour's own voice (its TextToSpeech): one voice among the others, never the yardstick


def say(name: str, text: str, tts, rate: int = 16_000, speed: float = 1.0, snr_db: float | None = None,
        seed: int = 0) -> bytes:
    """`text` said by the voice called `name`: one of UNSEEN, or PIPER said by `tts` (Parlour's
    TextToSpeech) with the same noise the others get."""
    if name != PIPER:
        return speak(voice(name), text, rate=rate, speed=speed, snr_db=snr_db, seed=seed)
    audio = b"".join(tts.synthesize(text, rate=rate, speed=speed))
    if snr_db is None:
        return audio
    return float_to_pcm16(noisy(pcm16_to_float(audio), rate, snr_db, seed))
