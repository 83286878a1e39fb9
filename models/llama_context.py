"""What Parlour needs of a loaded llama.cpp context that llama-cpp-python does not expose publicly.

Reusing the KV cache across replies (models.llm) needs the tokens the cache holds, spans of it
removed and shifted, sequence 0's state saved and put back, and whether a token ends generation.
Evidence evaluated apart from the history needs a second context on the same weights
(`BlockContext`) and its cells placed into the first (`LlamaContext.place`). llama-cpp-python has
these only as private attributes of its `Llama` (`_input_ids`, `_ctx`, `_model`) and as llama.cpp's
low-level functions; this module is the one place that touches them, so a new llama-cpp-python
release is checked here alone. A `Llama` evaluates sequence 0 alone; sequence 1 only passes
placed cells through.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable


class LlamaContext:
    """The private side of one `llama_cpp.Llama`. A vocabulary-only model has no context: only
    `ends_generation` and `cached_tokens` may be asked of it."""

    def __init__(self, llm) -> None:
        self._llm = llm  # a llama_cpp.Llama

    def cached_tokens(self) -> list[int]:
        """The token ids the cache holds, in order (the first `n_tokens` of `input_ids`)."""
        return self._llm._input_ids.tolist()

    def remove(self, start: int, end: int = -1) -> None:
        """Take the cells of positions `start` to `end` (-1: to the end) out of the cache."""
        self._llm._ctx.kv_cache_seq_rm(0, start, end)

    def clear(self) -> None:
        """Take every cell out of the cache."""
        self._llm._ctx.kv_cache_seq_rm(0, -1, -1)

    def shift(self, start: int, by: int, end: int = -1) -> None:
        """Move the cells of positions `start` to `end` (-1: to the end) by `by` positions (down
        when negative), RoPE and all."""
        self._llm._ctx.kv_cache_seq_shift(0, start, end, by)

    def can_shift(self) -> bool:
        """Whether llama.cpp can shift this context's cache (not with every cache type)."""
        from llama_cpp import llama_memory_can_shift

        return bool(llama_memory_can_shift(self._llm._ctx.memory))

    def save_state(self) -> ctypes.Array[ctypes.c_uint8]:
        """The cache's cells as llama.cpp serializes them, for `load_state`."""
        from llama_cpp import llama_state_seq_get_data, llama_state_seq_get_size

        size = llama_state_seq_get_size(self._llm._ctx.ctx, 0)
        buffer = (ctypes.c_uint8 * size)()
        llama_state_seq_get_data(self._llm._ctx.ctx, buffer, size, 0)
        return buffer

    def load_state(self, state: ctypes.Array[ctypes.c_uint8]) -> bool:
        """Put back cells `save_state` gave, into an empty cache; whether llama.cpp took them."""
        from llama_cpp import llama_state_seq_set_data

        return bool(llama_state_seq_set_data(self._llm._ctx.ctx, state, len(state), 0))

    def place(self, block: ctypes.Array[ctypes.c_uint8], start: int, end: int, to: int) -> bool:
        """Put `block` (cells `BlockContext.cells` gave, at positions `start` to `end`) into
        sequence 0 from position `to` on, RoPE moved with them; whether llama.cpp took them. The
        context needs a second sequence in a unified cache (models.engine.open_llama), with room for
        the block beside sequence 0: a restore goes into an emptied sequence, so the cells arrive as
        sequence 1, are moved, then copied into sequence 0 (llama_memory_seq_cp shares the cells)."""
        from llama_cpp import llama_memory_seq_add, llama_memory_seq_cp, llama_memory_seq_rm, llama_state_seq_set_data

        memory = self._llm._ctx.memory
        if not llama_state_seq_set_data(self._llm._ctx.ctx, block, len(block), 1):
            return False
        llama_memory_seq_add(memory, 1, start, end, to - start)
        llama_memory_seq_cp(memory, 1, 0, to, to + end - start)
        llama_memory_seq_rm(memory, 1, -1, -1)
        return True

    def ends_generation(self, token: int) -> bool:
        """Whether `token` ends a reply (end of stream, end of turn, ...: llama.cpp's end of generation)."""
        from llama_cpp import llama_vocab_is_eog

        return llama_vocab_is_eog(self._llm._model.vocab, token)


