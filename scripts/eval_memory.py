#!/usr/bin/env python3
"""Does the conversation survive being summarized (ADR 0141), and is it recalled in a new session?
Figures for each installed profile.

Facts (names, numbers, dates, decisions) are planted in the first exchanges of a session served
with a small context; long filler turns then force those exchanges out, so the model summarizes
them. Then six questions about the facts. Three cases, each printed as a row:
- `pause`: the filler turns and questions wait for background work between them, as a user who
  pauses before speaking again;
- `no pause`: they follow each other at once, as a user who goes on talking;
- `new session`: after the no-pause session, the same key opens a new session and asks the same
  questions: the answers come from recall (voice.knowledge.recall). A second key asks them too, and every
  fact its research or answers hold is counted as crossed.
Each row says how many facts the stored summary holds, how many answers are right, how long turns
waited for the model (behind background summaries), the time summarized on a reply's path, and the
messages dropped without a summary.

Run: .venv/bin/python scripts/eval_memory.py [--profiles ...] [--context 1536] [--show]
It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.realtime import Client, RunningServer, done, reply_text
from models.llm import LanguageModel
from models.weights import PROFILES, resolve
from voice.config import Config

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
KEYS = ["key-a", "key-b"]


def held(text: str, words: list[str]) -> bool:
    return any(word.lower() in text.lower() for word in words)


def ask_all(client: Client) -> tuple[list[str], list[str]]:
    """The six questions' answers, and each turn's research (tool results)."""
    answers, research = [], []
    for _, _, question in FACTS:
        events = client.ask(question, max_tokens=32)
        answers.append(reply_text(events).strip())
        research.append(" ".join(e["item"]["output"] for e in events if e["type"] == "conversation.item.done"
                                 and e["item"]["type"] == "function_call_output"))
    return answers, research


def figures(server: RunningServer, turns: int) -> dict:
    recent = server.service.engine.recent[-turns:]
    waits = sorted(f.queue_ms or 0 for f in recent)
    summarized = sorted(f.summarized_ms or 0 for f in recent)
    return {"wait_median_ms": waits[len(waits) // 2], "wait_max_ms": waits[-1],
            "summarized_max_ms": summarized[-1], "summarized_turns": sum(s > 0 for s in summarized),
            "dropped": sum(f.dropped or 0 for f in recent)}


def planted_session(llm, work: Path, pause: bool) -> tuple[RunningServer, dict]:
    config = Config(threads=2, data_dir=str(work), research="auto", context=llm.context, reply_tokens=64,
                    temperature=0.0, api_keys=KEYS)
    server = RunningServer(config, llm, None, None)
    client = Client(server.url(), api_key=KEYS[0])
    for statement, _, _ in FACTS:
        client.ask(statement, max_tokens=24)
    last_fact = 2 * len(FACTS)  # transcript index one past the last fact's exchange (after the system prompt)
    fillers = 0
    for fillers in range(1, 17):  # noqa: B007 - its last value, the fillers asked, is read after the loop
        done(client.ask(FILLER, max_tokens=4))
        if pause:
            server.idle()  # background work finishes, as in the pause before the user speaks again
        removed, _ = server.service.store.fit_state(client.session_id)
        if removed and max(removed) >= last_fact:  # the facts have left the prompt
            break
    answers, _ = ask_all(client)
    summaries = server.service.store.summaries(client.session_id)
    text = summaries[-1].text if summaries else ""
    client.close()
    return server, {"case": "pause" if pause else "no pause", "summary": text, "answers": answers,
                    "kept": sum(held(text, words) for _, words, _ in FACTS),
                    "right": sum(held(a, words) for (_, words, _), a in zip(FACTS, answers, strict=True)),
                    **figures(server, fillers + len(FACTS))}


def recall_case(server: RunningServer) -> dict:
    client = Client(server.url(), api_key=KEYS[0])
    answers, research = ask_all(client)
    client.close()
    row = {"case": "new session", "summary": "", "answers": answers, "kept": None,
           "right": sum(held(a, words) for (_, words, _), a in zip(FACTS, answers, strict=True)),
           "found": sum(held(r, words) for (_, words, _), r in zip(FACTS, research, strict=True)),
           **figures(server, len(FACTS))}
    other = Client(server.url(), api_key=KEYS[1])
    answers, research = ask_all(other)
    other.close()
    row["crossed"] = sum(held(a + " " + r, words) for (_, words, _), a, r in zip(FACTS, answers, research, strict=True))
    return row


def evaluate(profile: str, context: int, work: Path) -> list[dict]:
    llm = LanguageModel(resolve("llm", profile), context=context, threads=2)
    rows = []
    for pause in (True, False):
        server, row = planted_session(llm, work / profile / ("pause" if pause else "no-pause"), pause)
        rows.append(row)
        if not pause:
            rows.append(recall_case(server))
        server.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", default=",".join(p.name for p in PROFILES.values() if p.installed()))
    parser.add_argument("--context", type=int, default=1536)
    parser.add_argument("--show", action="store_true", help="print each summary and answer")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="parlour-memory-"))
    results = {profile: evaluate(profile, args.context, work) for profile in args.profiles.split(",")}
    n = len(FACTS)
    if args.show:
        for profile, rows in results.items():
            for row in rows:
                print(f"--- {profile}, {row['case']}; summary:\n{row['summary'] or '(none)'}")
                for (_, _, question), answer in zip(FACTS, row["answers"], strict=True):
                    print(f"  {question} -> {answer[:100]!r}")
    print(f"{len(FACTS)} facts, context {args.context}")
    print(f"{'profile':<20} {'case':<12} {'summary holds':>13} {'answered right':>14} {'recalled':>8} "
          f"{'crossed keys':>12} {'turn waited, median / max':>26} {'summarized on a reply':>22} {'dropped':>7}")
    for profile, rows in results.items():
        for row in rows:
            kept = "-" if row["kept"] is None else f"{row['kept']}/{n}"
            found = f"{row['found']}/{n}" if "found" in row else "-"
            crossed = f"{row['crossed']}/{n}" if "crossed" in row else "-"
            summarized = f"{row['summarized_turns']} turns, max {row['summarized_max_ms'] / 1000:.2f} s"
            print(f"{profile:<20} {row['case']:<12} {kept:>13} {row['right']:>11}/{n} {found:>8} {crossed:>12} "
                  f"{row['wait_median_ms'] / 1000:>17.2f} s / {row['wait_max_ms'] / 1000:.2f} s "
                  f"{summarized:>22} {row['dropped']:>7}")


if __name__ == "__main__":
    main()
