#!/usr/bin/env python3
"""Are research answers right, for voices Parlour never uses? Questions over two knowledge bases,
spoken by several voices and typed.

The questions (harness/knowledge/questions.py) are over the license texts in
/usr/share/common-licenses and a household's own notes and manuals (harness/knowledge/household/),
indexed together into one knowledge base as `parlour index` does. Each has one fact the texts state
plainly, a pattern that a right answer matches, and the domain words whisper must hear for the
search to find it. A real Parlour server answers them:
- spoken, once per voice, each voice and knowledge base in a session of its own so that history
  grows (all 46 in one session reach the end of the context by the 27th, and each turn after it
  waits two minutes for the cache's exact refresh): rendered by
  harness/voices.py (flite, festival, espeak-ng; never Parlour's own voice unless asked for with
  `piper-joe`), streamed as a held key streams them (100 ms chunks in real time), released 0.5 s
  after the last word (scripts/bench_voice.py's turn);
- typed: as text in one more session, answered in text (the text stream keeps whole passages).

It prints, per question, what was heard, the reply and right or wrong; then per voice the right
answers (per knowledge base too), the domain-word error rate (domain words said that the transcript
lacks) and the median first audio; and the same for the typed session.

With `--heard LOG`, each voice's transcripts in an earlier run's printout are asked again as text
answered in speech: the spoken path's evidence and answers for what was heard, without hearing it
again (and in a third of the time), so that a change to research or answering can be measured on the
same transcripts. harness/knowledge/runs/ keeps the printouts the docs' figures come from.

Run: .venv/bin/python scripts/eval_research.py [--voices flite-rms,festival-kal] [--only spoken|typed]
         [--profile qwen2.5-coder-0.5b] [--research-tokens 250] [--stt-beam-size 5] [--reply-tokens 64]
         [--first 10] [--heard LOG]
It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.knowledge.questions import BASES, Question, domain_misses, index_bases, right
from harness.realtime import Client, RunningServer, reply_text
from harness.voices import PIPER, say
from models.audio import RATE
from voice.config import Config
from voice.engines import load_llm, load_stt, load_tts
from voice.knowledge.base import KnowledgeBase

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_voice import BYTES_PER_MS, RELEASE_MS, parlour_turn

VOICES = "flite-rms,festival-slt-hts,festival-kal,espeak-us"


def clip(name: str, text: str, tts) -> bytes:
    """`text` said by voice `name` at the protocol's rate, then the silence before the key is let go."""
    return say(name, text, tts, rate=RATE) + bytes(BYTES_PER_MS * RELEASE_MS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--voices", default=VOICES, help=f"comma-separated: harness/voices.py's names or {PIPER}")
    parser.add_argument("--profile", default="", help="language model profile (default: the default profile)")
    parser.add_argument("--only", choices=("spoken", "typed"), help="only the spoken sessions, or only the typed one")
    parser.add_argument("--reply-tokens", type=int, default=64)
    parser.add_argument("--research-tokens", type=int, default=Config.voice_research_tokens,
                        help="voice_research_tokens: the bound on a spoken turn's evidence")
    parser.add_argument("--first", type=int, default=0, help="only the first N questions (a shallow session)")
    parser.add_argument("--stt-beam-size", type=int, default=Config.stt_beam_size, help="whisper's beam size")
    parser.add_argument("--evidence-apart", choices=("on", "off"), default="on" if Config.evidence_apart else "off",
                        help="evidence_apart: deep in a session, evidence evaluated apart and placed (models.llm)")
    parser.add_argument("--heard", type=Path, help="an earlier run's printout: ask what each voice was heard to say")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="parlour-eval-"))
    config = Config(data_dir=str(work / "data"), llm_model=args.profile, reply_tokens=args.reply_tokens,
                    temperature=0.0, voice_research_tokens=args.research_tokens, stt_beam_size=args.stt_beam_size,
                    evidence_apart=args.evidence_apart == "on")
    index_bases(KnowledgeBase(config.knowledge_path), work)
    stt, tts = load_stt(config), load_tts(config)
    server = RunningServer(config, load_llm(config), stt, tts)
    server.idle()
    questions = [(base.name, q) for base in BASES for q in base.questions][:args.first or None]
    print(f"{server.service.llm.name}, research {config.research}, spoken evidence up to "
          f"{config.voice_research_tokens} tokens, whisper beam {config.stt_beam_size}, evidence apart "
          f"{'on' if config.evidence_apart else 'off'}, "
          f"{len(questions)} questions, a session per voice and knowledge base")

    heard_before = transcripts(args.heard) if args.heard else {}
    sessions = [] if args.only == "typed" else list(heard_before) or args.voices.split(",")
    sessions += [] if args.only == "spoken" else ["typed"]
    totals: dict[str, list] = {}
    placed_turns: dict[str, int] = {}  # turns whose evidence was evaluated apart and placed (models.llm)
    for name in sessions:
        print(f"\n{name}")
        rows = totals.setdefault(name, [])
        for base in BASES:  # a session per knowledge base: 46 questions would fill the context
            client = Client(server.url())
            for n, question in enumerate(q for b, q in questions if b == base.name):
                placed = 0
                if name == "typed":
                    events = client.ask(question.text, max_tokens=args.reply_tokens)
                    heard, first_audio, reply = question.text, float("nan"), reply_text(events)
                elif heard_before:
                    heard, first_audio = heard_before[name][f"{base.name[0]}{n + 1}"], float("nan")
                    client.ask(heard, max_tokens=args.reply_tokens, output_modalities=["audio"])
                    reply = server.service.store.transcript(client.session_id)[-1].get("content") or ""
                    placed = server.service.store.messages(client.session_id)[-1].figures.get("placed_tokens") or 0
                    server.idle(timeout=900)
                else:
                    turn = parlour_turn(client, clip(name, question.text, tts), args.reply_tokens,
                                        server.service.store)
                    heard, first_audio, placed = turn["heard"], turn["first_audio"], turn["placed"]
                    reply = server.service.store.transcript(client.session_id)[-1].get("content") or ""
                    server.idle(timeout=900)  # each spoken turn is timed alone, after the background work
                rows.append((base.name, question, right(question, reply), domain_misses(question, heard), first_audio))
                placed_turns[name] = placed_turns.get(name, 0) + bool(placed)
                audio = f"{first_audio / 1000:5.2f} s" if first_audio == first_audio else "      "
                audio += f"  placed {placed:>3}" if placed else ""  # its evidence evaluated apart (models.llm)
                print(f"{base.name[0]}{n + 1:>2} {'right' if rows[-1][2] else 'WRONG'} {audio}  heard: {heard}")
                print(f"    reply: {' '.join(reply.split())}")
            client.close()

    print()
    for name, rows in totals.items():
        print(summary(name, rows) + (f", evidence placed in {placed_turns[name]}" if placed_turns.get(name) else ""))
    server.stop()


