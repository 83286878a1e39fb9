#!/usr/bin/env python3
"""How fast llama.cpp runs each language model profile under each engine configuration.

For every installed profile and configuration it loads the GGUF in a child process (a crash is a
row that says so, not a dead benchmark), then evaluates license text into an 8,192-token context in
batches, timing the batches that start at depths 0, 2,000 and 6,000 (prefill tokens/s at each
depth), and evaluates 32 tokens one at a time after the first and after the last batch (decode
tokens/s, shallow and deep), and then one batch each of 16, 32 and 128 tokens at that depth (ms).
It prints the CPU, llama.cpp's system line, one table per profile and which configuration is
Parlour's default (models.engine.EngineSettings).

Run: .venv/bin/python scripts/bench_engine.py [--profiles qwen2.5-coder-1.5b,...] [--configs default,ubatch-128]
It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from models.engine import EngineSettings, cpu_features, open_llama, system_info
from models.weights import DEFAULT_PROFILE, PROFILES, resolve

CONTEXT = 8192
DEPTHS = (0, 2000, 6000)
BATCH = 256  # tokens in each timed prefill batch
DECODE = 32  # tokens in each decode run
# One batch of each size, timed at the last depth: what a prefill made in small batches (a guess while
# the key is held, voice.turns.preemption) pays per batch.
BATCHES = (16, 32, 128)
TEXTS = Path("/usr/share/common-licenses")


def configurations(threads: int) -> dict[str, EngineSettings]:
    default = EngineSettings.chosen(threads)
    return {
        "default": default,
        "repack": replace(default, repack=True),
        "ubatch-128": replace(default, ubatch=128),
        "ubatch-256": replace(default, ubatch=256),
        "flash-attention": replace(default, flash_attention=True),
        "decode-1-thread": replace(default, threads=1),
        "kv-bf16": replace(default, kv_cache="bf16"),
        "kv-q8_0": replace(default, kv_cache="q8_0", flash_attention=True),
    }


def text_tokens(llm) -> list[int]:
    text = "\n\n".join(p.read_text(errors="replace") for p in sorted(TEXTS.iterdir()) if p.is_file())
    return llm.tokenize(text.encode(), add_bos=True)


def rate(tokens: int, seconds: float) -> float:
    return tokens / seconds if seconds > 0 else 0.0


def measure(path: str, settings: EngineSettings, results) -> None:
    """In the child: load, prefill to the last depth, decode shallow and deep; report a dict."""
    started = time.perf_counter()
    llm = open_llama(Path(path), settings, CONTEXT, refuse_unsafe=False)
    figures = {"load_s": time.perf_counter() - started}
    tokens = text_tokens(llm)
    end = DEPTHS[-1] + BATCH
    needed = end + max(DECODE, *BATCHES)
    if len(tokens) < needed:
        raise SystemExit(f"the texts in {TEXTS} give {len(tokens)} tokens; {needed} are needed")

    def evaluate(start: int, stop: int) -> float:
        began = time.perf_counter()
        llm.eval(tokens[start:stop])
        return time.perf_counter() - began

    def decode(at: int) -> float:
        began = time.perf_counter()
        for token in tokens[at:at + DECODE]:
            llm.eval([token])
        seconds = time.perf_counter() - began
        llm.n_tokens = at  # the next eval drops what was decoded
        return rate(DECODE, seconds)

    position = 0
    for depth in DEPTHS:
        if depth > position:
            evaluate(position, depth)
        figures[f"prefill_{depth}"] = rate(BATCH, evaluate(depth, depth + BATCH))
        position = depth + BATCH
        if depth == DEPTHS[0]:
            figures["decode_shallow"] = decode(position)
    figures["decode_deep"] = decode(position)
    for size in BATCHES:
        llm.n_tokens = position
        figures[f"batch_{size}"] = evaluate(position, position + size) * 1000
    results.put(figures)


def run(path: Path, settings: EngineSettings) -> dict | str:
    """The child's figures, or what ended it."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    child = context.Process(target=measure, args=(str(path), settings, results))
    child.start()
    child.join()
    if child.exitcode:
        if child.exitcode < 0:
            return f"crashed: {signal.Signals(-child.exitcode).name}"
        return f"failed: exit status {child.exitcode}"
    return results.get(timeout=10)


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profiles", default=",".join(PROFILES),
                        help="comma-separated profiles (default: all installed)")
    parser.add_argument("--configs", default="", help="comma-separated configurations (default: all)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    configs = configurations(args.threads)
    chosen = [name for name in args.configs.split(",") if name] or list(configs)
    unknown = [name for name in chosen if name not in configs]
    if unknown:
        parser.error(f"unknown configuration {unknown[0]} (known: {', '.join(configs)})")

    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; llama.cpp uses: {' '.join(cpu_features())}")
    print(f"llama.cpp: {system_info()}")
    print(f"prefill: {BATCH} tokens at each depth, tokens/s; decode: {DECODE} tokens one at a time, tokens/s; "
          f"batch: one batch of that many tokens at depth {DEPTHS[-1] + BATCH}, ms")
    print(f"Parlour's default: {EngineSettings.chosen(args.threads).describe()}\n")
    header = f"{'configuration':<18}{'load s':>8}" + "".join(f"{'prefill@' + str(d):>14}" for d in DEPTHS) + \
        f"{'decode@' + str(BATCH):>12}{'decode@' + str(DEPTHS[-1] + BATCH):>13}" + \
        "".join(f"{'batch ' + str(size):>11}" for size in BATCHES)
    for name in args.profiles.split(","):
        profile = PROFILES.get(name)
        if profile is None or not profile.installed():
            print(f"{name}: not installed, skipped\n")
            continue
        path = resolve("llm", "" if name == DEFAULT_PROFILE else name)
        print(f"{name} ({path.name})")
        print(header)
        for config in chosen:
            figures = run(path, configs[config])
            if isinstance(figures, str):
                print(f"{config:<18}{figures}")
                continue
            print(f"{config:<18}{figures['load_s']:>8.2f}"
                  + "".join(f"{figures[f'prefill_{d}']:>14.1f}" for d in DEPTHS)
                  + f"{figures['decode_shallow']:>12.1f}{figures['decode_deep']:>13.1f}"
                  + "".join(f"{figures[f'batch_{size}']:>11.0f}" for size in BATCHES), flush=True)
        print()


if __name__ == "__main__":
    main()
