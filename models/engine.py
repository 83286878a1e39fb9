"""How llama.cpp runs on this CPU: the features its build uses, and the settings Parlour loads with.

Every GGUF Parlour opens (the model in this process, the vocabulary-only counter of a remote model,
the tests' model server) is opened by `open_llama`, so one place decides how llama.cpp runs.

Why weights are not repacked by default: pip builds llama.cpp with `-march=native`. On a CPU with
AMX (most current Xeons) llama.cpp then moves Q4_K and Q6_K weights into its AMX buffer type at
load, and the first decode segfaults in `ggml_backend_amx_mul_mat` (llama.cpp issue 20824, open).
Repacking is llama.cpp's "extra buffer types" (`use_extra_bufts`, the server's `--no-repack`);
with them off the weights stay as the GGUF stores them. llama-cpp-python builds its model
parameters inside `Llama()` and takes no such argument, so `open_llama` supplies them for the
duration of the load and checks afterwards that they took effect. With repacking off prefill was
also faster on the CPUs measured (docs/models.md, the engine; `scripts/bench_engine.py`), so it is off on every
CPU unless `llm_repack` asks for it, and that is refused where the build would use AMX.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from http import HTTPStatus
from pathlib import Path

from fitting.errors import ParlourError

# The defaults are process-wide state while llama-cpp-python reads them during a load, and one
# load may set both the model's and the context's.
_defaults_lock = threading.RLock()
KV_CACHE_TYPES = {"f16": 1, "q8_0": 8, "bf16": 30}  # ggml's numbers for them (ggml.h, enum ggml_type)


class EngineRefused(ParlourError, ValueError):
    """Settings that would crash this CPU's llama.cpp build; the message says why, in one line.
    Told at start-up; the service's own settings are at fault, hence a 500 status."""

    code, status = "engine_refused", HTTPStatus.INTERNAL_SERVER_ERROR


@dataclass(frozen=True)
class EngineSettings:
    """How llama.cpp evaluates: chosen by `scripts/bench_engine.py`'s figures (docs/models.md: The engine)."""

    repack: bool = False  # llama.cpp's extra buffer types: weights repacked for AMX or wide SIMD
    ubatch: int = 512  # tokens evaluated per micro-batch during prefill
    flash_attention: bool = False
    kv_cache: str = "f16"  # the K and V cache cells' type: "f16", "bf16", or "q8_0" (needs flash attention)
    threads: int = 1  # while decoding, one token at a time
    threads_batch: int = 1  # while evaluating a prompt

    @classmethod
    def chosen(cls, threads: int, repack: bool = False) -> EngineSettings:
        """Parlour's settings for `threads` cores: the same count decoding and evaluating prompts."""
        return cls(repack=repack, threads=threads, threads_batch=threads)

    def describe(self) -> str:
        return (f"repacking {'on' if self.repack else 'off'}, micro-batch {self.ubatch}, flash attention "
                f"{'on' if self.flash_attention else 'off'}, {self.kv_cache} cache, {self.threads} threads decoding / "
                f"{self.threads_batch} evaluating prompts")

    def as_json(self) -> dict:
        return asdict(self)


def system_info() -> str:
    """llama.cpp's own line about its build: `CPU : SSE3 = 1 | ... | AMX_INT8 = 1 | ...`."""
    from llama_cpp import llama_print_system_info

    return llama_print_system_info().decode("utf-8", "replace").strip()


def cpu_features(info: str | None = None) -> list[str]:
    """The features llama.cpp's build uses on this CPU, in its own order ("AVX2", "AMX_INT8", ...)."""
    info = system_info() if info is None else info
    features = []
    for field in info.replace("CPU :", "|").split("|"):
        name, _, value = field.partition("=")
        if value.strip() == "1" and name.strip():
            features.append(name.strip())
    return features


def uses_amx(features: list[str] | None = None) -> bool:
    return any(name.startswith("AMX") for name in (cpu_features() if features is None else features))


def check(settings: EngineSettings) -> None:
    """Refuse settings known to crash this build (`EngineRefused`)."""
    if settings.repack and uses_amx():
        raise EngineRefused("llm_repack is refused on this CPU: llama.cpp repacks weights for AMX and then "
                            "crashes at the first reply (llama.cpp issue 20824); leave llm_repack off")


@contextmanager
def _defaults(function: str, **fields: object) -> Iterator[None]:
    """llama-cpp-python's `function()` (`llama_model_default_params`, `llama_context_default_params`)
    with `fields` set, while the block runs."""
    import llama_cpp.llama_cpp as lib

    original = getattr(lib, function)

    def defaults():
        params = original()
        for name, value in fields.items():
            setattr(params, name, value)
        return params

    with _defaults_lock:
        setattr(lib, function, defaults)
        try:
            yield
        finally:
            setattr(lib, function, original)


@contextmanager
def loading_with(settings: EngineSettings, refuse_unsafe: bool = True) -> Iterator[None]:
    """Every `Llama` created inside the block loads its weights as `settings` say (a whole process
    that loads through a library's own code, such as llama-cpp-python's server, runs inside it).
    `refuse_unsafe=False` is for scripts/bench_engine.py, which shows the crash in a child process."""
    if refuse_unsafe:
        check(settings)
    with _defaults("llama_model_default_params", use_extra_bufts=settings.repack):
        yield


def open_llama(path: Path, settings: EngineSettings, context: int, vocab_only: bool = False, seed: int = 0,
               refuse_unsafe: bool = True, sequences: int = 1):
    """A `llama_cpp.Llama` for the GGUF at `path`, loaded and run as `settings` say. With
    `sequences` above 1 its cache holds that many sequences in one unified buffer of `context`
    cells (a second sequence is where evidence evaluated apart is put, then placed: models.llm)."""
    from llama_cpp import Llama

    cache = KV_CACHE_TYPES[settings.kv_cache]
    with loading_with(settings, refuse_unsafe), _defaults("llama_context_default_params", n_seq_max=sequences,
                                                            kv_unified=sequences > 1):
        llm = Llama(
            model_path=str(path), n_ctx=context, n_threads=settings.threads, n_threads_batch=settings.threads_batch,
            n_batch=512, n_ubatch=settings.ubatch, flash_attn=settings.flash_attention, seed=seed, verbose=False,
            vocab_only=vocab_only, type_k=cache, type_v=cache,
        )
    if bool(llm.model_params.use_extra_bufts) != settings.repack:  # a llama-cpp-python that builds them otherwise
        raise EngineRefused(f"llama-cpp-python did not take use_extra_bufts={settings.repack}: loading {path.name} "
                            "would risk the AMX crash (llama.cpp issue 20824)")
    return llm
