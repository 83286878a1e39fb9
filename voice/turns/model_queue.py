"""The language model's queue (who uses it next) and the worker thread a reply is generated in."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator

from models.reply import ReplyStream


class ModelQueue:
    """Who uses the model next: turns in arrival order, then background summaries.

    `capacity` replies run at once: 1 for the model in this process, `max_inflight` for a model
    server that batches. A turn never waits behind a summary that has not started; a summary that
    has started runs to its end. `release` hands a place directly to the next waiter, so nobody can
    slip in between.
    """

    def __init__(self, capacity: int = 1) -> None:
        self.capacity = capacity
        self._holders = 0
        self._turns: deque[asyncio.Future] = deque()
        self._background: deque[asyncio.Future] = deque()
        # Set while a turn waits for a place: work in a worker thread reads it to give way.
        self.turn_waiting = threading.Event()

    async def acquire(self, background: bool = False) -> None:
        if self._holders < self.capacity:  # a free place means nobody waits: release hands places over
            self._holders += 1
            return
        future = asyncio.get_running_loop().create_future()
        waiters = self._background if background else self._turns
        waiters.append(future)
        self._note_turns()
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():  # handed over just as the waiter left: pass it on
                self.release()
            elif future in waiters:
                waiters.remove(future)
            raise
        finally:
            self._note_turns()

    @property
    def holders(self) -> int:
        """Replies (or background work) using the model now."""
        return self._holders

    def _note_turns(self) -> None:
        if any(not future.done() for future in self._turns):
            self.turn_waiting.set()
        else:
            self.turn_waiting.clear()

    def release(self) -> None:
        for waiters in (self._turns, self._background):
            while waiters:
                future = waiters.popleft()
                if not future.done():
                    future.set_result(None)  # the place passes to this waiter
                    self._note_turns()
                    return
        self._holders -= 1


async def in_worker(reply: ReplyStream) -> AsyncIterator[str]:
    """The reply's pieces, generated in a worker thread so the event loop stays free."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    done = object()

    def work() -> None:
        try:
            for piece in reply:
                loop.call_soon_threadsafe(queue.put_nowait, piece)
        except BaseException as error:  # handed to the event loop, raised there
            loop.call_soon_threadsafe(queue.put_nowait, error)
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, done)

    worker = loop.run_in_executor(None, work)
    finished = False
    try:
        while (item := await queue.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield item
        finished = True
    finally:
        if not finished:  # the consumer stopped early: stop the model too
            reply.cancel()
        await asyncio.shield(worker)
