"""What the service needs of a language model, wherever it runs.

`models.llm.LanguageModel` runs the model in this process; `models.remote_llm.RemoteLanguageModel`
asks an OpenAI-compatible server. The turn engine, the server and the chat APIs read these
attributes rather than asking which class they hold.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

    from fitting.messages import Message
    from models.reply import ReplyStream


class Model(Protocol):
    name: str
    context: int  # tokens one request gets
    knows_tools: bool  # the chat template declares tools natively
    prompt_overhead: int  # tokens every prompt has beyond its messages
    # Removing a span from the cached prompt keeps what follows it, shifted: fitting then removes
    # only what must go. A model server re-evaluates after the first change instead.
    kv_shift: bool
    # The prompt can be evaluated ahead of a turn (`prefill`): only a model in this process.
    warms: bool
    # Where it runs, for /healthz and the chat APIs: "local", or the server's URL.
    backend: str
    # What prompts are measured with, for people ("the tokenizer of qwen2.5-coder-1.5b.gguf").
    measured_by: str

    @property
    def approximate(self) -> int:
        """Cached tokens a KV shift kept, or evidence placed, rather than evaluated exactly (0 where
        nothing shifts)."""

    def count(self, messages: list[Message], tools: list[dict] | None = None) -> int: ...
    def count_message(self, message: Message) -> int: ...
    def measure(self, messages: list[Message]) -> int: ...
    def tools_tokens(self, tools: list[dict] | None) -> int: ...
    def stream(self, messages: list[Message], max_tokens: int = 256, temperature: float = 0.2,
               tools: list[dict] | None = None, open_with_call: bool = True, not_like: str = "",
               must_call: bool | str = False, apart: str | None = None) -> ReplyStream:
        """`apart`: the last message is evidence followed by these words (its question); a model
        here may evaluate the evidence apart from the history and place it after it."""

    def complete(self, messages: list[Message], max_tokens: int = 256, temperature: float = 0.2) -> str: ...
    def prefill(self, messages: list[Message], tools: list[dict] | None = None,
                stop: Callable[[], bool] = ..., batch: int = 64, exact: bool = False,
                progress: Callable[[int], None] = ..., apart: str | None = None) -> int:
        """Evaluate `messages` into the cache as the start of a later prompt, with no reply; between
        batches of `batch` tokens stop once `stop()` is true and tell `progress` the tokens evaluated
        so far. With `exact`, what a KV shift kept is evaluated again; `apart` as `stream` takes it
        ("" for a last message that is all evidence). Returns the tokens evaluated
        (0 where `warms` is false: the upkeep and the preemptions call it only where it is true)."""

    def discard(self, messages: list[Message], tools: list[dict] | None = None, held: int | None = None) -> None:
        """Remove from the cache what follows its longest common prefix with `messages` (a wrong
        guess's cells), only if the cache holds the first `held` of them (all by default)."""

    def health(self) -> dict:
        """What /healthz says of it: the engine's settings here, or whether the server answers.
        Blocking (a server is asked): call it from a worker thread."""
