"""Work on the model between turns, off the path of the next reply: warm-ups and summaries.

- A warm-up evaluates the prompt the next turn will start with (a new session's system prompt, a
  resumed session's history, or, after a reply that read a shifted cache, the same prompt again
  exactly), so that turn pays only for itself.
- A summary made ahead (ADR 0141): after a turn whose prompt is within `TurnPrompt.margin` of the
  budget, the exchanges the next turns will have to remove are summarized and stored.

Both wait behind turns in the model's queue. A warm-up stops at its next batch as soon as a turn
waits or a client is speaking (`hearing`), so whisper has the CPU while a question is spoken; a
summary that has started runs to its end (it is short: only the exchanges about to leave). At
shutdown (`close`) warm-ups stop too: they only save time for a turn this process will not serve.
"""

from __future__ import annotations

import asyncio
import logging
import time

from fitting import FitError
from models.model import Model
from voice.turns.model_queue import ModelQueue
from voice.turns.prompt import TurnPrompt
from voice.turns.tools import Offer

HEARING_S = 1.0  # how long background work stays stopped after a client was last heard speaking
log = logging.getLogger("parlour")


class Upkeep:
    def __init__(self, llm: Model, prompt: TurnPrompt, queue: ModelQueue, offer: Offer):
        self.llm, self.prompt, self.queue = llm, prompt, queue
        self.offer = offer  # what a turn without the client's tools offers: the prompt's prefix
        self.tasks: set[asyncio.Task] = set()
        self._heard_at = float("-inf")
        self._closing = False

    def hearing(self) -> None:
        """A client is speaking: warm-ups stop at their next batch (putting the cache back as it
        was) and none starts for `HEARING_S`."""
        self._heard_at = time.monotonic()

    def close(self) -> None:
        """The service is stopping: a warm-up stops at its next batch, and no work asked for from
        now on starts. Summaries asked for before are stored, so they are still made."""
        self._closing = True

    def _must_stop(self) -> bool:
        """Read from the warm-up's worker thread; every answer is a plain value."""
        return self._closing or self.queue.turn_waiting.is_set() or time.monotonic() - self._heard_at < HEARING_S

    def warm(self, session_id: str | None = None, instructions: str = "", exact: bool = False) -> None:
        """Warm the next turn's prompt in the background (see the module docstring). With `exact`,
        what a KV shift kept is evaluated again. Only a model in this process is warmed."""
        if self.llm.warms:
            self._start(self._holding_model(self._warm_now, "warming the prompt", session_id, instructions, exact))

    def summarize_ahead(self, session_id: str) -> None:
        self._start(self._holding_model(self.prompt.summarize_ahead, "summarizing ahead", session_id, self.offer))

    def _warm_now(self, session_id: str | None, instructions: str, exact: bool) -> None:
        if self._closing:
            return
        try:
            fitted = self.prompt.before_next_question(session_id, instructions, self.offer)
        except FitError:
            return  # nothing to warm: a system prompt over the budget is said when a turn comes
        self.llm.prefill(fitted.messages[:-1], self.offer.native, stop=self._must_stop, exact=exact)

    async def _holding_model(self, work, what: str, *args) -> None:
        await self.queue.acquire(background=True)
        try:
            await asyncio.to_thread(work, *args)
        except Exception:  # upkeep only saves time: the turn that needs it does it, or says what is wrong
            log.exception("%s failed", what)
        finally:
            self.queue.release()

    def _start(self, coroutine) -> None:
        if self._closing:  # a turn that ended while the service stops: the next start does it if needed
            coroutine.close()
            return
        task = asyncio.get_running_loop().create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def idle(self) -> None:
        """Wait for background work to end (tests and shutdown)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)
