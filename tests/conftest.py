"""Shared fixtures: each real engine is loaded once per test session."""

from __future__ import annotations

import re
import warnings

import pytest

from harness.realtime import RunningServer
from harness.voices import PIPER, say
from models.llm import LanguageModel
from models.weights import DEFAULT_PROFILE, PROFILES, resolve
from voice.config import Config
from voice.engines import load_llm, load_stt, load_tts

# Who says the tests' spoken questions, in turn until whisper hears one (`speech`).
SPEAKERS = ("festival-slt-hts", "flite-slt", "flite-rms", "espeak-us", PIPER)


@pytest.fixture(scope="session")
def config() -> Config:
    # The defaults alone, so a developer's own config file or PARLOUR_* variables cannot leak in.
    return Config(threads=2)


@pytest.fixture(scope="session")
def stt(config):
    return load_stt(config)


@pytest.fixture(scope="session")
def tts(config):
    return load_tts(config)


@pytest.fixture(scope="session")
def llm(config):
    return load_llm(config)


@pytest.fixture(scope="session")
def speech(tts, stt):
    """PCM16 24 kHz speech for a sentence, said by a voice Parlour never uses (no microphone needed).

    Whisper tiny mishears a voice now and then ("Biscuit" as "Biscayne"), and a test about what
    follows a question must not fail on a mumbled one: the sentence is said by each voice of
    SPEAKERS in turn until whisper hears its words, as a person would have said them clearly.
    Parlour's own voice (Piper) comes last: whisper hearing it is no test of hearing.
    """
    cache: dict[tuple[str, bytes, str], bytes] = {}

    def words(text: str) -> list[str]:
        return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()

    def make(text: str, after: bytes = b"", hotwords: str = "") -> bytes:
        """`after`: audio this sentence follows in one buffer, `hotwords`: the server's (a knowledge
        base's names). Whisper hears a sentence differently after other words and with hotwords, so
        the voice is chosen by how the server will hear it."""
        key = (text, after, hotwords)
        if key not in cache:
            for name in SPEAKERS:
                cache[key] = say(name, text, tts, rate=24_000)
                heard = words(stt.transcribe(after + cache[key], sample_rate=24_000, hotwords=hotwords).text)
                if heard[len(heard) - len(words(text)):] == words(text):
                    break
            else:  # used all the same (numbers are heard as digits), but said in the test report
                warnings.warn(f"whisper heard none of {', '.join(SPEAKERS)} say {text!r} word for word", stacklevel=2)
        return cache[key]

    return make


@pytest.fixture
def make_server(tmp_path, llm, stt, tts):
    """Start real servers (settings as Config fields) on ephemeral ports, sharing one data folder."""
    servers: list[RunningServer] = []

    def make(model=None, **settings) -> RunningServer:
        """`model`: another language model than the session's (a remote one, say)."""
        # Greedy decoding, so a run's replies can be reproduced; a test may ask for sampling.
        defaults = {"reply_tokens": 64, "temperature": 0.0, "data_dir": str(tmp_path / "data")}
        config = Config(threads=2, **{**defaults, **settings})
        servers.append(RunningServer(config, model or llm, stt, tts))
        return servers[-1]

    yield make
    for server in servers:
        if server.running:
            server.stop()


@pytest.fixture
def server(make_server):
    return make_server()


@pytest.fixture(scope="session")
def tiny_llm():
    """The smollm2-135m profile: ChatML, a template that knows no tools."""
    return LanguageModel(resolve("llm", "smollm2-135m"), context=4096, threads=2)


@pytest.fixture(scope="session", params=sorted(PROFILES))
def profile_llm(request, llm, tiny_llm):
    """Each installed language model profile in turn (the default is the session's `llm`)."""
    profile = PROFILES[request.param]
    if not profile.installed():
        pytest.skip(f"{profile.name} is not installed")
    if profile.name == DEFAULT_PROFILE:
        return llm
    if profile.name == "smollm2-135m":
        return tiny_llm
    return LanguageModel(resolve("llm", profile.name), context=4096, threads=2)
