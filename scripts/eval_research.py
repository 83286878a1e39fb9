#!/usr/bin/env python3
"""Are research answers right? Twenty questions over the license texts, spoken and typed.

Each question has one fact that the texts in /usr/share/common-licenses state plainly, a pattern
that a right answer matches, and the domain words whisper must hear for the search to find it
(names of licenses and organisations). A real Parlour server indexes the texts as `parlour index`
does. The questions are asked twice, each time in one session, so that history grows:
- spoken: rendered by Piper, streamed as a held key streams them (100 ms chunks in real time),
  released 0.5 s after the last word (scripts/bench_voice.py's turn);
- typed: as text, answered in text (the text stream keeps whole passages).

It prints, per question, what was heard, the reply and right or wrong, then the totals, the
domain-word error rate (domain words said that the transcript lacks) and the median first audio.

Run: .venv/bin/python scripts/eval_research.py [--profile qwen2.5-coder-0.5b] [--only spoken|typed]
         [--research-tokens 250]
It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.realtime import Client, RunningServer, reply_text
from voice.config import Config
from voice.engines import load_llm, load_stt, load_tts
from voice.knowledge.base import KnowledgeBase

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_voice import BYTES_PER_MS, RELEASE_MS, parlour_turn

DOCS = Path("/usr/share/common-licenses")


@dataclass(frozen=True)
class Question:
    text: str
    right: str  # a regular expression a right answer matches (case ignored)
    domain: tuple[str, ...]  # the words whisper must hear for the search to find the document


QUESTIONS = [
    Question("When was version three of the GNU General Public License published?", r"2007",
             ("GNU", "General", "Public", "License")),
    Question("Which company may publish revised versions of the Mozilla Public License version one point one?",
             r"Netscape", ("Mozilla", "Public", "License")),
    Question("Under the Apache license, what happens to my patent license if I start patent litigation over the work?",
             r"terminat|end", ("Apache", "patent", "litigation")),
    Question("Who is the license steward of the Mozilla Public License version two?", r"Mozilla Foundation",
             ("Mozilla", "steward")),
    Question("Under the GNU General Public License version three, how many days after a notice do I have to cure "
             "a violation?", r"\b30\b|thirty", ("GNU", "General", "Public", "License", "violation")),
    Question("When was version two of the GNU General Public License published?", r"1991",
             ("GNU", "General", "Public", "License")),
    Question("When was version two point one of the GNU Lesser General Public License published?", r"1999",
             ("GNU", "Lesser", "General", "Public", "License")),
    Question("When was version one point three of the GNU Free Documentation License published?", r"2008",
             ("GNU", "Free", "Documentation", "License")),
    Question("In which month and year was version two of the Apache License released?", r"January 2004|2004",
             ("Apache", "License")),
    Question("Which organisation holds the copyright of the GNU General Public License version three?",
             r"Free Software Foundation", ("GNU", "General", "Public", "License", "copyright")),
    Question("In which city is the address of the Free Software Foundation in the GPL version two?", r"Boston",
             ("Free", "Software", "Foundation", "GPL")),
    Question("Which university is named in the copyright line of the BSD license?", r"California|Berkeley",
             ("BSD", "copyright")),
    Question("Under the Apache license, which text file's notices must I include when I redistribute the work?",
             r"NOTICE", ("Apache", "notices", "redistribute")),
    Question("Under the Apache license, is the patent license perpetual?", r"perpetual|\byes\b",
             ("Apache", "patent", "perpetual")),
    Question("What does the Artistic License call the package when it has not been modified?",
             r"Standard Version", ("Artistic", "License", "package")),
    Question("What does the GNU Free Documentation License call the sections whose titles are designated as "
             "not to be changed?", r"Invariant", ("GNU", "Free", "Documentation", "License")),
    Question("Which version of the GNU General Public License does the GNU Lesser General Public License "
             "version three incorporate?", r"\b3\b|three", ("GNU", "Lesser", "General", "Public", "License")),
    Question("Under the Mozilla Public License version two, how many days after notice do I have to become "
             "compliant?", r"\b30\b|thirty", ("Mozilla", "Public", "License", "compliant")),
    Question("Under the GNU General Public License version three, after how many days without notice from the "
             "copyright holder is my license reinstated permanently?", r"\b60\b|sixty",
             ("GNU", "General", "Public", "License", "reinstated")),
    Question("Under the GNU General Public License version three, what is the preferred form of the work for "
             "making modifications to it called?", r"source code", ("GNU", "General", "Public", "License")),
]


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()


def domain_misses(question: Question, heard: str) -> int:
    """Domain words said that the transcript lacks."""
    got = set(words(heard))
    return sum(word.lower() not in got for word in question.domain)


def right(question: Question, reply: str) -> bool:
    return re.search(question.right, reply, re.IGNORECASE) is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="", help="language model profile (default: the default profile)")
    parser.add_argument("--only", choices=("spoken", "typed"), help="one of the two sessions")
    parser.add_argument("--reply-tokens", type=int, default=96)
    parser.add_argument("--research-tokens", type=int, default=Config.voice_research_tokens,
                        help="voice_research_tokens: the bound on a spoken turn's evidence")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="parlour-eval-"))
    config = Config(data_dir=str(work / "data"), llm_model=args.profile, reply_tokens=args.reply_tokens,
                    temperature=0.0, voice_research_tokens=args.research_tokens)
    docs = work / "docs"  # as text files: the license texts have no suffix `parlour index` reads
    docs.mkdir()
    for path in sorted(DOCS.iterdir()):
        if path.is_file():
            (docs / f"{path.name}.txt").write_text(path.read_text(errors="replace"))
    KnowledgeBase(config.knowledge_path).index(docs)
    stt, tts = load_stt(config), load_tts(config)
    server = RunningServer(config, load_llm(config), stt, tts)
    server.idle()
    print(f"{server.service.llm.name}, research {config.research}, spoken evidence up to "
          f"{config.voice_research_tokens} tokens, {len(QUESTIONS)} questions per session")

    totals = {}
    for mode in ("spoken", "typed"):
        if args.only and mode != args.only:
            continue
        client = Client(server.url())
        print(f"\n{mode} session")
        rows = []
        for n, question in enumerate(QUESTIONS, 1):
            if mode == "spoken":
                clip = b"".join(tts.synthesize(question.text)) + bytes(BYTES_PER_MS * RELEASE_MS)
                turn = parlour_turn(client, clip, args.reply_tokens, server.service.store)
                heard, first_audio = turn["heard"], turn["first_audio"]
                reply = server.service.store.transcript(client.session_id)[-1].get("content") or ""
                server.idle(timeout=900)  # each spoken turn is timed alone, after the background work
            else:
                events = client.ask(question.text, max_tokens=args.reply_tokens)
                heard, first_audio, reply = question.text, float("nan"), reply_text(events)
            ok = right(question, reply)
            misses = domain_misses(question, heard)
            rows.append((ok, misses, len(question.domain), first_audio))
            audio = f"{first_audio / 1000:5.2f} s" if first_audio == first_audio else "      "
            print(f"{n:>2} {'right' if ok else 'WRONG'} {audio}  heard: {heard}")
            print(f"   reply: {' '.join(reply.split())}")
        said = sum(r[2] for r in rows)
        totals[mode] = (sum(r[0] for r in rows), sum(r[1] for r in rows) / said,
                        statistics.median(r[3] for r in rows) if mode == "spoken" else None)
        client.close()

    print()
    for mode, (count, dwer, median) in totals.items():
        timing = f", median first audio {median / 1000:.2f} s" if median is not None else ""
        print(f"{mode}: {count} of {len(QUESTIONS)} right, domain-word error rate {dwer:.3f}{timing}")
    server.stop()


if __name__ == "__main__":
    main()
