#!/usr/bin/env python3
"""Spoken turns through a real server, against the floor of each turn measured in the same run.

Each turn's question is spoken by Piper (no microphone), sent as push-to-talk audio, and answered
with research over a generated knowledge base, so the session grows to thousands of tokens. For each
turn it prints first_audio_ms and its parts as the server reported them, the prompt and cached
tokens, and the floor: whisper on that clip alone, prefill of only the turn's new tokens, decode of
the first sentence, and Piper's first sentence, each measured alone (the prefill and decode on a
second copy of the model, so the server's KV cache is left as it was). Then the medians.

Run: .venv/bin/python scripts/bench_voice.py [--turns 12] [--context 8192]
This prints figures; it asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.realtime import Client, RunningServer, done  # noqa: E402
from voice.config import Config  # noqa: E402
from voice.engines import load_llm, load_stt, load_tts  # noqa: E402
from voice.knowledge import KnowledgeBase  # noqa: E402
from voice.speech import Sentences  # noqa: E402

TOPICS = ["harbour", "ferries", "weather", "markets", "music", "bridges", "castles", "rivers",
          "islands", "libraries", "trains", "gardens", "bakeries", "museums", "festivals", "beaches"]


def make_knowledge(folder: Path) -> None:
    folder.mkdir(parents=True)
    for topic in TOPICS:
        paragraphs = [f"# The {topic} of Galway\n"] + [
            f"Note {n} on the {topic}: the {topic} of Galway were surveyed in {1900 + 7 * n}, "
            f"and locals still argue about which of the {topic} is the oldest." for n in range(20)]
        (folder / f"{topic}.md").write_text("\n\n".join(paragraphs))


def timed(function, *args):
    started = time.perf_counter()
    result = function(*args)
    return result, (time.perf_counter() - started) * 1000


def floor_of(turn: dict, floor_llm, stt, tts, clip: bytes) -> dict:
    """Each part of a turn's first audio, measured alone."""
    _, stt_ms = timed(stt.transcribe, clip, 24_000)
    new_tokens = max(1, turn["evaluated"])
    # Prefill of only the new tokens: a fresh prompt of that many tokens, from an empty cache.
    filler = [{"role": "user", "content": "word " * new_tokens}]
    floor_llm._llm.reset()
    reply = floor_llm.stream(filler[:1], max_tokens=1)
    reply.text()
    prefill_ms = reply.stats.ttft_s * 1000
    # Decode of the first sentence: as many tokens as it has, after a short prompt.
    sentence_tokens = len(floor_llm._tokenize(turn["first_sentence"])) or 1
    reply = floor_llm.stream([{"role": "user", "content": "Tell me a story."}], max_tokens=sentence_tokens)
    reply.text()
    decode_ms = (reply.stats.total_s - reply.stats.ttft_s) * 1000
    started = time.perf_counter()
    next(iter(tts.synthesize(turn["first_sentence"] or "Hello.")))
    tts_ms = (time.perf_counter() - started) * 1000
    return {"stt": stt_ms, "prefill": prefill_ms, "decode": decode_ms, "tts": tts_ms,
            "total": stt_ms + prefill_ms + decode_ms + tts_ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--context", type=int, default=8192)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="parlour-bench-"))
    config = Config(data_dir=str(work / "data"), context=args.context, reply_tokens=96)
    make_knowledge(work / "docs")
    KnowledgeBase(config.knowledge_path).index(work / "docs")
    llm, stt, tts = load_llm(config), load_stt(config), load_tts(config)
    floor_llm = load_llm(config)
    server = RunningServer(config, llm, stt, tts)
    client = Client(server.url())

    header = (f"{'turn':>4} {'first_audio':>11} {'stt':>5} {'fit':>4} {'ttft':>5} {'prompt':>6} {'cached':>6} "
              f"{'new':>5} | {'floor':>6} {'f.stt':>5} {'f.pre':>6} {'f.dec':>5} {'f.tts':>5} | {'ratio':>5}")
    print(f"context {args.context}, {args.turns} spoken turns with research; times in ms")
    print(header)
    rows = []
    for n in range(args.turns):
        topic = TOPICS[n % len(TOPICS)]
        clip = b"".join(tts.synthesize(f"What do my notes say about the {topic}?"))
        events = client.speak(clip, max_tokens=96)
        metadata = done(events)["metadata"]
        transcript = "".join(e["delta"] for e in events if e["type"] == "response.output_audio_transcript.delta")
        sentences = Sentences()
        first = (sentences.feed(transcript) or [sentences.flush()])[0]
        turn = {key: int(metadata.get(key, 0)) for key in
                ("first_audio_ms", "stt_ms", "fit_ms", "ttft_ms", "prompt_tokens", "cached_tokens", "evaluated_tokens")}
        turn["evaluated"], turn["first_sentence"] = turn["evaluated_tokens"], first
        server.idle()
        floor = floor_of(turn, floor_llm, stt, tts, clip)
        ratio = turn["first_audio_ms"] / floor["total"] if floor["total"] else float("nan")
        rows.append((turn, floor, ratio))
        print(f"{n + 1:>4} {turn['first_audio_ms']:>11} {turn['stt_ms']:>5} {turn['fit_ms']:>4} {turn['ttft_ms']:>5} "
              f"{turn['prompt_tokens']:>6} {turn['cached_tokens']:>6} {turn['evaluated_tokens']:>5} | "
              f"{floor['total']:>6.0f} {floor['stt']:>5.0f} {floor['prefill']:>6.0f} {floor['decode']:>5.0f} "
              f"{floor['tts']:>5.0f} | {ratio:>5.2f}")
    median = lambda values: statistics.median(values)
    print(f"{'med':>4} {median([t['first_audio_ms'] for t, _, _ in rows]):>11.0f} "
          f"{median([t['stt_ms'] for t, _, _ in rows]):>5.0f} {median([t['fit_ms'] for t, _, _ in rows]):>4.0f} "
          f"{median([t['ttft_ms'] for t, _, _ in rows]):>5.0f} {median([t['prompt_tokens'] for t, _, _ in rows]):>6.0f} "
          f"{median([t['cached_tokens'] for t, _, _ in rows]):>6.0f} {median([t['evaluated_tokens'] for t, _, _ in rows]):>5.0f} | "
          f"{median([f['total'] for _, f, _ in rows]):>6.0f} {median([f['stt'] for _, f, _ in rows]):>5.0f} "
          f"{median([f['prefill'] for _, f, _ in rows]):>6.0f} {median([f['decode'] for _, f, _ in rows]):>5.0f} "
          f"{median([f['tts'] for _, f, _ in rows]):>5.0f} | {median([r for _, _, r in rows]):>5.2f}")
    client.close()
    server.stop()


if __name__ == "__main__":
    main()
