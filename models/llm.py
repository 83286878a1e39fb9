"""The local language model through llama-cpp-python, with the GGUF's own chat template.

`LanguageModel` renders OpenAI-shaped messages with the template stored in the GGUF, counts the
rendered prompt's tokens exactly (`count`) and per message (`count_message`, cached, so fitting
measures each message once), and streams replies (`stream`) that can be cancelled from another
thread. Every reply reports how much of the prompt llama.cpp reused from its KV cache: a prompt
that extends the previous one costs only its new tokens. A turn's evidence deep in a session may
be evaluated apart from the history and placed after it (`apart`; docs/speed.md: Evidence evaluated
apart, then placed). The template itself is
models.chat_template's; the reply as it streams is models.reply's; what of llama-cpp-python's
`Llama` is private (the cache's tokens and cells) is reached through models.llama_context.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import json
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import jinja2
import numpy as np

from fitting.measure import estimate_message
from models.call_writing import CallShape, CallWriting
from models.chat_template import ChatTemplate, CountCache, Message
from models.engine import EngineSettings, cpu_features, open_llama
from models.kv_cache import common_prefix, removed_spans
from models.llama_context import BlockContext, LlamaContext
from models.reply import ContextOverflow, ReplyStream
from models.tool_calls import MARKERS

# Fixed system message used to measure a lone non-system message: the template renders the pair,
# and the stub's own tokens are subtracted (some templates insert a default system prompt otherwise).
_STUB_SYSTEM = {"role": "system", "content": "."}
_STUB_USER = {"role": "user", "content": "."}
_CALL_MARK = "parlour_tool_name"  # a tool's name, to find where a template writes it
# Evidence evaluated apart (docs/speed.md: Evidence evaluated apart, then placed). Behind a shorter
# history than APART_AFTER, attention over it adds less than a quarter to an evidence token's cost,
# and the evidence is evaluated in place, exactly. Blocks longer than APART_MOST (a typed turn's
# whole passages) are too: the measured ones were spoken evidence, 220 tokens at most. A block is
# evaluated behind the system prompt and the history's last APART_CONTEXT tokens: behind the system
# prompt alone, the answers of a spoken session went wrong where the history held a like answer.
APART_AFTER = 1024
APART_MOST = 512
APART_CONTEXT = 128
BLOCK_CELLS = 2048  # the second context's: the system prompt, the history's end and one block


def _behind(prompt: list[int], system: int, start: int) -> list[int]:
    """What evidence at `start` of `prompt` is evaluated behind, apart: the system prompt (its first
    `system` tokens) and the history's last APART_CONTEXT tokens."""
    return prompt[:system] + prompt[max(system, start - APART_CONTEXT):start]


def _may_open_a_call(piece: str) -> bool:
    """Whether a token's text may begin a call: white space, an opening, or the start of one ("<")."""
    start = piece.lstrip()
    if piece and not start:
        return True
    return bool(start) and any(start.startswith(o) or o.startswith(start) for o in MARKERS)


@dataclass(frozen=True)
class _SavedCache:
    """The KV cache of sequence 0 as llama.cpp serializes it, with the tokens it holds."""

    kv: ctypes.Array[ctypes.c_uint8]
    input_ids: np.ndarray
    n_tokens: int
    exact: int


