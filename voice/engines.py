"""Builds the three engines from a `Config`: the one place that maps settings to model paths."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from models.engine import EngineSettings
from models.llm import LanguageModel
from models.remote_llm import RemoteLanguageModel
from models.stt import SpeechToText
from models.tts import TextToSpeech
from models.weights import SPEECH, llm_profile, require, resolve
from voice.config import Config


def stt_path(config: Config) -> Path:
    return resolve("stt", config.stt_model)


def llm_path(config: Config) -> Path:
    return resolve("llm", config.llm_model)


def tts_path(config: Config) -> Path:
    voice = resolve("tts", config.tts_voice)
    require(Path(f"{voice}.json"), "tts", "tts_voice")  # Piper needs the voice's config beside it
    return voice


def load_stt(config: Config) -> SpeechToText:
    return SpeechToText(stt_path(config), threads=config.threads)


def engine_settings(config: Config) -> EngineSettings:
    return EngineSettings.chosen(config.threads, config.llm_repack)


def load_llm(config: Config) -> LanguageModel | RemoteLanguageModel:
    """The model in this process, or with `llm_url` the server's, counted with the tokenizer of
    `llm_model` when one is given (loaded vocabulary-only) and estimated otherwise."""
    if not config.llm_url:
        return LanguageModel(llm_path(config), context=config.context, threads=config.threads,
                             kv_shift=config.kv_shift, repack=config.llm_repack,
                             evidence_apart=config.evidence_apart)
    return load_remote_llm(config)


def load_remote_llm(config: Config) -> RemoteLanguageModel:
    """The model server at `llm_url`, connected."""
    tokenizer = LanguageModel(llm_path(config), context=512, vocab_only=True,
                              repack=config.llm_repack) if config.llm_model else None
    remote = RemoteLanguageModel(config.llm_url, config.llm_api_key, tokenizer, config.context, config.max_inflight)
    remote.connect()
    return remote


def load_tts(config: Config) -> TextToSpeech:
    return TextToSpeech(tts_path(config))


ENGINES: dict[str, tuple[Callable[[Config], Path], Callable[[Config], object]]] = {
    "llm": (llm_path, load_llm),
    "stt": (stt_path, load_stt),
    "tts": (tts_path, load_tts),
}


def describe(engine: str, config: Config) -> str:
    """What the configured model of an engine is, for people ("faster-whisper tiny.en (int8)")."""
    configured = getattr(config, {"llm": "llm_model", "stt": "stt_model", "tts": "tts_voice"}[engine])
    if engine == "llm":
        profile = llm_profile(configured)
        return f"{profile.name}: {profile.description}" if profile else "a GGUF file (llm_model)"
    return SPEECH[engine].description if not configured else f"configured ({SPEECH[engine].option})"


def timed_load(engine: str, config: Config) -> tuple[Path, object, float]:
    """Resolve and load one engine; returns its path, the loaded engine and the load time in seconds."""
    path_of, load = ENGINES[engine]
    path = path_of(config)
    started = time.perf_counter()
    loaded = load(config)
    return path, loaded, time.perf_counter() - started
