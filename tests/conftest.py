"""Shared fixtures: each real engine is loaded once per test session."""

from __future__ import annotations

import pytest

from voice.config import Config
from voice.engines import load_llm, load_stt, load_tts


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
