"""Configuration: defaults, then a TOML file, then PARLOUR_* environment variables, then flags.

Each later source overrides the earlier ones. The file is the one named by `--config` or
PARLOUR_CONFIG, else `config.toml` in the user's config directory if it exists. Keys are the field
names below (`llm_model = "/models/qwen.gguf"`); an unknown key or a value of the wrong type is a
`ConfigError` with a one-line message.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

import platformdirs

ENV_PREFIX = "PARLOUR_"


class ConfigError(ValueError):
    """A configuration value or file that cannot be used; the message says which and why."""


DEFAULT_INSTRUCTIONS = (
    "You are Parlour, a helpful assistant that runs entirely on this computer. "
    "Answer in a few short, plain sentences."
)


@dataclass
class Config:
    llm_model: str = ""  # a profile name (models.weights.PROFILES) or a GGUF file; empty: the default profile
    llm_url: str = ""  # an OpenAI-compatible server's base URL (http://HOST:PORT/v1); empty: the model runs here
    llm_api_key: str = ""  # the key that server wants, if any
    max_inflight: int = 4  # with llm_url: replies generated at once (at most llama-server's --parallel)
    stt_model: str = ""  # a faster-whisper model directory; empty means tiny.en
    tts_voice: str = ""  # a Piper .onnx voice (its .onnx.json beside it); empty means en_US-joe-medium
    context: int = 8192  # the language model's context window, in tokens
    reply_tokens: int = 256  # the longest reply, kept free in the context
    llm_repack: bool = False  # let llama.cpp repack the weights (refused on AMX CPUs: models.engine)
    kv_shift: bool = True  # keep the model's cache past a removed piece of history, shifted; false: re-evaluate after it
    temperature: float = 0.2  # sampling temperature of replies; 0 always picks the likeliest token
    threads: int = field(default_factory=lambda: os.cpu_count() or 1)
    host: str = "127.0.0.1"
    allowed_hosts: list[str] = field(default_factory=list)  # Host names served besides the bound address and loopback
    port: int = 8765
    wyoming_port: int = 0  # Home Assistant's Wyoming protocol on this TCP port; 0: off
    device_memory: bool = False  # a chat API's new conversation continues its device's session (voice.chat.thread)
    data_dir: str = field(default_factory=lambda: platformdirs.user_data_dir("parlour"))
    instructions: str = DEFAULT_INSTRUCTIONS  # the system prompt of new sessions
    research: str = "auto"  # auto, model or off
    voice_research_tokens: int = 250  # a spoken turn's search results, cut to the sentences that bear on the question
    knowledge: str = ""  # the knowledge base `parlour index` builds; empty means DATA_DIR/knowledge.sqlite3
    api_keys: list[str] = field(default_factory=list)  # when set, every connection needs one of them
    max_queue: int = 8  # turns waiting for the model before new ones get server_busy
    max_connections: int = 32  # open websocket connections; more get 503
    max_text_chars: int = 32_000  # the longest text message accepted
    max_audio_seconds: int = 60  # the longest spoken question accepted

    # Where each value came from: "default", a file path, an environment variable or "flag".
    sources: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def database(self) -> Path:
        return Path(self.data_dir).expanduser() / "sessions.sqlite3"

    @property
    def knowledge_path(self) -> Path:
        return Path(self.knowledge).expanduser() if self.knowledge else Path(self.data_dir).expanduser() / "knowledge.sqlite3"


CHOICES = {"research": ("auto", "model", "off")}
NUMBERS = {"int": (int, "a whole number"), "float": (float, "a number")}
RANGES = {"port": (0, 65535), "wyoming_port": (0, 65535), "temperature": (0, 2)}  # other numbers must be at least 1


KEYS = {f.name: f.type for f in fields(Config) if f.name != "sources"}


def default_config_file() -> Path:
    return Path(platformdirs.user_config_dir("parlour")) / "config.toml"


def _convert(key: str, value: object, origin: str) -> object:
    kind = KEYS[key]
    if kind in NUMBERS:
        parse, noun = NUMBERS[kind]
        if isinstance(value, bool):
            raise ConfigError(f"{origin}: {key} must be {noun}, got {value!r}")
        try:
            number = parse(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ConfigError(f"{origin}: {key} must be {noun}, got {value!r}") from None
        low, high = RANGES.get(key, (1, None))
        if number < low or (high is not None and number > high):
            raise ConfigError(f"{origin}: {key} is out of range: {number} (from {low} to {high or 'any'})")
        return number
    if kind == "bool":
        words = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}
        if isinstance(value, str) and value.strip().lower() in words:  # from the environment or a flag
            return words[value.strip().lower()]
        if not isinstance(value, bool):
            raise ConfigError(f"{origin}: {key} must be true or false, got {value!r}")
        return value
    if kind == "list[str]":
        if isinstance(value, str):  # from the environment or a flag: comma-separated
            value = [item.strip() for item in value.split(",") if item.strip()]
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ConfigError(f"{origin}: {key} must be a list of strings, got {value!r}")
        return value
    if not isinstance(value, str):
        raise ConfigError(f"{origin}: {key} must be a string, got {value!r}")
    if key == "llm_url" and value and not value.startswith(("http://", "https://")):
        raise ConfigError(f"{origin}: llm_url must be an http(s) URL such as http://127.0.0.1:8080/v1, got {value!r}")
    if key in CHOICES and value not in CHOICES[key]:
        raise ConfigError(f"{origin}: {key} must be one of {', '.join(CHOICES[key])}, got {value!r}")
    return value


def _read_file(path: Path) -> dict[str, object]:
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path} is not valid TOML: {error}") from None
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown setting {unknown[0]!r} (known: {', '.join(KEYS)})")
    return data


def load_config(
    flags: Mapping[str, object] | None = None,
    env: Mapping[str, str] | None = None,
    config_file: str | Path | None = None,
) -> Config:
    """The effective configuration. `flags` holds only the flags the user gave (None values are skipped)."""
    env = os.environ if env is None else env
    config = Config()
    config.sources = {key: "default" for key in KEYS}

    named = config_file or env.get(ENV_PREFIX + "CONFIG")
    path = Path(named).expanduser() if named else default_config_file()
    layers: list[tuple[str, Mapping[str, object]]] = []
    if named or path.exists():
        layers.append((str(path), _read_file(path)))
    layers.append(("env", {key: env[ENV_PREFIX + key.upper()] for key in KEYS if ENV_PREFIX + key.upper() in env}))
    layers.append(("flag", {key: value for key, value in (flags or {}).items() if value is not None}))

    for origin, values in layers:
        for key, value in values.items():
            where = ENV_PREFIX + key.upper() if origin == "env" else origin
            setattr(config, key, _convert(key, value, where))
            config.sources[key] = where
    return config
