"""What Parlour needs of a loaded llama.cpp context that llama-cpp-python does not expose publicly.

Reusing the KV cache across replies (models.llm) needs the tokens the cache holds, spans of it
removed and shifted, sequence 0's state saved and put back, and whether a token ends generation.
llama-cpp-python has these only as private attributes of its `Llama` (`_input_ids`, `_ctx`,
`_model`) and as llama.cpp's low-level functions; this module is the one place that touches them,
so a new llama-cpp-python release is checked here alone. Every method works on sequence 0, the
only one a `Llama` evaluates.
"""

from __future__ import annotations

import ctypes


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

    def ends_generation(self, token: int) -> bool:
        """Whether `token` ends a reply (end of stream, end of turn, ...: llama.cpp's end of generation)."""
        from llama_cpp import llama_vocab_is_eog

        return llama_vocab_is_eog(self._llm._model.vocab, token)
