#!/usr/bin/env python3
"""How well whisper hears spoken questions said by voices Parlour never uses, per voice and setting.

The questions are the research evaluation's (harness/knowledge/questions.py: the license texts and a
household's notes). Each is said by every voice of harness/voices.UNSEEN, and by Piper's voice as one
voice among them, under each condition: clean at the voice's own rate, slower (0.85) and faster
(1.2), and with pink noise at 20 and 10 dB SNR. The knowledge base is both folders indexed together,
as `parlour index` does, and its vocabulary is what the service gives whisper as hotwords.

For each whisper setting (beam size, with or without the vocabulary, with or without mending misheard
names) it prints, per voice and per
condition: the word error rate (jiwer; numbers said as words and heard as digits count as errors),
the domain-word error (the words a search needs that the transcript lacks), how often the spoken
evidence researched for what was heard holds the answer, and the median seconds a clip. Clips are
rendered once and heard by every setting.

Run: .venv/bin/python scripts/eval_hearing.py [--voices flite-slt,espeak-us] [--conditions clean,snr10]
         [--beams 1,5] [--hotwords vocabulary,none] [--mending on,off] [--stt-model DIR]
It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.knowledge.questions import BASES, Question, domain_misses, index_bases, right, words
from harness.voices import PIPER, UNSEEN, say
from models.llm import LanguageModel
from models.stt import WHISPER_RATE
from voice.config import Config
from voice.engines import llm_path, load_stt, load_tts
from voice.knowledge.base import KnowledgeBase
from voice.knowledge.research import Research, result_tokens

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_voice import wer

# A condition: (speed against the voice's own, SNR in dB or None for clean).
CONDITIONS = {"clean": (1.0, None), "slow": (0.85, None), "fast": (1.2, None), "snr20": (1.0, 20.0),
              "snr10": (1.0, 10.0)}


@dataclass(frozen=True)
class Clip:
    voice: str
    condition: str
    question: Question
    audio: bytes  # PCM16 at WHISPER_RATE


CLIPS = Path.home() / ".cache" / "parlour" / "eval-clips"  # rendered clips, kept between runs


def render(voices: list[str], conditions: list[str], questions: list[Question], tts) -> list[Clip]:
    clips = []
    for name in voices:
        for condition in conditions:
            for n, question in enumerate(questions):
                clips.append(Clip(name, condition, question, rendered(name, condition, question.text, n, tts)))
    return clips


def rendered(name: str, condition: str, text: str, seed: int, tts) -> bytes:
    """The clip of `text` said by voice `name` under `condition`, from the cache if made before."""
    speed, snr = CONDITIONS[condition]
    key = hashlib.sha256(f"{name}|{speed}|{snr}|{seed}|{text}".encode()).hexdigest()[:24]
    cached = CLIPS / f"{key}.pcm"
    if not cached.exists():
        CLIPS.mkdir(parents=True, exist_ok=True)
        cached.write_bytes(say(name, text, tts, rate=WHISPER_RATE, speed=speed, snr_db=snr, seed=seed))
    return cached.read_bytes()


@dataclass(frozen=True)
class Heard:
    clip: Clip
    text: str
    seconds: float
    found: bool  # the spoken evidence researched for what was heard holds the answer


def row(label: str, heard: list[Heard]) -> str:
    said = [h.clip.question.text for h in heard]
    missed = sum(domain_misses(h.clip.question, h.text) for h in heard)
    domain = sum(len(h.clip.question.domain) for h in heard)
    return (f"  {label:<18} word error {wer(said, [h.text for h in heard]):.3f}   "
            f"domain-word error {missed / domain:.3f}   answer in evidence {sum(h.found for h in heard):>3} "
            f"of {len(heard):<3}  {statistics.median(h.seconds for h in heard):.2f} s a clip")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--voices", default=",".join([v.name for v in UNSEEN] + [PIPER]))
    parser.add_argument("--conditions", default=",".join(CONDITIONS))
    parser.add_argument("--beams", default="1,5", help="whisper beam sizes to compare")
    parser.add_argument("--hotwords", default="vocabulary,none", help="vocabulary (the service's), none")
    parser.add_argument("--mending", default="on,off", help="mend misheard names (voice.knowledge.mending): on, off")
    parser.add_argument("--stt-model", default="", help="a faster-whisper model directory (default tiny.en)")
    parser.add_argument("--show", action="store_true", help="print every transcript that is not word for word")
    args = parser.parse_args()

    config = Config(stt_model=args.stt_model, threads=2)
    work = Path(tempfile.mkdtemp(prefix="parlour-hearing-"))
    knowledge = index_bases(KnowledgeBase(work / "knowledge.sqlite3"), work)
    vocabulary = " ".join(knowledge.vocabulary())
    # Evidence counted with the model's tokenizer, as the service counts it (voice/server.py).
    tokenizer = LanguageModel(llm_path(config), context=512, vocab_only=True)
    research = Research("auto", knowledge, spoken_tokens=config.voice_research_tokens, count=result_tokens(tokenizer))
    print(f"vocabulary: {vocabulary}")
    stt, tts = load_stt(config), load_tts(config)
    questions = [q for base in BASES for q in base.questions]
    voices, conditions = args.voices.split(","), args.conditions.split(",")
    clips = render(voices, conditions, questions, tts)
    print(f"{len(clips)} clips: {len(questions)} questions, {len(voices)} voices, {len(conditions)} conditions")

    mender = knowledge.mender()
    settings = [(int(beam), hotwords, mending) for beam in args.beams.split(",")
                for hotwords in args.hotwords.split(",") for mending in args.mending.split(",")]
    for beam, hotwords in dict.fromkeys((beam, hotwords) for beam, hotwords, _ in settings):
        given = vocabulary if hotwords == "vocabulary" else ""
        transcripts = [stt.transcribe(clip.audio, WHISPER_RATE, hotwords=given, beam_size=beam) for clip in clips]
        for mending in (m for b, h, m in settings if (b, h) == (beam, hotwords)):
            heard = []
            for clip, transcript in zip(clips, transcripts, strict=True):
                text = mender.mend(transcript.text) if mending == "on" else transcript.text
                evidence = research.for_question(text, spoken=True)
                found = right(clip.question, " ".join(m.get("content") or "" for m in evidence))
                heard.append(Heard(clip, text, transcript.seconds, found))
                if args.show and words(text) != words(clip.question.text):
                    print(f"    {clip.voice}/{clip.condition}: {text}")
            print(f"\nbeam {beam}, hotwords {hotwords}, mending {mending}")
            print(row("all", heard))
            for name in voices:
                print(row(name, [h for h in heard if h.clip.voice == name]))
            if len(conditions) > 1:
                for condition in conditions:
                    print(row(condition, [h for h in heard if h.clip.condition == condition]))


if __name__ == "__main__":
    main()