def transcripts(printout: Path) -> dict[str, dict[str, str]]:
    """Each voice's transcripts in an earlier run's printout, by question ("h12")."""
    heard: dict[str, dict[str, str]] = {}
    voice = ""
    for line in printout.read_text().splitlines():
        if re.fullmatch(r"[a-z0-9][a-z0-9-]*", line):
            voice = line if line != "typed" else ""
        elif voice and (said := re.match(r"([a-z])\s*(\d+) (?:right|WRONG) .*?heard: (.*)", line)):
            heard.setdefault(voice, {})[said[1] + said[2]] = said[3]
    return heard


def summary(name: str, rows: list[tuple[str, Question, bool, int, float]]) -> str:
    said = sum(len(question.domain) for _, question, _, _, _ in rows)
    per_base = ", ".join(f"{base.name} {sum(r[2] for r in rows if r[0] == base.name)} of "
                         f"{sum(r[0] == base.name for r in rows)}" for base in BASES)
    timed = [r[4] for r in rows if r[4] == r[4]]
    timing = f", median first audio {statistics.median(timed) / 1000:.2f} s" if timed else ""
    return (f"{name:<18} {sum(r[2] for r in rows)} of {len(rows)} right ({per_base}), "
            f"domain-word error {sum(r[3] for r in rows) / said:.3f}{timing}")


if __name__ == "__main__":
    main()
