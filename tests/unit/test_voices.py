"""harness/voices.py: each unseen voice says a sentence at a plausible length, its speed changes the
length, and its noise sits at the asked speech-to-noise ratio. No model is loaded; each clip takes
flite, festival or espeak-ng well under a second."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from harness import voices
from harness.voices import UNSEEN, Voice, speak

SENTENCE = "What does error code F twenty two mean on the boiler?"  # ten words
RATE = 16_000


def samples(pcm16: bytes) -> np.ndarray:
    return np.frombuffer(pcm16, dtype="<i2").astype(np.float64)


def seconds(pcm16: bytes, rate: int = RATE) -> float:
    return len(pcm16) / 2 / rate


def needs(voice: Voice) -> None:
    if not voice.available():
        pytest.skip(f"{voice.program} is not installed (Debian package {voice.package})")


@pytest.mark.parametrize("voice", UNSEEN, ids=lambda v: v.name)
def test_a_voice_says_a_sentence_at_a_plausible_length(voice: Voice) -> None:
    needs(voice)
    clip = speak(voice, SENTENCE)
    assert 1.5 <= seconds(clip) <= 9.0, f"{voice.name}: {seconds(clip):.2f} s for ten words"
    lead = samples(clip)[: int(0.19 * RATE)]
    assert not lead.any(), "the clip starts with 0.2 s of silence"
    assert np.max(np.abs(samples(clip))) > 8000, "the speech is at a hearable level"


@pytest.mark.parametrize("voice", UNSEEN, ids=lambda v: v.name)
def test_a_higher_speed_says_it_faster(voice: Voice) -> None:
    needs(voice)
    normal, fast = seconds(speak(voice, SENTENCE)), seconds(speak(voice, SENTENCE, speed=1.3))
    assert fast < 0.9 * normal, f"{voice.name}: {fast:.2f} s at 1.3 against {normal:.2f} s at 1.0"


@pytest.mark.parametrize("voice", UNSEEN, ids=lambda v: v.name)
def test_noise_is_mixed_at_the_asked_ratio(voice: Voice) -> None:
    needs(voice)
    clean = samples(speak(voice, SENTENCE))
    noisy = samples(speak(voice, SENTENCE, snr_db=10, seed=7))
    assert noisy.size == clean.size
    measured = 10 * np.log10(np.mean(clean**2) / np.mean((noisy - clean) ** 2))
    assert abs(measured - 10) < 0.5, f"{voice.name}: {measured:.2f} dB"


def test_the_seed_chooses_the_noise_and_the_rate_the_length() -> None:
    voice = voices.voice("espeak-us")
    needs(voice)
    first, again = speak(voice, SENTENCE, snr_db=5, seed=1), speak(voice, SENTENCE, snr_db=5, seed=1)
    assert first == again
    assert speak(voice, SENTENCE, snr_db=5, seed=2) != first
    assert seconds(speak(voice, SENTENCE, rate=24_000), 24_000) == pytest.approx(seconds(first), abs=0.02)


def test_a_missing_program_names_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda program: None)
    with pytest.raises(RuntimeError, match=r"text2wave.*festival"):
        speak(voices.voice("festival-kal"), SENTENCE)


def test_a_voice_flite_lacks_is_refused_not_replaced() -> None:
    needs(voices.voice("flite-slt"))
    with pytest.raises(RuntimeError, match="flite has no voice 'nobody'"):
        speak(Voice("flite-nobody", "flite", "nobody", "flite"), SENTENCE)
