#!/usr/bin/env python3
"""How well each installed language model profile answers, decides to search, and how fast it speaks.

A fixed set of conversations runs through a real server (research policy `model`, a small knowledge
base of personal notes): plain facts, follow-ups that need the previous turn, arithmetic, questions
only the notes answer (a search is expected) and questions that need none (no search expected).
Each conversation is a fresh session. An answer counts as right when it contains one of the expected
words. Then spoken turns without research give the first-audio figures (commit to first audio).

Run: .venv/bin/python scripts/eval_model.py [--profiles qwen2.5-coder-1.5b,...] [--spoken 5]
It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.realtime import Client, RunningServer, done, reply_text
from models.llm import LanguageModel
from models.weights import PROFILES, resolve
from voice.config import Config
from voice.engines import load_stt, load_tts
from voice.knowledge.base import KnowledgeBase

NOTES = {
    "boiler.md": "# Boiler\n\nThe boiler in the hall cupboard was serviced in May. Its reset code is 4471. "
                 "The engineer is Tomasz Nowak, phone 087 555 0192.",
    "dentist.md": "# Dentist\n\nNext dentist appointment: Tuesday 14 March at 10:30 with Dr Okafor on Quay Street.",
    "cottage.md": "# The cottage\n\nThe cottage in Clifden has wifi called HeronNet; the password is heron-42. "
                  "The key is under the blue flower pot.",
    "bins.md": "# Bins\n\nThe green recycling bin goes out on Thursday night; "
               "the brown compost bin every second Monday.",
}

# (turns, expected words for the last turn's answer, whether the last turn should search)
# A turn is a user message; every turn but the last is context for it.
Item = tuple[list[str], list[str], bool]
QUESTIONS: list[tuple[str, Item]] = [
    ("fact", (["What is the capital of France?"], ["Paris"], False)),
    ("fact", (["What is the capital of Japan?"], ["Tokyo"], False)),
    ("fact", (["How many legs does a spider have?"], ["eight", "8"], False)),
    ("fact", (["Which planet is known as the red planet?"], ["Mars"], False)),
    ("fact", (["What language do people speak in Brazil?"], ["Portuguese"], False)),
    ("fact", (["Who wrote Romeo and Juliet?"], ["Shakespeare"], False)),
    ("fact", (["At what temperature does water boil at sea level, in Celsius?"], ["100"], False)),
    ("fact", (["What colour do you get when you mix blue and yellow?"], ["green"], False)),
    ("fact", (["What is the largest ocean on Earth?"], ["Pacific"], False)),
    ("fact", (["How many days are there in a leap year?"], ["366"], False)),
    ("follow-up", (["I just bought a banana.", "What colour is that fruit, usually?"], ["yellow"], False)),
    ("follow-up", (["My sister is called Maeve.", "What is my sister called?"], ["Maeve"], False)),
    ("follow-up", (["I live in Galway.", "Which country is the city I live in?"], ["Ireland"], False)),
    ("follow-up", (["My favourite number is 12.", "What is my favourite number plus 5?"], ["17"], False)),
    ("follow-up", (["I have two cats and one dog.", "How many pets do I have?"], ["three", "3"], False)),
    ("arithmetic", (["What is 12 plus 7?"], ["19"], False)),
    ("arithmetic", (["What is 17 times 3?"], ["51"], False)),
    ("arithmetic", (["What is 100 minus 37?"], ["63"], False)),
    ("arithmetic", (["What is 9 times 8?"], ["72"], False)),
    ("arithmetic", (["What is half of 50?"], ["25"], False)),
    ("notes", (["What is the reset code for my boiler? Check my notes."], ["4471"], True)),
    ("notes", (["When is my next dentist appointment?"], ["14 March", "March 14", "Tuesday"], True)),
    ("notes", (["What is the wifi password at the cottage?"], ["heron-42"], True)),
    ("notes", (["Which night does the green recycling bin go out, according to my notes?"], ["Thursday"], True)),
    ("notes", (["Who is the engineer for my boiler?"], ["Tomasz", "Nowak"], True)),
    ("notes", (["Where did I note the cottage key is?"], ["flower pot", "pot"], True)),
    ("no search", (["Say hello in Spanish."], ["hola"], False)),
    ("no search", (["What is the opposite of hot?"], ["cold"], False)),
    ("no search", (["How many minutes are in an hour?"], ["60", "sixty"], False)),
    ("no search", (["What is the chemical symbol for gold?"], ["Au"], False)),
]
SPOKEN = ["What is the capital of France?", "How many legs does a spider have?", "Who wrote Romeo and Juliet?",
          "What is twelve plus seven?", "Which planet is known as the red planet?", "What is the largest ocean?"]


def searched(events: list[dict]) -> bool:
    return any(e["type"] == "conversation.item.added" and e["item"]["type"] == "function_call" for e in events)


def evaluate(profile: str, stt, tts, work: Path, spoken: int, temperature: float, repeat_penalty: float) -> dict:
    llm = LanguageModel(resolve("llm", profile), context=8192, threads=2, repeat_penalty=repeat_penalty)
    data = work / profile
    config = Config(threads=2, data_dir=str(data), research="model", reply_tokens=96, temperature=temperature)
    KnowledgeBase(config.knowledge_path).index(work / "notes")
    server = RunningServer(config, llm, stt, tts)
    rows = []
    for kind, (turns, expected, should_search) in QUESTIONS:
        client = Client(server.url())
        for turn in turns:
            events = client.ask(turn, max_tokens=64)
        answer = reply_text(events).strip()
        right = any(word.lower() in answer.lower() for word in expected)
        rows.append((kind, right, searched(events) == should_search, searched(events), answer))
        client.close()
    server.stop()

    quiet = RunningServer(Config(threads=2, data_dir=str(data / "spoken"), research="off", reply_tokens=64,
                                 temperature=0.0), llm, stt, tts)
    first_audio = []
    for text in SPOKEN[:spoken]:
        client = Client(quiet.url())
        metadata = done(client.speak(b"".join(tts.synthesize(text))))["metadata"]
        first_audio.append(int(metadata["first_audio_ms"]))
        client.close()
    quiet.stop()
    return {"rows": rows, "first_audio": first_audio}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", default=",".join(p.name for p in PROFILES.values() if p.installed()))
    parser.add_argument("--spoken", type=int, default=5, help="spoken turns for the first-audio figures")
    parser.add_argument("--answers", action="store_true", help="print every answer")
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy, as the tests decode")
    parser.add_argument("--repeat-penalty", type=float, default=1.0, help="llama.cpp's repeat penalty")
    parser.add_argument("--kinds", help="only these kinds of question, comma-separated (fact, follow-up, ...)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="parlour-eval-"))
    (work / "notes").mkdir()
    for name, text in NOTES.items():
        (work / "notes" / name).write_text(text)
    config = Config(threads=2)
    stt, tts = load_stt(config), load_tts(config)
    if args.kinds:
        QUESTIONS[:] = [(kind, item) for kind, item in QUESTIONS if kind in args.kinds.split(",")]
    kinds = list(dict.fromkeys(kind for kind, _ in QUESTIONS))
    results = {}
    for profile in args.profiles.split(","):
        results[profile] = result = evaluate(profile, stt, tts, work, args.spoken, args.temperature,
                                             args.repeat_penalty)
        if args.answers:
            for (kind, _), (_, right, decided, did_search, answer) in zip(QUESTIONS, result["rows"], strict=True):
                print(f"{profile} {kind:<10} {'right' if right else 'WRONG'} "
                      f"{'search' if did_search else '-':<6} {'' if decided else '(decision wrong) '}{answer[:100]!r}")

    print(f"temperature {args.temperature}, repeat penalty {args.repeat_penalty}")
    print(f"{'profile':<20} " + " ".join(f"{k:>10}" for k in kinds)
          + f" {'answers':>8} {'search ok':>9} {'1st audio':>9}")
    for profile, result in results.items():
        rows = result["rows"]
        per_kind = [f"{sum(r[1] for r in rows if r[0] == k)}/{sum(r[0] == k for r in rows)}" for k in kinds]
        audio = f"{statistics.median(result['first_audio']):.0f} ms" if result["first_audio"] else "-"
        print(f"{profile:<20} " + " ".join(f"{c:>10}" for c in per_kind)
              + f" {sum(r[1] for r in rows):>5}/{len(rows)} {sum(r[2] for r in rows):>6}/{len(rows)} {audio:>9}")
    print("answers: the reply contains an expected word; search ok: searched exactly when only the notes "
          "answer; 1st audio: median, commit to first audio delta, spoken turns without research")


if __name__ == "__main__":
    main()