class BlockContext:
    """A second llama.cpp context on a `Llama`'s loaded weights, for evidence evaluated apart from
    the history: behind a short prefix (models.llm says which), where attention is cheap, then handed
    to the first context (`LlamaContext.place`). It keeps what it evaluated, so a block that begins
    as the last one did is evaluated from where they part."""

    def __init__(self, llm, cells: int, batch: int = 512) -> None:
        import llama_cpp as lib

        params = lib.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = cells, batch, min(batch, llm.context_params.n_ubatch)
        params.n_seq_max, params.kv_unified = 2, True  # sequence 1 carries a block's cells out (`cells`)
        params.n_threads, params.n_threads_batch = llm.context_params.n_threads, llm.context_params.n_threads_batch
        params.flash_attn_type, params.type_k, params.type_v = (llm.context_params.flash_attn_type,
                                                              llm.context_params.type_k, llm.context_params.type_v)
        self._lib = lib
        self._ctx = lib.llama_init_from_model(llm._model.model, params)
        if not self._ctx:
            raise MemoryError(f"llama.cpp could not make a second context of {cells} cells")
        self._memory = lib.llama_get_memory(self._ctx)
        self._batch = lib.llama_batch_init(batch, 0, 1)
        self._batch_size = batch
        self.tokens: list[int] = []  # what its sequence 0 holds, in order
        llm._stack.callback(self.close)  # freed when the `Llama` closes, before its weights

    def close(self) -> None:
        if self._ctx:
            self._lib.llama_batch_free(self._batch)
            self._lib.llama_free(self._ctx)
            self._ctx = None

    def evaluate(self, tokens: list[int], stop: Callable[[], bool], batch: int,
                 progress: Callable[[int], None]) -> bool:
        """Hold `tokens` (at most the context's cells): what they share with what is held is kept, the rest
        evaluated `batch` tokens at a time; between batches, stop once `stop()` is true (what was
        evaluated is kept) and tell `progress` how many tokens this call has evaluated. Whether
        all of `tokens` are held."""
        shared = 0
        for a, b in zip(self.tokens, tokens, strict=False):
            if a != b:
                break
            shared += 1
        self._lib.llama_memory_seq_rm(self._memory, 0, shared, -1)
        del self.tokens[shared:]
        for start in range(shared, len(tokens), batch):
            if stop():
                return False
            chunk = tokens[start:start + min(batch, self._batch_size)]
            self._decode(chunk, start)
            self.tokens += chunk
            progress(len(self.tokens) - shared)
        return True

    def _decode(self, chunk: list[int], position: int) -> None:
        batch = self._batch
        batch.n_tokens = len(chunk)
        for i, token in enumerate(chunk):
            batch.token[i], batch.pos[i] = token, position + i
            batch.n_seq_id[i], batch.seq_id[i][0] = 1, 0
            batch.logits[i] = False  # nothing is generated here: no logits wanted
        if self._lib.llama_decode(self._ctx, batch) != 0:
            self._lib.llama_memory_seq_rm(self._memory, 0, position, -1)
            raise RuntimeError(f"llama_decode failed on a block at position {position}")

    def cells(self, start: int, end: int) -> ctypes.Array[ctypes.c_uint8]:
        """The held cells of positions `start` to `end` as llama.cpp serializes them, for
        `LlamaContext.place`: copied (shared) into sequence 1, saved from there, and let go."""
        lib = self._lib
        lib.llama_memory_seq_cp(self._memory, 0, 1, start, end)
        try:
            size = lib.llama_state_seq_get_size(self._ctx, 1)
            state = (ctypes.c_uint8 * size)()
            lib.llama_state_seq_get_data(self._ctx, state, size, 1)
        finally:
            lib.llama_memory_seq_rm(self._memory, 1, -1, -1)
        return state
