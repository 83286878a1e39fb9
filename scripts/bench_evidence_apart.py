#!/usr/bin/env python3
"""Evidence evaluated apart from the history, then placed after it in the cache: is the answer the
same, and what is left to evaluate when the key is let go? (docs/speed.md: Evidence evaluated apart)

A deep session is evaluated once: the system prompt and bench_voice.py's three typed research turns,
whole passages as the text stream keeps them, each answered by its sentences that bear most on the
question. Then each research question of the evaluation (harness/knowledge/questions.py, as written)
gets its spoken evidence as a spoken turn does (the research policy as served, the model's tokenizer
counting), laid out as the model reads it (the evidence, then the question, in the user's message),
and is answered greedily five ways:
- exact: the evidence and the question evaluated after the history, as Parlour does today (the peer);
- apart: the evidence evaluated in a second context on the same weights, behind the system prompt
  alone (a shared prefix, so the block does not begin cold), its cells saved
  (llama_state_seq_get_data), put into the session's context as sequence 1, moved after the
  history (llama_memory_seq_add) and copied into sequence 0 (llama_memory_seq_cp), then the
  question evaluated after them. In one context, a block evaluated as a second sequence costs what it
  costs at the session's depth: attention spans every cell in use, masked;
- apart, first tokens again: the same, with the block's first `--recompute` tokens evaluated again
  in place, after the history (the block's opening then reads the history, as APE and EPIC do);
- passages: each passage of the evidence evaluated apart as its own block, all placed one after
  another, then the answering line and the question evaluated (blocks of this size could be kept
  and reused from draft to draft, turn to turn, or made when a folder is indexed);
- floor: the question alone after the history, no evidence.
It prints per question the evidence tokens, the time from release to the first token (for apart: the
placing, the question and the first token; the block's own evaluation comes while the key is held and
is printed apart), whether each reply's first sentence is the exact one's, and whether each reply is
right; then the medians and counts.

Run: .venv/bin/python scripts/bench_evidence_apart.py [--first 20] [--recompute 8] [--reply-tokens 40]
It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import ctypes
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.knowledge.questions import BASES, index_bases, right
from models.engine import EngineSettings
from models.kv_cache import common_prefix
from models.llm import LanguageModel
from voice.config import DEFAULT_INSTRUCTIONS, Config
from voice.engines import llm_path
from voice.knowledge.base import ANSWER_FROM_RESULTS, KnowledgeBase
from voice.knowledge.research import Research, key_sentences, result_tokens
from voice.turns.prompt_layout import compact_calls, evidence_first

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_voice import TYPED, first_sentence

BATCH = 512


def load_model(path: Path):
    """llama.cpp's model, loaded as Parlour loads it by default (models.engine: no repacking)."""
    import llama_cpp as lib

    loading = lib.llama_model_default_params()
    loading.use_extra_bufts = EngineSettings().repack
    return lib.llama_model_load_from_file(str(path).encode(), loading)


