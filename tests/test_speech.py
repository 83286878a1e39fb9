"""Piper and whisper together: what one says, the other hears."""

from __future__ import annotations

import re
import struct
import wave

import jiwer
import numpy as np
import pytest

from models.audio import AudioError, float_to_pcm16, pcm16_to_float, read_wav, resample, write_wav
from voice.config import Config

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Please remind me to call my sister tomorrow morning.",
    "What is the weather going to be like this weekend?",
]


def words(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split())


@pytest.mark.parametrize("sentence", SENTENCES)
def test_whisper_hears_what_piper_says(tts, stt, sentence):
    pcm = b"".join(tts.synthesize(sentence))
    transcript = stt.transcribe(pcm, sample_rate=24_000)
    assert transcript.audio_seconds > 1.0
    assert jiwer.wer(words(sentence), words(transcript.text)) <= 0.10, transcript.text


def test_short_speech_is_encoded_in_a_fifteen_second_window_and_long_speech_in_thirty(tts, stt, monkeypatch):
    from faster_whisper import WhisperModel

    windows = []
    encode = WhisperModel.encode
    monkeypatch.setattr(WhisperModel, "encode", lambda model, features: windows.append(features.shape[-1])
                        or encode(model, features))
    beam = Config().stt_beam_size  # as the service hears a question (Piper's voice varies from run to run)
    short = b"".join(tts.synthesize(SENTENCES[0]))
    assert jiwer.wer(words(SENTENCES[0]), words(stt.transcribe(short, 24_000, beam_size=beam).text)) <= 0.10
    assert windows == [1500]
    long = " ".join([*SENTENCES, SENTENCES[0]])  # about 11 s of speech
    heard = stt.transcribe(b"".join(tts.synthesize(long)), 24_000, beam_size=beam).text
    assert jiwer.wer(words(long), words(heard)) <= 0.10, heard
    assert windows[1:] == [3000]


def test_synthesis_is_resampled_to_the_requested_rate(tts):
    assert tts.native_rate == 22_050
    chunks = list(tts.synthesize("Resampling keeps the duration.", rate=24_000))
    seconds = sum(map(len, chunks)) / 2 / 24_000
    assert 1.0 < seconds < 4.0
    assert np.abs(pcm16_to_float(b"".join(chunks))).max() > 0.1  # real speech, not silence


def test_resampling_is_band_limited_not_sample_dropping():
    rate = 22_050
    t = np.arange(rate) / rate
    tone = 0.5 * np.sin(2 * np.pi * 1_000 * t).astype(np.float32)
    out = resample(tone, rate, 24_000)
    assert out.size == 24_000
    spectrum = np.abs(np.fft.rfft(out * np.hanning(out.size)))
    assert np.argmax(spectrum) == 1_000  # 1 Hz bins: the tone stays at 1 kHz
    assert spectrum[1_200:].max() < 1e-3 * spectrum.max()  # and nothing else appears


def test_synthesis_streams_sentence_by_sentence(tts):
    chunks = list(tts.synthesize("First sentence here. And a second one follows it."))
    assert len(chunks) > 2
    assert all(len(chunk) % 2 == 0 for chunk in chunks)


def test_speed_changes_duration(tts):
    normal = sum(map(len, tts.synthesize("Speaking a little faster now.")))
    fast = sum(map(len, tts.synthesize("Speaking a little faster now.", speed=1.5)))
    assert fast < normal * 0.85


def test_whisper_takes_any_rate_and_float_arrays(speech, stt, tmp_path):
    # A rendering whisper hears exactly (Piper samples noise), brought to 48 kHz.
    pcm = float_to_pcm16(resample(pcm16_to_float(speech("Open the kitchen window.")), 24_000, 48_000))
    path = tmp_path / "stereo48k.wav"
    mono = np.frombuffer(pcm, dtype="<i2")
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(2)
        wav.setsampwidth(2)
        wav.setframerate(48_000)
        wav.writeframes(np.repeat(mono, 2).tobytes())
    samples, rate = read_wav(path)
    assert rate == 48_000
    assert words(stt.transcribe(samples, sample_rate=rate).text) == "open the kitchen window"


def test_silence_and_empty_audio_give_empty_transcripts(stt):
    assert stt.transcribe(b"", sample_rate=24_000).text == ""
    assert stt.transcribe(bytes(48_000), sample_rate=24_000).text == ""
    assert stt.transcribe(np.zeros(0, dtype=np.float32), sample_rate=16_000).text == ""


def test_odd_byte_count_is_a_clear_error(stt):
    with pytest.raises(AudioError, match="even number of bytes"):
        stt.transcribe(b"\x00\x01\x02", sample_rate=24_000)


def test_non_audio_file_is_a_clear_error(tmp_path):
    path = tmp_path / "notes.wav"
    path.write_text("these are not samples")
    with pytest.raises(AudioError, match="not a PCM WAV file"):
        read_wav(path)


def test_wrong_wav_format_is_a_clear_error(tmp_path):
    # A 24-bit PCM WAV: a real WAV, but not a sample width Parlour reads.
    path = tmp_path / "24bit.wav"
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(3)
        wav.setframerate(16_000)
        wav.writeframes(bytes(3 * 1600))
    with pytest.raises(AudioError, match="24-bit"):
        read_wav(path)
    # An IEEE-float WAV header (format 3), which the wave module refuses.
    float_path = tmp_path / "float.wav"
    data = struct.pack("<4f", 0.0, 0.1, -0.1, 0.0)
    header = b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " + struct.pack(
        "<IHHIIHH", 16, 3, 1, 16_000, 64_000, 4, 32) + b"data" + struct.pack("<I", len(data))
    float_path.write_bytes(header + data)
    with pytest.raises(AudioError, match="not a PCM WAV file"):
        read_wav(float_path)


def test_zero_length_wav_gives_an_empty_transcript(stt, tmp_path):
    path = tmp_path / "empty.wav"
    write_wav(path, b"", 24_000)
    samples, rate = read_wav(path)
    assert samples.size == 0
    assert stt.transcribe(samples, sample_rate=rate).text == ""
