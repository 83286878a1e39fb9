#!/usr/bin/env python3
"""A spoken research session through Parlour and through a plain streaming loop, side by side,
against each turn's floor, all measured in the same run on the same models.

The knowledge base is a folder of real documents (by default the license texts in
/usr/share/common-licenses), indexed as `parlour index` does. Each question is said by a voice
Parlour never uses (`--voice`, harness/voices.py; no microphone) and sent to a real Parlour server
as push-to-talk audio; first audio is what the client sees, from sending the commit to the first
audio delta.

The peer is the loop one would write first with the same packages: whisper on the clip, a search
with the same knowledge base (the same passages Parlour finds, uncut), the reply streamed from the
same model with llama.cpp's prefix cache, its first piece spoken by Piper at once (Parlour's
splitter), and the oldest message dropped when the context is full.

The floor of a turn is the work left after release, its parts measured alone: whisper on the clip
(none if a draft made while the key was held was the transcript), prefill of the tokens that turn
evaluated at release at its depth, decode of its first sentence, and Piper's first chunk of it.
The old floor, printed beside it, is what it was before prefill while the key is held: whisper on
the clip and prefill of everything the turn added (question, research), as if nothing were done
ahead. Per turn it prints the research's tokens, the tokens the drafts' guesses evaluated before
release (p: the last guess was the question, x: it was not, and the turn kept what it shared with
it, -: no guess) and the tokens evaluated at release; then the evidence placed after the history,
having been evaluated apart from it behind the system prompt and the history's last tokens
(models.llm: `evidence_apart`, deep in a session), the tokens of it evaluated apart after release,
and the time that and placing took. The floor counts those tokens' prefill at that depth.

Before the spoken turns, `--typed` (3) research questions are typed, as text: the text stream keeps
whole passages, so the spoken session starts 3,700 tokens deep and reaches the end of an 8,192-token
context, where history must make room.

Run: .venv/bin/python scripts/bench_voice.py [--turns 16] [--typed 3] [--profile qwen2.5-coder-0.5b] [--research off]
     [--release-ms 500] [--voice festival-slt-hts]
It prints figures and the goals beside them; it asserts nothing.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jiwer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.realtime import Client, RunningServer, done
from harness.voices import PIPER, say
from models.audio import BYTES_PER_MS, RATE
from models.llm import APART_AFTER, APART_CONTEXT
from voice.config import Config
from voice.engines import load_llm, load_stt, load_tts
from voice.knowledge.base import KnowledgeBase
from voice.knowledge.research import Research
from voice.text.sentences import Sentences

QUESTIONS = [
    "What does the GNU General Public License say about warranty?",
    "Can I sell copies of a program under the GPL?",
    "What does the Apache license say about patents?",
    "What must I include when I redistribute Apache licensed work?",
    "What is the difference between the LGPL and the GPL?",
    "What does the Mozilla Public License say about source code?",
    "What does the Artistic License say about modified versions?",
    "What does the BSD license require in binary form?",
    "What does Creative Commons Zero do with copyright?",
    "What does the GNU Free Documentation License say about invariant sections?",
    "How long does the GPL give to cure a violation?",
    "What does version three of the GPL say about installation information?",
    "What does the Apache license say about trademarks?",
    "Does the LGPL allow linking with proprietary programs?",
    "What does the GPL say about tivoization and user products?",
    "What does the Mozilla license say about larger works?",
]

# Typed before the spoken turns (`--typed`): the text stream keeps whole passages, so the session
# starts deep, as one does that began at the keyboard, and its spoken turns run into the context's end.
TYPED = [
    "What are the terms and conditions of the GNU General Public License version 3?",
    "What conditions does the Apache License version 2.0 set on redistribution?",
    "What does the GNU Lesser General Public License allow?",
]

RELEASE_MS = 500  # the key is let go this long after the last word


def wer(said: list[str], heard: list[str]) -> float:
    words = lambda text: " ".join(re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()) or "-"  # noqa: E731
    return jiwer.wer([words(t) for t in said], [words(t) for t in heard])


def first_sentence(text: str) -> str:
    sentences = Sentences()
    return (sentences.feed(text) or [sentences.flush()])[0] or "Hello."


def parlour_turn(client: Client, clip: bytes, max_tokens: int, store) -> dict:
    """One push-to-talk turn, the audio sent as a held key sends it (100 ms chunks, in real time);
    first audio as the client sees it, from the release (the commit)."""
    for start in range(0, len(clip), 4800):
        client.append_audio(clip[start:start + 4800])
        time.sleep(0.1)
    sent = time.perf_counter()
    client.send({"type": "input_audio_buffer.commit"})
    client.send({"type": "response.create",
                 "response": {"output_modalities": ["audio"], "max_output_tokens": max_tokens}})
    first_audio, transcript, heard = None, "", ""
    played_to, gaps = 0.0, 0.0  # where playback of the audio so far ends; the silences it waited through
    while True:
        event = client.recv(600)
        if event["type"] == "conversation.item.input_audio_transcription.completed":
            heard = event["transcript"]
        elif event["type"] == "response.output_audio.delta":
            arrived = (time.perf_counter() - sent) * 1000
            if first_audio is None:
                first_audio = played_to = arrived
            gaps += max(0.0, arrived - played_to)
            played_to = max(played_to, arrived) + len(base64.b64decode(event["delta"])) / BYTES_PER_MS
        elif event["type"] == "response.output_audio_transcript.delta":
            transcript += event["delta"]
        elif event["type"] == "response.done":
            response = event["response"]
            break
    figures = store.messages(client.session_id)[-1].figures  # the turn's stored record: every figure
    late = figures.get("preempted_late_tokens") or 0  # a guess's batch under way at the commit: waited for
    return {"first_audio": first_audio or float("nan"), "prompt": figures.get("prompt_tokens", 0),
            "gaps": gaps, "research_fit": figures.get("research_ms", 0) + figures.get("fit_ms", 0),
            "stt": figures.get("stt_ms", 0), "draft": bool(figures.get("stt_draft")), "heard": heard,
            # Work after release: what the turn evaluated, and a guess's batch under way at the commit.
            "new": figures.get("evaluated_tokens", 0) + late, "cached": figures.get("cached_tokens", 0) - late,
            "research": figures.get("research_tokens", 0), "preempted": figures.get("preempted"),
            # Evaluated before release by the drafts' guesses. A guess that was not the question (x)
            # kept only what it shared with the turn's prompt: evidence, most often.
            "ahead": figures.get("preempted_tokens") or 0,
            # Evidence evaluated apart (models.llm): the tokens placed after the history, those of
            # them evaluated apart after release, and the time that and placing took.
            "placed": figures.get("placed_tokens") or 0, "apart": figures.get("apart_tokens") or 0,
            "placing_ms": figures.get("placing_ms") or 0,
            "first_sentence": first_sentence(transcript), "status": response["status"]}


class PlainLoop:
    """The peer: whisper, search, the model with its prefix cache, the oldest message dropped when full."""

    def __init__(self, llm, stt, tts, research: Research, instructions: str, budget: int, max_tokens: int):
        self.llm, self.stt, self.tts, self.research = llm, stt, tts, research
        self.messages = [{"role": "system", "content": instructions}]
        self.budget, self.max_tokens = budget, max_tokens

    def _ask(self, question: str):
        self.messages += [{"role": "user", "content": question}, *self.research.for_question(question)]
        while self.llm.count(self.messages) > self.budget and len(self.messages) > 2:
            del self.messages[1]
        return self.llm.stream(self.messages, self.max_tokens, temperature=0)

    def typed(self, question: str) -> None:
        """A typed turn before the spoken ones (untimed), answered as the spoken ones are."""
        self.messages.append({"role": "assistant", "content": "".join(self._ask(question))})

    def turn(self, clip: bytes) -> dict:
        started = time.perf_counter()
        question = self.stt.transcribe(clip, RATE).text
        reply = self._ask(question)
        sentences, text, first_audio = Sentences(), "", None
        for piece in reply:
            text += piece
            for sentence in sentences.feed(piece):
                if first_audio is None:
                    next(iter(self.tts.synthesize(sentence)))
                    first_audio = (time.perf_counter() - started) * 1000
        if first_audio is None:
            next(iter(self.tts.synthesize(sentences.flush() or "Hello.")))
            first_audio = (time.perf_counter() - started) * 1000
        self.messages.append({"role": "assistant", "content": text})
        return {"first_audio": first_audio, "prompt": reply.stats.prompt_tokens, "cached": reply.stats.cached_tokens,
                "heard": question}


class Floor:
    """Each part of a turn's first audio, measured alone; prefill on a copy of the model whose cache
    holds filler text of the turn's depth."""

    def __init__(self, llm, stt, tts, filler_text: str):
        self.llm, self.stt, self.tts = llm, stt, tts
        self.filler = llm._tokenize(filler_text)
        self.apart_ms = self.model_ms(32 + APART_CONTEXT, 256, 0)[0] / 256  # a token's prefill where a block's is

    def model_ms(self, depth: int, new: int, decoded: int) -> tuple[float, float]:
        """Prefill of `new` tokens after `depth` cached ones, then `decoded` single-token steps."""
        llm = self.llm._llm
        new = max(1, new)
        depth = min(depth, len(self.filler) - new - decoded)
        with self.llm._lock:
            llm.n_tokens = min(llm.n_tokens, depth)  # what lies beyond the depth is evaluated again
            if llm.n_tokens < depth:
                llm.eval(self.filler[llm.n_tokens:depth])
            started = time.perf_counter()
            llm.eval(self.filler[depth:depth + new])
            prefilled = time.perf_counter()
            for token in self.filler[depth + new:depth + new + decoded]:
                llm.eval([token])
            decoded_at = time.perf_counter()
            llm.n_tokens = depth + new  # the next turn goes on from the filler, not from these steps
        return (prefilled - started) * 1000, (decoded_at - prefilled) * 1000

    def measure(self, clip: bytes, depth: int, new: int, ahead: int, draft: bool, sentence: str,
                apart: int = 0) -> dict:
        """The turn's floor as work after release: whisper unless a draft made while the key was
        held was the transcript, prefill of the `new` tokens left at release, decode and Piper. The
        old floor counts whisper and, with the `ahead` tokens the prompt read from guesses made
        before release, the prefill of everything the turn added, as if nothing were done while the
        key was held. `apart`: tokens evaluated apart after release, near the start of a context, at
        `apart_ms` a token (measured once: moving the filler's cache there and back for each turn
        would cost more than the bench)."""
        started = time.perf_counter()
        heard = self.stt.transcribe(clip, RATE).text
        stt_ms = (time.perf_counter() - started) * 1000
        decoded = len(self.llm._tokenize(sentence)) or 1
        old_prefill, decode = self.model_ms(depth - ahead, new + ahead, decoded)
        prefill = self.model_ms(depth, new, decoded)[0] if ahead else old_prefill
        prefill += apart * self.apart_ms
        started = time.perf_counter()
        next(iter(self.tts.synthesize(sentence)))
        tts_ms = (time.perf_counter() - started) * 1000
        return {"stt": 0.0 if draft else stt_ms, "prefill": prefill, "decode": decode, "tts": tts_ms, "heard": heard,
                "total": (0.0 if draft else stt_ms) + prefill + decode + tts_ms,
                "old": stt_ms + old_prefill + decode + tts_ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=16)
    parser.add_argument("--profile", default="", help="language model profile (default: the default profile)")
    parser.add_argument("--docs", default="/usr/share/common-licenses", help="the knowledge base's documents")
    parser.add_argument("--research", default="auto", choices=("auto", "off"))
    parser.add_argument("--context", type=int, default=8192)
    parser.add_argument("--reply-tokens", type=int, default=96)
    parser.add_argument("--research-tokens", type=int, default=Config.voice_research_tokens,
                        help="voice_research_tokens: the bound on a spoken turn's evidence")
    parser.add_argument("--typed", type=int, default=3, choices=range(len(TYPED) + 1),
                        help="typed research questions before the spoken ones (whole passages)")
    parser.add_argument("--no-peer", action="store_true", help="Parlour and the floor only")
    parser.add_argument("--voice", default="festival-slt-hts",
                        help=f"who says the questions: harness/voices.py's names, or {PIPER} (Parlour's own)")
    parser.add_argument("--release-ms", type=int, default=RELEASE_MS,
                        help="how long after the last word the key is let go")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="parlour-bench-"))
    config = Config(data_dir=str(work / "data"), context=args.context, reply_tokens=args.reply_tokens,
                    llm_model=args.profile, research=args.research, temperature=0.0,
                    voice_research_tokens=args.research_tokens)
    docs = work / "docs"  # as text files: the license texts have no suffix `parlour index` reads
    docs.mkdir()
    texts = [p for p in sorted(Path(args.docs).rglob("*")) if p.is_file()]
    for path in texts:
        (docs / f"{path.name}.txt").write_text(path.read_text(errors="replace"))
    knowledge = KnowledgeBase(config.knowledge_path)
    knowledge.index(docs)
    stt, tts = load_stt(config), load_tts(config)
    llm = load_llm(config)
    peer_llm = load_llm(dataclasses.replace(config, kv_shift=False))  # llama.cpp's prefix cache alone
    floor = Floor(load_llm(config), stt, tts, " ".join(p.read_text(errors="replace") for p in texts))
    server = RunningServer(config, llm, stt, tts)
    client = Client(server.url())
    server.idle()  # the system prompt is warmed at start, as in a real service
    research = Research(args.research, knowledge if args.research != "off" else None)
    peer = PlainLoop(peer_llm, stt, tts, research, config.instructions, args.context - args.reply_tokens,
                     args.reply_tokens)

    depth = 0
    for question in TYPED[:args.typed] if args.research != "off" else []:
        depth = int(done(client.ask(question, max_tokens=args.reply_tokens))["usage"]["input_tokens"])
        server.idle()
        if not args.no_peer:
            peer.typed(question)
    print(f"{llm.name}, context {args.context}, {args.turns} spoken turns said by {args.voice}, "
          f"research {args.research} (spoken evidence up to {args.research_tokens} tokens), "
          f"key let go {args.release_ms} ms after the last word; ms")
    if depth:
        print(f"after {args.typed} typed research turns first, the prompt held {depth} tokens")
    if getattr(llm, "evidence_apart", False):
        print(f"evidence is evaluated apart behind the system prompt "
              f"({llm.count([{'role': 'system', 'content': config.instructions}])} tokens) and the history's last "
              f"{APART_CONTEXT} once the history holds {APART_AFTER}, and placed after it")
    print(f"{'turn':>4} {'parlour':>8} {'gaps':>5} {'stt':>5} {'r+f':>4} {'prompt':>6} {'cached':>6} {'rsrch':>5} "
          f"{'ahead':>6} {'new':>5} {'placed':>6} {'apart':>5} {'plc':>5} | {'peer':>7} {'prompt':>6} "
          f"{'cached':>6} | {'floor':>6} {'stt':>4} {'pre':>5} {'dec':>4} {'tts':>4} {'old':>6} | {'x floor':>7}")
    rows = []
    for n in range(args.turns):
        clip = say(args.voice, QUESTIONS[n % len(QUESTIONS)], tts, rate=RATE) + bytes(BYTES_PER_MS * args.release_ms)
        ours = parlour_turn(client, clip, args.reply_tokens, server.service.store)
        # Background work is waited for, so each turn is measured alone: after a KV shift that is
        # the exact refresh, about 2 minutes of a full context on the default model.
        server.idle(timeout=900)
        theirs = {"first_audio": float("nan"), "prompt": 0, "cached": 0, "heard": ""} if args.no_peer else \
            peer.turn(clip)
        # Of the guesses' tokens, those this prompt read: past the last prompt, within what was cached.
        used = max(0, min(ours["ahead"], ours["cached"] - (rows[-1][0]["prompt"] if rows else 0)))
        base = floor.measure(clip, ours["cached"], ours["new"], used, ours["draft"], ours["first_sentence"],
                             ours["apart"])
        rows.append((ours, theirs, base))
        stt = f"{ours['stt']}{'d' if ours['draft'] else ''}"  # d: a draft made while the key was held
        # Tokens evaluated before release: p, the guess was the question; x, it was not; -, no guess.
        mark = {True: "p", False: "x", None: "-"}[ours["preempted"]]
        ahead = f"{ours['ahead']}{mark}"
        print(f"{n + 1:>4} {ours['first_audio']:>8.0f} {ours['gaps']:>5.0f} {stt:>5} {ours['research_fit']:>4} "
              f"{ours['prompt']:>6} {ours['cached']:>6} {ours['research']:>5} {ahead:>6} {ours['new']:>5} "
              f"{ours['placed']:>6} {ours['apart']:>5} {ours['placing_ms']:>5} | "
              f"{theirs['first_audio']:>7.0f} {theirs['prompt']:>6} {theirs['cached']:>6} | {base['total']:>6.0f} "
              f"{base['stt']:>4.0f} {base['prefill']:>5.0f} {base['decode']:>4.0f} {base['tts']:>4.0f} "
              f"{base['old']:>6.0f} | "
              f"{ours['first_audio'] / base['total']:>7.2f}", flush=True)

    ours = [o["first_audio"] for o, _, _ in rows]
    theirs = [t["first_audio"] for _, t, _ in rows]
    floors = [b["total"] for _, _, b in rows]
    median = statistics.median(ours)
    print(f" med {median:>8.0f} {statistics.median(o['gaps'] for o, _, _ in rows):>5.0f} {'':>62} | "
          f"{statistics.median(theirs):>7.0f} {'':>13} | {statistics.median(floors):>6.0f} {'':>20} "
          f"{statistics.median(b['old'] for _, _, b in rows):>6.0f}")
    summary = {
        "median_first_audio_ms": round(median),
        "peer_median_first_audio_ms": round(statistics.median(theirs)) if not args.no_peer else None,
        "worst_turn_over_median": round(max(ours) / median, 2),
        "turns_faster_than_peer": sum(o < t for o, t in zip(ours, theirs, strict=True)),
        "turns_within_1.5x_floor": sum(o <= 1.5 * f for o, f in zip(ours, floors, strict=True)),
        # Silence inside a reply: playback that had to wait for the next piece of audio.
        "turns_with_gaps": sum(o["gaps"] > 0 for o, _, _ in rows),
        "turns": len(rows),
        "transcripts_from_drafts": sum(o["draft"] for o, _, _ in rows),
        # How often a question guessed while the key was held was the one asked, of the guesses made.
        "guesses_held": sum(o["preempted"] is True for o, _, _ in rows),
        "guesses_wrong": sum(o["preempted"] is False for o, _, _ in rows),
        "median_research_tokens": statistics.median(o["research"] for o, _, _ in rows),
        "median_tokens_at_release": statistics.median(o["new"] for o, _, _ in rows),
        "turns_with_evidence_placed": sum(o["placed"] > 0 for o, _, _ in rows),
        "median_evaluated_apart_at_release": statistics.median(o["apart"] for o, _, _ in rows),
        "median_old_floor_ms": round(statistics.median(b["old"] for _, _, b in rows)),
        # Word error rate of what was heard at the commit: Parlour (drafts included) and the peer
        # (whisper on the whole clip at the commit), against the questions as written.
        "wer": round(wer([QUESTIONS[n % len(QUESTIONS)] for n in range(len(rows))],
                         [o["heard"] for o, _, _ in rows]), 3),
        "peer_wer": round(wer([QUESTIONS[n % len(QUESTIONS)] for n in range(len(rows))],
                              [t["heard"] for _, t, _ in rows]), 3) if not args.no_peer else None,
        "whole_clip_wer": round(wer([QUESTIONS[n % len(QUESTIONS)] for n in range(len(rows))],
                                    [b["heard"] for _, _, b in rows]), 3),
        "largest_prompt": max(o["prompt"] for o, _, _ in rows),
    }
    print("goals: no turn over 2x the median; faster than the peer on every turn; every turn within 1.5x its floor")
    print(json.dumps(summary))
    client.close()
    server.stop()


if __name__ == "__main__":
    main()