class Context:
    """One llama.cpp context on a loaded model, driven through the low-level API: llama-cpp-python's
    `Llama` evaluates sequence 0 alone and cannot share its weights with a second context."""

    def __init__(self, model, context: int, sequences: int, threads: int):
        import llama_cpp as lib

        self.lib = lib
        params = lib.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = context, BATCH, BATCH
        params.n_seq_max, params.kv_unified = sequences, True
        params.n_threads = params.n_threads_batch = threads
        params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED  # as Parlour runs (models.engine)
        self.ctx = lib.llama_init_from_model(model, params)
        self.memory = lib.llama_get_memory(self.ctx)
        self.vocab = lib.llama_model_get_vocab(model)
        self.n_vocab = lib.llama_vocab_n_tokens(self.vocab)
        self.batch = lib.llama_batch_init(BATCH, 0, 1)

    def evaluate(self, tokens: list[int], position: int, sequence: int = 0) -> None:
        """Evaluate `tokens` from `position` on in `sequence`; logits for the last one."""
        batch = self.batch
        for start in range(0, len(tokens), BATCH):
            chunk = tokens[start:start + BATCH]
            batch.n_tokens = len(chunk)
            for i, token in enumerate(chunk):
                batch.token[i], batch.pos[i] = token, position + start + i
                batch.n_seq_id[i], batch.seq_id[i][0] = 1, sequence
                batch.logits[i] = start + i == len(tokens) - 1
            if self.lib.llama_decode(self.ctx, batch) != 0:
                raise RuntimeError("llama_decode failed")

    def greedy(self, position: int, most: int) -> str:
        """The reply from `position` on in sequence 0, each token the likeliest."""
        pieces = []
        for n in range(most):
            logits = np.ctypeslib.as_array(self.lib.llama_get_logits_ith(self.ctx, -1), shape=(self.n_vocab,))
            token = int(np.argmax(logits))
            if self.lib.llama_vocab_is_eog(self.vocab, token):
                break
            piece = ctypes.create_string_buffer(64)
            size = self.lib.llama_token_to_piece(self.vocab, token, piece, 64, 0, False)
            pieces.append(piece.raw[:size])
            self.evaluate([token], position + n)
        return b"".join(pieces).decode("utf-8", "replace")

    def remove(self, sequence: int, start: int, end: int = -1) -> None:
        """Take `sequence`'s cells at positions `start` to `end` (-1: on) out of the cache."""
        self.lib.llama_memory_seq_rm(self.memory, sequence, start, end)

    def saved(self, sequence: int = 0) -> ctypes.Array[ctypes.c_uint8]:
        """`sequence`'s cells as llama.cpp serializes them, positions and all."""
        size = self.lib.llama_state_seq_get_size(self.ctx, sequence)
        state = (ctypes.c_uint8 * size)()
        self.lib.llama_state_seq_get_data(self.ctx, state, size, sequence)
        return state

    def restore(self, state: ctypes.Array[ctypes.c_uint8], sequence: int) -> None:
        """Cells `saved` gave, as `sequence`'s (emptied first), at their own positions."""
        if not self.lib.llama_state_seq_set_data(self.ctx, state, len(state), sequence):
            raise RuntimeError("llama_state_seq_set_data refused the block")

    def place(self, start: int, end: int, to: int) -> None:
        """Move sequence 1's cells at positions `start` to `end` to begin at `to`, into sequence 0,
        and empty sequence 1: its other cells are dropped."""
        lib = self.lib
        self.remove(1, 0, start)
        self.remove(1, end)
        lib.llama_memory_seq_add(self.memory, 1, start, end, to - start)
        lib.llama_memory_seq_cp(self.memory, 1, 0, to, to + end - start)
        self.remove(1, -1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", type=int, default=0, help="only the first N questions of each base")
    parser.add_argument("--recompute", type=int, default=8, help="the block's first tokens evaluated again in place")
    parser.add_argument("--reply-tokens", type=int, default=40)
    args = parser.parse_args()
    config = Config()
    work = Path(tempfile.mkdtemp(prefix="parlour-apart-"))
    knowledge = index_bases(KnowledgeBase(work / "knowledge.sqlite3"), work)
    tokenizer = LanguageModel(llm_path(config), context=config.context, vocab_only=True)
    research = Research("auto", knowledge, spoken_tokens=config.voice_research_tokens, count=result_tokens(tokenizer))

    def rendered(messages: list[dict], reply: bool = True) -> str:
        """The prompt text the model reads for `messages`, as laid out for a turn."""
        return tokenizer._render(evidence_first(compact_calls(messages)), generation_prompt=reply)

    system = [{"role": "system", "content": DEFAULT_INSTRUCTIONS}]
    history = list(system)
    for question in TYPED:
        exchange = research.for_question(question)
        passages = knowledge.search(question, research.results)
        answer = key_sentences(question, passages, 60, research.count).split("\n")[0].split("] ", 1)[-1]
        history += [{"role": "user", "content": question}, *exchange, {"role": "assistant", "content": answer}]
    history_text = rendered(history, reply=False)
    history_tokens = tokenizer._text_tokens(history_text)
    prefix = len(tokenizer._text_tokens(rendered(system, reply=False)))
    model = load_model(llm_path(config))
    session = Context(model, config.context + 1024, 2, config.threads)
    blocks = Context(model, 1024, 1, config.threads)  # evidence evaluated apart: behind the system prompt alone
    started = time.perf_counter()
    session.evaluate(history_tokens, 0)
    depth = len(history_tokens)
    blocks.evaluate(history_tokens[:prefix], 0)
    print(f"{llm_path(config).name}, {config.threads} threads: the history holds {depth} tokens "
          f"(evaluated in {time.perf_counter() - started:.1f} s), the shared prefix {prefix}")
    ways = ("exact", "apart", "again", "passages", "floor")
    print(f"{'':4} {'evidence':>8} " + " ".join(f"{w + ' s':>10}" for w in (*ways, "block", "blocks"))
          + "  first sentence the exact one's (apart, again, passages); right (exact, apart, again, passages, floor)")
    rows = []
    for base in BASES:
        for n, question in enumerate(base.questions[:args.first or None]):
            asked = [*history, {"role": "user", "content": question.text}]
            exchange = research.for_question(question.text, spoken=True)
            full_text = rendered(asked + exchange)
            full, bare = tokenizer._text_tokens(full_text), tokenizer._text_tokens(rendered(asked))
            # Where the evidence ends: the question's own tokens are the prompt's last ones after it.
            ends = len(full) - (len(bare) - common_prefix(bare, full)) if exchange else depth
            evidence = full[depth:ends]
            began = time.perf_counter()
            block = evaluated_apart(blocks, prefix, evidence)
            times = {"block": time.perf_counter() - began}
            # Passage-sized blocks, each apart: the text after the history, cut before each "[n] "
            # heading and before the answering line, each piece tokenized alone.
            text = full_text[len(history_text):]
            cut = [m.start() for m in re.finditer(r"\n\n\[\d+\] |\n\n" + re.escape(ANSWER_FROM_RESULTS), text)]
            pieces = [text[a:b] for a, b in zip([0, *cut[:-1]], cut, strict=True)] if cut else []
            began = time.perf_counter()
            passage_blocks = [(len(piece), evaluated_apart(blocks, prefix, piece))
                              for piece in map(tokenizer._tokenize, pieces)]
            times["blocks"] = time.perf_counter() - began
            tail = tokenizer._tokenize(text[cut[-1]:]) if cut else []
            replies = {}
            for way in ways:
                session.remove(0, depth)
                prompt = bare if way == "floor" else full
                began = time.perf_counter()
                if way in ("apart", "again"):
                    # llama.cpp evaluates a sequence's positions in order: the first tokens again come
                    # before the rest of the block is placed.
                    again = args.recompute if way == "again" else 0
                    if again:
                        session.evaluate(evidence[:again], depth)
                    session.restore(block, 1)
                    session.place(prefix + again, prefix + len(evidence), depth + again)
                    session.evaluate(prompt[ends:], ends)
                elif way == "passages" and pieces:
                    at = depth
                    for length, state in passage_blocks:
                        session.restore(state, 1)
                        session.place(prefix, prefix + length, at)
                        at += length
                    session.evaluate(tail, at)
                    prompt = [0] * (at + len(tail))  # only its length is read
                else:
                    session.evaluate(prompt[depth:], depth)
                times[way] = time.perf_counter() - began
                replies[way] = session.greedy(len(prompt), args.reply_tokens)
            firsts = {way: first_sentence(reply) for way, reply in replies.items()}
            same = [firsts[w] == firsts["exact"] for w in ("apart", "again", "passages")]
            correct = [right(question, replies[w]) for w in ways]
            rows.append((len(evidence), times, same, correct))
            print(f"{base.name[0]}{n + 1:<3} {len(evidence):>8} " + " ".join(
                f"{times[w]:>10.2f}" for w in (*ways, "block", "blocks"))
                + f"  {' '.join('same' if s else 'DIFF' for s in same)}; "
                + " ".join("right" if c else "WRONG" for c in correct), flush=True)
            for way in ("exact", "apart", "again", "passages") if not all(same) else ():
                print(f"     {way}: {firsts[way]}")
    print()
    for way in (*ways, "block", "blocks"):
        print(f"{way:<8} median {statistics.median(r[1][way] for r in rows):.2f} s")
    print(f"evidence: median {statistics.median(r[0] for r in rows)} tokens")
    for k, way in enumerate(("apart", "again", "passages")):
        print(f"{way}: first sentence the exact one's {sum(r[2][k] for r in rows)} of {len(rows)}")
    for k, way in enumerate(ways):
        print(f"{way}: right {sum(r[3][k] for r in rows)} of {len(rows)}")


def evaluated_apart(blocks: Context, prefix: int, tokens: list[int]) -> ctypes.Array[ctypes.c_uint8]:
    """`tokens` evaluated behind the first `prefix` positions of `blocks`, and saved, prefix and all."""
    blocks.remove(0, prefix)
    blocks.evaluate(tokens, prefix)
    return blocks.saved()


if __name__ == "__main__":
    main()
