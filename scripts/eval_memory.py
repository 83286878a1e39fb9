#!/usr/bin/env python3
"""Does the conversation survive being summarized (ADR 0141)? Figures for each installed profile.

Facts (names, numbers, dates, decisions) are planted in the first exchanges of a session served
with a small context; long filler turns then force those exchanges out, so the model summarizes
them in the background. The script prints how many facts the stored summary holds, how many
questions about them the model answers right from that summary, and how long the last 20 turns
waited for the model (behind a background summary, say) before their prompt was evaluated.

With --no-pause, nobody waits for the background: the filler turns and the questions follow each
other at once, as a user who goes on talking does, and the summary is read when the questions start.

Run: .venv/bin/python scripts/eval_memory.py [--profiles ...] [--context 1536] [--no-pause] [--show]
It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from models.llm import LanguageModel  # noqa: E402
from models.weights import PROFILES, resolve  # noqa: E402
from tests.realtime import Client, RunningServer, done, reply_text  # noqa: E402
from voice.config import Config  # noqa: E402

# (what the user says, the words that show the fact was kept, a question about it)
FACTS = [
    ("My sister's name is Maeve.", ["Maeve"], "What is my sister's name?"),
    ("My flight to Lisbon leaves on the 14th of March.", ["14"], "On what date does my flight to Lisbon leave?"),
    ("The code for the garage door is 5830.", ["5830"], "What is the code for the garage door?"),
    ("We decided to paint the kitchen green.", ["green"], "What colour did we decide to paint the kitchen?"),
    ("My dog is called Biscuit.", ["Biscuit"], "What is my dog called?"),
    ("I pay 950 euros a month in rent.", ["950"], "How much rent do I pay each month?"),
]
FILLER = ("Here is a passage I am reading, no need to comment on it: " + " ".join(
    f"The old harbour wall number {n} was rebuilt after the storm and the fishing boats came back." for n in range(14))
    + " Just say OK.")


def held(text: str, words: list[str]) -> bool:
    return any(word.lower() in text.lower() for word in words)


def evaluate(profile: str, context: int, work: Path, pause: bool = True) -> dict:
    llm = LanguageModel(resolve("llm", profile), context=context, threads=2)
    config = Config(threads=2, data_dir=str(work / profile), research="off", context=context, reply_tokens=64,
                    temperature=0.0)
    server = RunningServer(config, llm, None, None)
    client = Client(server.url())
    for statement, _, _ in FACTS:
        client.ask(statement, max_tokens=24)
    last_fact = 2 * len(FACTS)  # transcript index one past the last fact's exchange (after the system prompt)
    summary = None
    for _ in range(16):
        done(client.ask(FILLER, max_tokens=4))
        if pause:
            server.idle()  # the background summary finishes, as in the pause before the user speaks again
        summaries = server.service.store.summaries(client.session_id)
        if summaries and summaries[-1].end > last_fact:
            summary = summaries[-1]
            break
        removed, _ = server.service.store.fit_state(client.session_id)
        if not pause and removed and max(removed) >= last_fact:  # the facts have left the prompt
            break
    answers = [reply_text(client.ask(question, max_tokens=32)).strip() for _, _, question in FACTS]
    summaries = server.service.store.summaries(client.session_id)
    summary = summaries[-1] if summaries and summaries[-1].end > last_fact else summary
    text = summary.text if summary else ""
    waits = sorted(f.get("queue_ms", 0) for f in server.service.engine.recent)  # the last 20 turns
    client.close()
    server.stop()
    return {
        "wait_median_ms": waits[len(waits) // 2], "wait_max_ms": waits[-1],
        "summary": text,
        "kept": sum(held(text, words) for _, words, _ in FACTS),
        "right": sum(held(answer, words) for (_, words, _), answer in zip(FACTS, answers)),
        "answers": answers,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", default=",".join(p.name for p in PROFILES.values() if p.installed()))
    parser.add_argument("--context", type=int, default=1536)
    parser.add_argument("--no-pause", action="store_true", help="no waiting for background summaries between turns")
    parser.add_argument("--show", action="store_true", help="print each summary and answer")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="parlour-memory-"))
    results = {profile: evaluate(profile, args.context, work, not args.no_pause) for profile in args.profiles.split(",")}
    if args.show:
        for profile, result in results.items():
            print(f"--- {profile} summary:\n{result['summary'] or '(none)'}")
            for (_, _, question), answer in zip(FACTS, result["answers"]):
                print(f"  {question} -> {answer[:100]!r}")
    print(f"{'profile':<20} {'facts in summary':>16} {'answered right':>14} {'turn waited, median / max':>26}"
          f"   ({len(FACTS)} facts, context {args.context}, {'no pause' if args.no_pause else 'pause'})")
    for profile, result in results.items():
        print(f"{profile:<20} {result['kept']:>13}/{len(FACTS)} {result['right']:>11}/{len(FACTS)} "
              f"{result['wait_median_ms'] / 1000:>17.2f} s / {result['wait_max_ms'] / 1000:.2f} s")


if __name__ == "__main__":
    main()
