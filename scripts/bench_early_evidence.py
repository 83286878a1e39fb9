#!/usr/bin/env python3
"""How early, while the key is held, is a spoken question's evidence known?

Preemptive prefill can only evaluate evidence the service already has. This measures, for the
research questions of scripts/bench_voice.py and scripts/eval_research.py, what the drafts a held
key makes would have found: each question is rendered by Piper, and whisper (with the knowledge
base's names, as the service runs it) transcribes the audio so far every 500 ms, as drafts do. Each
draft's text is researched as a spoken turn is (`Research.for_question`, the service's evidence
bound), and its evidence is compared, in the model's tokens, with the evidence of the question as
whisper hears it whole at release.

It prints, per question: how long it is spoken; the final evidence's tokens; for each draft, when
its audio ends (ms before the last word; a draft is ready about whisper's time after that) and how
many of the final evidence's leading tokens the draft's evidence already had (the most a prompt
that renders evidence before the question could have prefilled from it); and from when on the
drafts' evidence was the final evidence. Totals: medians, and the tokens known a second before the
last word beside the final evidence's.

Run: .venv/bin/python scripts/bench_early_evidence.py [--research-tokens 180]
It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.knowledge.questions import LICENSE_BASE
from models.audio import BYTES_PER_MS, RATE
from models.llm import LanguageModel
from voice.config import Config
from voice.engines import llm_path, load_stt, load_tts
from voice.knowledge.base import KnowledgeBase
from voice.knowledge.research import Research, result_tokens
from voice.realtime.protocol import DRAFT_STEP_BYTES

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_voice import QUESTIONS as BENCH_QUESTIONS


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--research-tokens", type=int, default=Config.voice_research_tokens)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="parlour-early-"))
    config = Config(data_dir=str(work / "data"))
    docs = work / "docs"
    docs.mkdir()
    for path in sorted(p for p in LICENSE_BASE.folder.rglob("*") if p.is_file()):
        (docs / f"{path.name}.txt").write_text(path.read_text(errors="replace"))
    knowledge = KnowledgeBase(config.knowledge_path)
    knowledge.index(docs)
    hotwords = " ".join(knowledge.vocabulary())
    stt, tts = load_stt(config), load_tts(config)
    vocab = LanguageModel(llm_path(config), context=512, vocab_only=True)
    research = Research("auto", knowledge, spoken_tokens=args.research_tokens, count=result_tokens(vocab))

    def evidence(question: str) -> list[int]:
        """The evidence's tokens as the model reads them; [] if the question is not researched."""
        exchange = research.for_question(question, spoken=True)
        return vocab.tokens([{"role": "user", "content": m["content"]} for m in exchange[1:]]) if exchange else []

    questions = BENCH_QUESTIONS + [q.text for q in LICENSE_BASE.questions]
    print(f"{vocab.name}, spoken evidence up to {args.research_tokens} tokens, a draft every "
          f"{DRAFT_STEP_BYTES // BYTES_PER_MS} ms of audio")
    print("per draft: ms before the last word / leading tokens of the final evidence it had")
    rows, whisper_s = [], []
    for question in questions:
        clip = b"".join(tts.synthesize(question))
        spoken_ms = len(clip) // BYTES_PER_MS
        final = evidence(stt.transcribe(clip, RATE, hotwords=hotwords).text)
        drafts = []
        for covered in range(DRAFT_STEP_BYTES, len(clip), DRAFT_STEP_BYTES):
            started = time.perf_counter()
            heard = stt.transcribe(clip[:covered], RATE, hotwords=hotwords).text
            whisper_s.append(time.perf_counter() - started)
            drafts.append((spoken_ms - covered // BYTES_PER_MS, common_prefix(evidence(heard), final) if heard else 0))
        whole = [before for before, had in drafts if had == len(final)]
        # From when on every draft had the whole final evidence (ms before the last word).
        settled = 0
        for before, had in reversed(drafts):
            if had != len(final):
                break
            settled = before
        known_1s = max((had for before, had in drafts if before >= 1000), default=0)
        rows.append((spoken_ms, len(final), settled, known_1s))
        print(f"{question}\n  spoken {spoken_ms} ms, evidence {len(final)} tokens; drafts: "
              + " ".join(f"{before}/{had}" for before, had in drafts)
              + f"; whole from {settled} ms before the last word" + ("" if whole else " (never before it)"))
    print(f"\n{len(rows)} questions; medians: spoken {statistics.median(r[0] for r in rows):.0f} ms, "
          f"final evidence {statistics.median(r[1] for r in rows):.0f} tokens, whole evidence known "
          f"{statistics.median(r[2] for r in rows):.0f} ms before the last word, "
          f"tokens known 1 s before it {statistics.median(r[3] for r in rows):.0f}; "
          f"whole evidence known 1 s before the last word in {sum(r[2] >= 1000 for r in rows)} of {len(rows)}; "
          f"a draft's whisper took {statistics.median(whisper_s) * 1000:.0f} ms (median)")


if __name__ == "__main__":
    main()
