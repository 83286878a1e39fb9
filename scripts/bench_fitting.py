#!/usr/bin/env python3
"""Fitting cost against session length: time and measure calls for sessions of 10 to 5,000 messages.

Both must grow linearly: the per-message columns stay flat. Each size is fitted several times and
the median is printed. Run: .venv/bin/python scripts/bench_fitting.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fitting import estimate, fit
from harness.sessions import research_session

SIZES = [10, 50, 100, 500, 1000, 2000, 5000]
BUDGET = 8192 - 1024


def session_of(size: int) -> list[dict]:
    """Exactly `size` messages: whole research turns (5 messages each), then the final question."""
    messages = research_session(turns=size // 5 + 1, research_chars=2000, talk_chars=200)
    return messages[: size - 1] + [messages[-1]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"budget {BUDGET} tokens, characters/3 estimate, median of {args.repeat} runs")
    print(f"{'messages':>9} {'calls':>7} {'calls/msg':>10} {'fit ms':>9} {'us/msg':>8} {'prompt':>7} {'steps':>6}")
    for size in SIZES:
        messages = session_of(size)
        times, result = [], None
        for _ in range(args.repeat):
            started = time.perf_counter()
            result = fit(messages, BUDGET, estimate, generate=lambda prompt: "A short summary.")
            times.append(time.perf_counter() - started)
        median = statistics.median(times)
        print(
            f"{len(messages):>9} {result.measure_calls:>7} {result.measure_calls / len(messages):>10.2f}"
            f" {median * 1e3:>9.2f} {median * 1e6 / len(messages):>8.1f} {result.prompt_tokens:>7}"
            f" {len(result.steps):>6}"
        )


if __name__ == "__main__":
    main()
