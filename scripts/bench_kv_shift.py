#!/usr/bin/env python3
"""What KV shift costs in reply fidelity, and what it saves in time.

A research conversation over the license texts grows turn by turn. At each step a piece of its
history is removed, as fitting removes it (the oldest research, two researches at once, or the
oldest whole exchange), and the next question is answered twice from the same prompt: once with
the model's cache shifted past the removed piece (`kv_shift`, the default), once from an exact
prefill of the whole prompt. It prints, per trial, the tokens removed and kept, both times, and
whether the greedy replies agree (the first token, and the whole reply), then the totals.

Run: .venv/bin/python scripts/bench_kv_shift.py [--profile qwen2.5-coder-0.5b] [--trials 12]
It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from models.tool_calls import new_call
from voice.config import DEFAULT_INSTRUCTIONS, Config
from voice.engines import load_llm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_voice import QUESTIONS

REMOVALS = ("oldest research", "two researches", "oldest exchange")


def conversation(llm, system: dict, docs: Path, turns: int, research_chars: int) -> list[list[dict]]:
    """Exchanges: a question, a search and its result (a stretch of a license text), and the
    model's own answer (greedy, at most 48 tokens)."""
    texts = [p.read_text(errors="replace") for p in sorted(docs.iterdir()) if p.is_file()]
    exchanges = []
    for n in range(turns):
        question = QUESTIONS[n % len(QUESTIONS)]
        call = new_call("search", {"query": question})
        text = texts[n % len(texts)]
        start = (n * 997) % max(1, len(text) - research_chars)
        exchange = [
            {"role": "user", "content": question},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": text[start:start + research_chars]},
        ]
        reply = llm.stream(flatten(system, exchanges) + exchange, max_tokens=48, temperature=0).text().strip()
        exchanges.append(exchange + [{"role": "assistant", "content": reply or "I could not find that."}])
    return exchanges


def flatten(system: dict, exchanges: list[list[dict]]) -> list[dict]:
    return [system] + [m for exchange in exchanges for m in exchange]


def without(exchanges: list[list[dict]], removal: str) -> list[list[dict]]:
    if removal == "oldest exchange":
        return exchanges[1:]
    researches = 2 if removal == "two researches" else 1
    return [[e[0], e[3]] if n < researches else e for n, e in enumerate(exchanges)]


def answer(llm, messages: list[dict], tokens: int) -> tuple[list[str], float, int]:
    """The reply's pieces, its time to the first token, and the tokens kept by shifting (0 when
    the shifted cache gave an empty reply and the prompt was evaluated exactly instead)."""
    reply = llm.stream(messages, max_tokens=tokens, temperature=0)
    pieces = list(reply)
    return pieces, reply.stats.ttft_s * 1000, reply.stats.shifted_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="", help="language model profile (default: the default profile)")
    parser.add_argument("--docs", default="/usr/share/common-licenses")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--research-chars", type=int, default=1500)
    parser.add_argument("--reply-tokens", type=int, default=24)
    args = parser.parse_args()

    llm = load_llm(Config(llm_model=args.profile))
    system = {"role": "system", "content": DEFAULT_INSTRUCTIONS}
    exchanges = conversation(llm, system, Path(args.docs), args.trials + 2, args.research_chars)
    print(f"{llm.name}: {args.trials} removals, greedy replies of {args.reply_tokens} tokens; ms")
    print(f"{'trial':>5} {'removed':<16} {'prompt':>6} {'shifted':>7} | {'shift ms':>8} {'exact ms':>8} | "
          f"{'first':>5} {'reply':>5}")
    same_first = same_reply = 0
    shift_times, exact_times = [], []
    for trial in range(args.trials):
        history = exchanges[:trial + 2]
        question = {"role": "user", "content": QUESTIONS[(trial + 5) % len(QUESTIONS)]}
        removal = REMOVALS[trial % len(REMOVALS)]
        before = flatten(system, history) + [{"role": "user", "content": "Thanks."}]
        after = flatten(system, without(history, removal)) + [question]
        llm.kv_shift = True
        llm.stream(before, max_tokens=1, temperature=0).text()  # the cache holds the longer prompt
        shifted, shift_ms, kept = answer(llm, after, args.reply_tokens)
        llm.kv_shift = False
        llm._llm.n_tokens = 0  # an exact prefill of the whole prompt
        exact, exact_ms, _ = answer(llm, after, args.reply_tokens)
        first, whole = shifted[:1] == exact[:1], shifted == exact
        same_first += first
        same_reply += whole
        shift_times.append(shift_ms)
        exact_times.append(exact_ms)
        print(f"{trial + 1:>5} {removal:<16} {llm.count(after):>6} {kept:>7} | {shift_ms:>8.0f} {exact_ms:>8.0f} | "
              f"{'same' if first else 'diff':>5} {'same' if whole else 'diff':>5}", flush=True)
        if not whole:
            print(f"      shifted: {''.join(shifted)!r}\n      exact:   {''.join(exact)!r}")
    print("(shifted 0: the shifted cache gave an empty reply, so the prompt was evaluated exactly)")
    print(f"first token the same in {same_first} of {args.trials}, whole reply the same in {same_reply} of "
          f"{args.trials}; median time to first token {statistics.median(shift_times):.0f} ms shifted, "
          f"{statistics.median(exact_times):.0f} ms exact")


if __name__ == "__main__":
    main()