class LanguageModel:
    """One loaded GGUF model (models.model.Model). Replies run one at a time; counting may run
    beside them."""

    warms = True  # the prompt can be evaluated ahead of a turn (prefill)
    backend = "local"

    def __init__(self, model_path: Path, context: int = 8192, threads: int = 1, seed: int = 0,
                 repeat_penalty: float = 1.0, vocab_only: bool = False, kv_shift: bool = True, repack: bool = False,
                 evidence_apart: bool = True):
        """`vocab_only` loads the tokenizer and chat template alone, for counting (a remote model's).
        `kv_shift` keeps the cache of what survives when spans are removed from the cached prompt.
        `repack` lets llama.cpp repack the weights (models.engine says why it is off).
        `evidence_apart` evaluates a turn's evidence deep in a session apart from the history and
        places it after it (needs `kv_shift`: the cells are moved the same way)."""
        self.path = Path(model_path)
        self.name = self.path.name
        self.measured_by = f"the tokenizer of {self.path.name}"
        self.context = context
        # 1.0 (off) by measurement (scripts/eval_model.py): at 1.1 the 0.5B model answered 9 of 20
        # facts, follow-ups and sums against 11 of 20 without; the 1.5B 18 of 20 either way.
        self.repeat_penalty = repeat_penalty
        self.engine = EngineSettings.chosen(threads, repack)
        apart = evidence_apart and kv_shift and not vocab_only
        # With evidence apart, a placed block passes through a second sequence: room for it beside the context.
        self._llm = open_llama(self.path, self.engine, context + (APART_MOST if apart else 0), vocab_only=vocab_only,
                               seed=seed, sequences=2 if apart else 1)
        self._llama_context = LlamaContext(self._llm)
        self.kv_shift = kv_shift and not vocab_only and self._llama_context.can_shift()
        self.evidence_apart = apart and self.kv_shift
        self._blocks: BlockContext | None = None  # made at the first block
        self._placed = (0, 0)  # the positions of the cells placed last
        self._exact = 0  # how many leading cached tokens were evaluated exactly (not kept by a shift)
        metadata = self._llm.metadata
        source = metadata.get("tokenizer.chat_template")
        if not source:
            raise ValueError(f"{self.path} has no chat template in its metadata")
        self._template = ChatTemplate(source)
        self.knows_tools = self._template.knows_tools

        def vocab_token(key: str) -> str:
            if key not in metadata:
                return ""
            return self._llm.detokenize([int(metadata[key])], special=True).decode("utf-8", "replace")

        self._bos_text = vocab_token("tokenizer.ggml.bos_token_id")
        self._eos_text = vocab_token("tokenizer.ggml.eos_token_id")
        self._bos_tokens = len(self._llm.tokenize(b"", add_bos=True, special=True))
        self._lock = threading.Lock()
        self._counts = CountCache()
        self._openers: tuple[np.ndarray, np.ndarray] | None = None
        self._shape: CallShape | None = None  # _call_shape's, once found
        # What a prompt adds beyond its messages' own counts: BOS and the generation prompt. Measured
        # around a stub system message, since templates such as Qwen's read messages[0].
        self.prompt_overhead = self._bos_tokens + len(self._tokenize(self._render([_STUB_SYSTEM], True))) - len(
            self._tokenize(self._render([_STUB_SYSTEM], False)))

    # Rendering and counting -------------------------------------------------------------------
    def _render(self, messages: list[Message], generation_prompt: bool, tools: list[dict] | None = None) -> str:
        return self._template.render(messages, generation_prompt, tools, self._bos_text, self._eos_text)

    def _tokenize(self, text: str) -> list[int]:
        return self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def render(self, messages: list[Message], tools: list[dict] | None = None) -> str:
        """The prompt text for `messages`, ending where the assistant's reply begins. `tools` (OpenAI
        function specs) reach templates that know tools; others ignore them."""
        return self._render(messages, generation_prompt=True, tools=tools)

    def tokens(self, messages: list[Message], tools: list[dict] | None = None) -> list[int]:
        return self._text_tokens(self.render(messages, tools))

    def _text_tokens(self, text: str) -> list[int]:
        prefix = [] if self._bos_text and text.startswith(self._bos_text) else self._llm.tokenize(
            b"", add_bos=True, special=True)
        return prefix + self._tokenize(text)

    def count(self, messages: list[Message], tools: list[dict] | None = None) -> int:
        """Exact token count of the rendered prompt."""
        return len(self.tokens(messages, tools))

    def tools_tokens(self, tools: list[dict] | None) -> int:
        """What declaring `tools` adds to a prompt (0 for templates that know no tools)."""
        if not tools or not self.knows_tools:
            return 0
        return self.count([_STUB_SYSTEM], tools) - self.count([_STUB_SYSTEM])

    def count_message(self, message: Message) -> int:
        """Tokens this message adds to a prompt that starts with a system message. Cached by content,
        safe to call from several threads."""
        return self._counts.get(message, self._count_uncached)

    def _count_uncached(self, message: Message) -> int:
        if message.get("role") == "system":
            return len(self._tokenize(self._render([message], generation_prompt=False)))
        return self._count_after_stub(message)

    def _count_after_stub(self, message: Message) -> int:
        """The message's tokens after a stub prefix; strict templates that refuse a reply right after
        the system prompt get a stub question before it."""
        for prefix in ([_STUB_SYSTEM], [_STUB_SYSTEM, _STUB_USER]):
            if message.get("role") == "user" and len(prefix) > 1:
                break
            try:
                whole = len(self._tokenize(self._render(prefix + [message], generation_prompt=False)))
                alone = len(self._tokenize(self._render(prefix, generation_prompt=False)))
            except jinja2.TemplateError:
                continue
            return max(0, whole - alone)
        return estimate_message(message)  # the template refuses it alone

    def measure(self, messages: list[Message]) -> int:
        """The prompt's size from per-message counts: exact for prompts that start with a system message."""
        return self.prompt_overhead + sum(self.count_message(m) for m in messages)

    # Generation -------------------------------------------------------------------------------
    def stream(
        self, messages: list[Message], max_tokens: int = 256, temperature: float = 0.2,
        tools: list[dict] | None = None, open_with_call: bool = True, not_like: str = "",
        must_call: bool | str = False, apart: str | None = None,
    ) -> ReplyStream:
        """The reply to `messages`, generated as it is iterated. `open_with_call=False` keeps the
        reply from starting with anything that opens a tool call (a reply after the results), and
        `not_like` from starting with that text's first token (an earlier reply to the same prompt
        that could not be used: greedy decoding would only write it again). `must_call` makes it a
        call (a client's `required` tool_choice), and a tool's name that tool's call. The call's
        opening is written for the model as its template writes one (`<tool_call>\n{"name": "`),
        with the name and `", "arguments": {` when the tool is named: it writes the rest.
        `apart`: the last message is evidence followed by these words (its question); the evidence
        may be evaluated apart from the history and placed after it."""
        text = self.render(messages, tools)
        prompt = self._text_tokens(text)
        span = self._evidence_span(messages, tools, apart, text, prompt)
        opening, shape = "", self._call_shape() if tools else None
        if isinstance(must_call, str):
            before, after = (shape.before, shape.after_name) if shape else ('{"name": "', '", "arguments": {')
            opening = before + json.dumps(must_call)[1:-1] + after
        elif must_call and shape:
            opening = shape.before  # the model writes the name on
        names = tuple(spec.get("function", spec).get("name", "") for spec in tools or [])
        writing = CallWriting(shape, names, opening[len(shape.before):]) if shape else None
        if opening:
            prompt = prompt + self._tokenize(opening)
        if len(prompt) >= self.context:
            raise ContextOverflow(f"prompt of {len(prompt)} tokens does not fit the {self.context}-token context")
        reply = ReplyStream()
        avoid = self._tokenize(not_like.lstrip())[:1] if not_like.strip() and not opening else []
        # After a written opening the next token is the call's own: no rule for a first token.
        pieces = self._generate(prompt, min(max_tokens, self.context - len(prompt)), temperature, reply,
                                open_with_call or bool(opening), avoid, bool(must_call) and not opening,
                                bool(tools) and not opening, writing, bool(opening), span)
        return reply.start(itertools.chain([opening], pieces) if opening else pieces)

    def _call_openers(self) -> tuple[np.ndarray, np.ndarray]:
        """Token ids whose text may begin a tool call, and of those the ones that are more than white
        space; found once, by the generating thread (the vocabulary scan takes about half a second)."""
        if self._openers is None:
            texts = ((token, self._llm.detokenize([token], special=True).decode("utf-8", "ignore"))
                     for token in range(self._llm.n_vocab()))
            openers = [(token, text) for token, text in texts if _may_open_a_call(text)]
            self._openers = (np.array([token for token, _ in openers], dtype=np.int64),
                             np.array([token for token, text in openers if text.strip()], dtype=np.int64))
        return self._openers

    def prefill(self, messages: list[Message], tools: list[dict] | None = None,
                stop: Callable[[], bool] = lambda: False, batch: int = 64, exact: bool = False,
                progress: Callable[[int], None] = lambda evaluated: None, apart: str | None = None) -> int:
        """Evaluate `messages` as the start of a later prompt, with no reply, so the turn that
        begins with them finds them cached (the system prompt at start, a resumed session's
        history). With `exact`, what a shift kept is evaluated again, so the next reply reads an
        exact cache. `apart`, as `stream` takes it ("" for a last message that is all evidence).
        Without it, a history deep enough for evidence apart also gets its last tokens evaluated
        in the second context, where the next turn's evidence will go. Between batches of `batch`
        tokens it stops as soon as `stop()` is true, and tells `progress` the tokens evaluated so
        far. Returns the tokens evaluated."""
        text = self._render(messages, generation_prompt=False, tools=tools)
        prompt = self._text_tokens(text)
        if len(prompt) >= self.context:
            return 0
        with self._lock:
            llm = self._llm
            prefix = common_prefix(self._llama_context.cached_tokens(), prompt)
            saved = None
            if exact:
                kept = min(prefix, self._exact)
                # Stopped midway, the refresh would leave the next turn everything after it to
                # evaluate again: the shifted cache is kept aside, to be put back if a turn comes first.
                saved = self._save_cache() if kept < prefix else None
            else:
                kept = max(self._shift_cache(prompt) if self.kv_shift else prefix, prefix)
            llm.n_tokens = min(kept, llm.n_tokens)  # eval drops the cache from here on
            span = None if exact else self._evidence_span(messages, tools, apart, text, prompt)
            evaluated, apart_evaluated = 0, [0]

            def told(more: int) -> None:  # the tokens the second context has evaluated for the block
                apart_evaluated[0] = more
                progress(evaluated + more)

            while llm.n_tokens < len(prompt):
                if span is not None and span[1] <= llm.n_tokens < span[2]:
                    placed = self._place_evidence(prompt, span, stop, batch, told)
                    evaluated += apart_evaluated[0]
                    if not placed and stop():
                        break
                    span = None  # placed, or not placeable: the rest is evaluated in place
                    continue
                if stop():
                    if saved is not None and llm.n_tokens < saved.n_tokens:
                        self._restore_cache(saved)
                    break
                until = span[1] if span is not None and llm.n_tokens < span[1] else len(prompt)
                chunk = prompt[llm.n_tokens:min(llm.n_tokens + batch, until)]
                self._evaluate_from(llm.n_tokens, functools.partial(llm.eval, chunk))
                evaluated += len(chunk)
                progress(evaluated)
            if apart is None and llm.n_tokens == len(prompt) and self.evidence_apart and len(prompt) >= APART_AFTER \
                    and messages[0].get("role") == "system":
                system = self._text_tokens(self._render(messages[:1], generation_prompt=False, tools=tools))
                if common_prefix(system, prompt) == len(system):
                    self._blocks_context().evaluate(_behind(prompt, len(system), len(prompt)), stop, batch, told)
                    evaluated += apart_evaluated[0]
            return evaluated

    def _blocks_context(self) -> BlockContext:
        if self._blocks is None:
            self._blocks = BlockContext(self._llm, BLOCK_CELLS)
        return self._blocks

    def _evidence_span(self, messages: list[Message], tools: list[dict] | None, apart: str | None,
                       text: str, prompt: list[int]) -> tuple[int, int, int] | None:
        """Where `prompt` (`messages` rendered as `text`, then tokenized) holds evidence to evaluate
        apart: the end of its system prompt (the block's prefix), and the evidence's start and end.
        None when `apart` is None, evidence apart is off, or the evidence is not worth it or not
        placeable (see APART_AFTER). Only the last message's text is tokenized again: the history's
        would take tens of milliseconds at release."""
        content = messages[-1].get("content") if messages else None
        if apart is None or not self.evidence_apart or len(messages) < 3 or messages[0].get("role") != "system" \
                or messages[-1].get("role") != "user" or not isinstance(content, str) or not content.endswith(apart):
            return None

        def rendered(some: list[Message]) -> str:
            return self._render(some, generation_prompt=False, tools=tools)

        history = rendered(messages[:-1])
        # The evidence ends where the message's text goes on: two endings show where that is, with or
        # without the question after it and the message's closing markup.
        evidence = content[:len(content) - len(apart)]
        one, other = (rendered([*messages[:-1], {**messages[-1], "content": evidence + ending}]) for ending in "AZ")
        if not (text.startswith(history) and one.startswith(history) and other.startswith(history)):
            return None
        # The last message, tokenized alone, is the prompt's end where the history ends at a token's edge.
        last = self._tokenize(text[len(history):])
        start = len(prompt) - len(last)
        if start < 0 or prompt[start:] != last:
            return None
        one_tokens, other_tokens = (self._tokenize(rendering[len(history):]) for rendering in (one, other))
        end = start + min(common_prefix(one_tokens, other_tokens), common_prefix(one_tokens, last))
        system = self._text_tokens(rendered(messages[:1]))
        if common_prefix(system, prompt) < len(system) or start < APART_AFTER or not 0 < end - start <= APART_MOST \
                or len(system) + APART_CONTEXT + end - start > BLOCK_CELLS:
            return None
        return len(system), start, end

    def _place_evidence(self, prompt: list[int], span: tuple[int, int, int], stop: Callable[[], bool] = lambda: False,
                        batch: int = 512, progress: Callable[[int], None] = lambda evaluated: None) -> int:
        """The evidence at `span` (`_evidence_span`'s) of `prompt`, from what the cache holds of it
        on: evaluated in the second context behind the system prompt and the history's last
        APART_CONTEXT tokens (where its first part may be held already: a draft's), and placed
        after the history. The placed cells are not exact (`approximate`). What the cache lacks
        of the history is evaluated first, in place. Between batches it stops once `stop()` is
        true, and tells `progress` the tokens evaluated apart. Returns the tokens placed: 0 if
        stopped or not placed (the cache then ends where it held the prompt). Called holding the
        model's lock."""
        system, start, end = span
        llm = self._llm
        held = common_prefix(self._llama_context.cached_tokens(), prompt)
        if held >= end:
            return 0
        if held < start:  # the history's last tokens (a reply's closing markup), evaluated in place first
            llm.n_tokens = held
            self._evaluate_from(held, functools.partial(llm.eval, prompt[held:start]))
            held = start
        behind = _behind(prompt, system, start)
        if not self._blocks_context().evaluate(behind + prompt[start:end], stop, batch, progress):
            return 0
        first, last = len(behind) + held - start, len(behind) + end - start
        block = self._blocks_context().cells(first, last)
        self._llama_context.remove(held)
        llm.n_tokens = held
        self._exact = min(self._exact, held)
        if not self._llama_context.place(block, first, last, held):
            return 0
        llm.input_ids[held:end] = prompt[held:end]
        llm.n_tokens = end
        self._placed = (held, end)
        return end - held

    def discard(self, messages: list[Message], tools: list[dict] | None = None, held: int | None = None) -> None:
        """Remove from the KV cache what follows its longest common prefix with `messages` (rendered
        as `prefill` renders them): the cells of a prefill that guessed the next prompt, past what
        the prompt shares with the guess (llama_memory_seq_rm). Only if the cache holds the first
        `held` messages (all of them by default): a cache that has moved on to another prompt is
        left as it is."""
        kept = self._text_tokens(self._render(messages, generation_prompt=False, tools=tools))
        held_tokens = len(kept) if held is None else \
            len(self._text_tokens(self._render(messages[:held], generation_prompt=False, tools=tools)))
        with self._lock:
            llm = self._llm
            shared = common_prefix(self._llama_context.cached_tokens(), kept)
            if shared < held_tokens or llm.n_tokens <= shared:
                return
            self._llama_context.remove(shared)
            llm.n_tokens = shared
            self._exact = min(self._exact, shared)

    def health(self) -> dict:
        return {"engine": {"cpu_features": cpu_features(), **self.engine.as_json()}}

    @property
    def approximate(self) -> int:
        """Cached tokens a KV shift kept, or evidence placed, rather than evaluated exactly;
        `prefill(exact=True)` redoes them."""
        return max(0, self._llm.n_tokens - self._exact)

    def _save_cache(self) -> _SavedCache:
        """A copy of the KV cache and what it holds (a few hundred MB at most), for `_restore_cache`."""
        kv = self._llama_context.save_state()
        return _SavedCache(kv, self._llm.input_ids.copy(), self._llm.n_tokens, self._exact)

    def _restore_cache(self, saved: _SavedCache) -> None:
        self._llama_context.clear()
        if not self._llama_context.load_state(saved.kv):
            self._llm.n_tokens = self._exact = 0  # not restored: the next prompt is evaluated whole
            return
        self._llm.input_ids[:] = saved.input_ids
        self._llm.n_tokens, self._exact = saved.n_tokens, saved.exact

    def save_cache(self, path: Path) -> int:
        """The cache and the tokens it holds, written to `path` (replaced whole, never half
        written), for `load_cache` after a restart. The tokens saved."""
        with self._lock:
            if not self._llm.n_tokens:
                return 0
            saved = self._save_cache()
        header = {"model": self.name, "bytes": self.path.stat().st_size, "context": self.context,
                  "tokens": saved.n_tokens, "exact": saved.exact, "kv": len(saved.kv)}
        partial = path.with_name(path.name + ".partial")
        with open(partial, "wb") as out:
            out.write(json.dumps(header).encode() + b"\n")
            out.write(saved.input_ids[:saved.n_tokens].astype(np.int32).tobytes())
            out.write(bytes(saved.kv))
        partial.replace(path)
        return saved.n_tokens

    def load_cache(self, path: Path) -> int:
        """The cache `save_cache` wrote, if it was this model's with this context: the tokens
        restored (0 when there is none to restore, or it does not fit)."""
        try:
            with open(path, "rb") as source:
                header = json.loads(source.readline())
                tokens = np.frombuffer(source.read(4 * header["tokens"]), dtype=np.int32)
                kv = source.read(header["kv"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0
        mine = {"model": self.name, "bytes": self.path.stat().st_size, "context": self.context}
        if any(header.get(key) != value for key, value in mine.items()) or len(tokens) != header["tokens"] \
                or len(kv) != header["kv"] or not 0 < len(tokens) <= self.context:
            return 0
        input_ids = np.zeros_like(self._llm.input_ids)
        input_ids[:len(tokens)] = tokens
        with self._lock:
            self._restore_cache(_SavedCache((ctypes.c_uint8 * len(kv)).from_buffer_copy(kv), input_ids,
                                            len(tokens), int(header["exact"])))
            return self._llm.n_tokens

    def _evaluate_from(self, position: int, evaluate: Callable[[], object]) -> object:
        """Run `evaluate`, which extends the cache from `position`: the cache stays exact as far as
        it was exact up to there."""
        exact = position <= self._exact
        try:
            return evaluate()
        finally:
            if exact:
                self._exact = self._llm.n_tokens

    def _shift_cache(self, prompt: list[int]) -> int:
        """Keep the cache of the tokens that survive in `prompt` when spans of what was cached were
        removed (an old exchange, old research): each span leaves the KV cache and what follows it
        moves down, instead of everything after the first change being evaluated again. The kept
        tokens' cache was computed beside the removed text, so this approximates an exact prefill
        (docs/speed.md: KV shift). Returns how many leading tokens of `prompt` are now cached."""
        llm = self._llm
        cached = self._llama_context.cached_tokens()
        spans, kept = removed_spans(cached, prompt)
        if not spans:
            return kept
        self._exact = min(self._exact, spans[0][0])  # what follows the first span is approximate now
        for start, end in reversed(spans):  # from the back, so earlier spans keep their positions
            self._llama_context.remove(start, end)
            self._llama_context.shift(end, start - end)
        llm.input_ids[:kept] = prompt[:kept]
        llm.n_tokens = kept
        return kept

    def complete(self, messages: list[Message], max_tokens: int = 256, temperature: float = 0.2) -> str:
        return self.stream(messages, max_tokens, temperature).text()

    def _call_shape(self) -> CallShape | None:
        """How this model's template writes a call: the text before the tool's name, and from the
        name to the arguments' opening brace (Qwen's `<tool_call>\n{"name": "` and `", "arguments":
        {`). None for a template that writes no calls. Found once, by rendering one."""
        if self._shape is None:
            self._shape = CallShape("", "")
            call = {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": _CALL_MARK, "arguments": {}}}]}
            try:
                before = self._render([_STUB_SYSTEM, _STUB_USER], True)
                whole = self._render([_STUB_SYSTEM, _STUB_USER, call], False)
            except jinja2.TemplateError:
                return None
            if self.knows_tools and whole.startswith(before) and _CALL_MARK in whole:
                head, tail = whole[len(before):].split(_CALL_MARK, 1)
                if head.strip() and "{}" in tail:
                    self._shape = CallShape(head.lstrip(), tail[:tail.index("{}")] + "{")
        return self._shape if self._shape.before else None

    def _first_token_rule(self, start: int, open_with_call: bool, avoid: list[int], must_call: bool,
                          own: int | None):
        """What the reply's first token (at `start`) may be, as a logits processor, or None.
        `must_call`: the opening of a call. `open_with_call=False`: anything but; `avoid`: not those.
        Otherwise, with tools offered, a call is opened the way the template writes one (`own`, its
        first token: every other opening's chance goes to it), so the call the client sends back
        renders as the model wrote it and its cache is read, not evaluated again."""
        from llama_cpp import LogitsProcessorList

        if not (must_call or not open_with_call or avoid or own is not None):
            return None
        every_opener, openers = self._call_openers()
        own = own if own in openers else None

        if must_call:  # only where the template writes no calls: stream() writes the opening otherwise
            def rule(scores):
                kept = scores[openers].copy()
                scores[:] = -np.inf
                scores[openers] = kept
        elif not open_with_call or avoid:
            banned = np.concatenate([every_opener if not open_with_call else [], avoid]).astype(np.int64)

            def rule(scores):
                scores[banned] = -np.inf
        elif own is not None:
            def rule(scores):
                chance = np.logaddexp.reduce(scores[openers])
                scores[openers] = -np.inf
                scores[own] = chance
        else:
            return None

        def at_start(input_ids, scores):
            if len(input_ids) == start:  # only the reply's first token
                rule(scores)
            return scores

        return LogitsProcessorList([at_start])

    def _sampled(self, prompt: list[int], temperature: float, processors, head: list[int],
                 call: CallWriting | None, call_open: bool) -> Generator[int, None, None]:
        """The reply's tokens as llama.cpp samples them. When the first opens a call as the template
        does (`head`'s first), the rest of `head` is written for the model: left to itself after
        `<tool_call>`, the 1.5B model ended the reply there. In a call so opened (or `call_open`,
        opened by the prompt), what `call` says the shape leaves no choice over is written for it too.
        Each written text is evaluated as one batch with the token before it."""
        def generate(tokens: list[int], rule) -> Generator[int, Sequence[int] | None, None]:
            return self._llm.generate(tokens, temp=temperature, top_k=40, top_p=0.95, min_p=0.05,
                                      repeat_penalty=self.repeat_penalty, reset=True, logits_processor=rule)

        call = replace(call) if call else None  # each attempt writes its own call
        written = list(prompt)
        writing = call if call_open else None
        tokens = generate(written, processors)
        try:
            while (token := next(tokens, None)) is not None:
                forced: list[int] = []
                text = ""
                if len(written) == len(prompt) and len(head) > 1 and token == head[0]:
                    forced, writing = head[1:], call
                    text = writing.next_forced() if writing else ""
                elif writing is not None:
                    text = writing.next_forced(self._llm.detokenize([token]).decode("utf-8", "ignore"))
                if text and writing is not None:
                    forced += self._written_tokens(text, writing)
                yield token
                written.append(token)
                if forced:
                    tokens.close()
                    for token in forced:
                        yield token
                        written.append(token)
                    tokens = generate(written, None)
        finally:
            tokens.close()

    def _written_tokens(self, text: str, writing: CallWriting) -> list[int]:
        """`text`'s tokens to write for the model, less the last, which is left to it: after a
        written ` {` the model no longer wrote its own ` {"`, and its arguments went wrong."""
        tokens = self._tokenize(text)
        writing.take_back(self._llm.detokenize(tokens[-1:]).decode("utf-8", "ignore"))
        return tokens[:-1]

    def _generate(self, prompt: list[int], max_tokens: int, temperature: float, reply: ReplyStream,
                  open_with_call: bool = True, avoid: list[int] | None = None,
                  must_call: bool = False, calls: bool = False, call: CallWriting | None = None,
                  call_open: bool = False, span: tuple[int, int, int] | None = None) -> Iterator[str]:
        stats = reply.stats
        with self._lock:
            shape = self._call_shape() if calls else None
            head = self._tokenize(shape.before) if shape else []
            processors = self._first_token_rule(len(prompt), open_with_call, avoid or [], must_call,
                                                head[0] if head else None)
            llm = self._llm
            # llama-cpp-python keeps the longest common prefix with what it evaluated last and
            # re-evaluates one token when the whole prompt matches, to refresh the logits. Spans
            # removed from the middle are taken out of the cache first, if shifting is on.
            prefix = common_prefix(self._llama_context.cached_tokens(), prompt)
            kept = self._shift_cache(prompt) if self.kv_shift else prefix
            stats.shifted_tokens = max(0, min(kept, len(prompt) - 1) - prefix)
            if span is not None:
                began = time.perf_counter()

                def evaluated_apart(tokens: int) -> None:
                    stats.apart_tokens = tokens

                self._place_evidence(prompt, span, lambda: reply.cancelled, progress=evaluated_apart)
                stats.placing_ms = round(1000 * (time.perf_counter() - began))
                kept = max(kept, common_prefix(self._llama_context.cached_tokens(), prompt))
                placed_from, placed_to = self._placed  # now or by a draft's prefill, and not yet made exact
                if placed_to == span[2] and self._exact <= placed_from and kept >= placed_to:
                    stats.placed_tokens = placed_to - placed_from
            reused = min(max(kept, prefix), len(prompt) - 1)
            stats.prompt_tokens, stats.cached_tokens = len(prompt), reused
            stats.evaluated_tokens = len(prompt) - reused
            # Where to evaluate exactly from if the reply ends before it began after reading cells
            # a shift kept, which an exact prefill rarely does (scripts/bench_kv_shift.py), or
            # cells of evidence evaluated apart.
            exact_from = prefix if stats.shifted_tokens else min(prefix, self._exact) if reused > self._exact else None
            pending = b""
            stats.finish_reason = "length"
            for approximate in ([True, False] if exact_from is not None else [False]):
                if not approximate and exact_from is not None:
                    llm.n_tokens = exact_from
                    stats.shifted_tokens, stats.placed_tokens = 0, 0
                    stats.cached_tokens = min(exact_from, len(prompt) - 1)
                    stats.evaluated_tokens = len(prompt) - stats.cached_tokens
                exact = stats.cached_tokens <= self._exact  # evaluated after an exact cache
                tokens = self._sampled(prompt, temperature, processors, head, call, call_open)
                empty = False
                try:
                    for token in tokens:
                        if reply.cancelled:
                            stats.finish_reason = "cancelled"
                            break
                        if self._llama_context.ends_generation(token):
                            empty = approximate and not stats.completion_tokens
                            stats.finish_reason = "stop"
                            break
                        stats.completion_tokens += 1
                        pending += llm.detokenize([token])
                        try:
                            piece = pending.decode("utf-8")
                        except UnicodeDecodeError:
                            if len(pending) < 4:  # an incomplete multi-byte character: wait for the rest
                                continue
                            piece = pending.decode("utf-8", "replace")
                        pending = b""
                        if piece:
                            yield piece
                        if stats.completion_tokens >= max_tokens:
                            break
                finally:
                    tokens.close()
                    if exact:
                        self._exact = llm.n_tokens
                if not empty:
                    break

