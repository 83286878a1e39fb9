"""Prefill while the key is held (preemptive prefill): the question a settled draft heard is
researched, and the prompt its turn will have is evaluated into the model's cache, before release.

While a push-to-talk key is held, whisper drafts the audio so far (voice.realtime.transcription).
A draft whose last moments are silent is probably the whole question. `Preemptions.start` then
runs that question's research and evaluates [history, question, research], fitted as the turn will
fit it, in the background. At the turn (`take`), if the committed question has the same words as
the guess (case and punctuation aside, as LiveKit Agents' preemptive generation compares
transcripts), its research is the turn's and its cache is read: only the reply's opening is left to
evaluate. Otherwise its cells are removed from the cache (llama_memory_seq_rm) and the turn goes on
as it would have: a wrong guess costs idle CPU and nothing else.

A guess is never stored, announced or spoken: it lives here and in the cache until the commit. It
waits for the model behind turns like other background work, stops as soon as a turn waits, and
pauses while whisper drafts, so the drafts keep the CPU.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from models.model import Model
from voice.knowledge.research import Research
from voice.turns.figures import TurnFigures
from voice.turns.model_queue import ModelQueue
from voice.turns.prompt import TurnPrompt
from voice.turns.tools import Offer

log = logging.getLogger("parlour")
DRAFT_WAIT_S = 0.02  # how often a paused prefill looks again whether whisper is done


def same_words(a: str, b: str) -> bool:
    """Whether two transcripts say the same words, whatever their case and punctuation."""
    words = lambda text: re.sub(r"[^\w\s']", " ", text.lower()).split()  # noqa: E731
    return words(a) == words(b)


@dataclass
class Guess:
    """One session's guessed question, its research (a task giving the tool exchange) and, once
    prefilled, the prompt before the question (to remove what follows it if the guess was wrong)."""

    session_id: str
    question: str
    spoken: bool
    research: asyncio.Task
    stop: threading.Event = field(default_factory=threading.Event)
    history: list[dict] | None = None
    tools: list[dict] | None = None
    batches: list[tuple[float, int]] = field(default_factory=list)  # (perf_counter, evaluated) after each batch

    @property
    def evaluated(self) -> int:
        """Tokens the guess's prefill has evaluated so far."""
        return self.batches[-1][1] if self.batches else 0

    def evaluated_by(self, moment: float) -> int:
        """Tokens evaluated before `moment` (a perf_counter time): a batch under way at the commit
        is work after it, and is waited for."""
        return max((n for at, n in self.batches if at <= moment), default=0)


class Preemptions:
    def __init__(self, llm: Model, prompt: TurnPrompt, research: Research, queue: ModelQueue):
        self.llm, self.prompt, self.research, self.queue = llm, prompt, research, queue
        self.guesses: dict[str, Guess] = {}
        self.tasks: set[asyncio.Task] = set()
        self._drafts = 0  # whisper drafts running now; read by the prefill's worker thread

    @contextmanager
    def drafting(self):
        """Around a whisper draft: prefills pause at their next batch until it is done."""
        self._drafts += 1
        try:
            yield
        finally:
            self._drafts -= 1

    def start(self, session_id: str, question: str, spoken: bool, instructions: str | None, offer: Offer) -> None:
        """Guess that `question` is the session's next one; a different earlier guess stops."""
        earlier = self.guesses.get(session_id)
        if earlier is not None and earlier.question == question and earlier.spoken == spoken:
            return
        if earlier is not None:
            earlier.stop.set()  # its cells go as the new guess is evaluated over them
        loop = asyncio.get_running_loop()
        research = loop.create_task(asyncio.to_thread(self.research.for_question, question, spoken, session_id))
        guess = self.guesses[session_id] = Guess(session_id, question, spoken, research)
        task = loop.create_task(self._prefill(guess, instructions, offer))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def take(self, session_id: str, question: str, spoken: bool, figures: TurnFigures) -> list[dict] | None:
        """The research of the session's guess if `question` is what it guessed, else None (the
        turn researches); a wrong guess's cells leave the cache. Called holding the model."""
        guess = self.guesses.pop(session_id, None)
        if guess is None:
            return None
        guess.stop.set()
        figures.preempted = same_words(guess.question, question) and guess.spoken == spoken
        figures.preempted_tokens = guess.evaluated_by(figures.started)
        figures.preempted_late_tokens = guess.evaluated - figures.preempted_tokens
        if figures.preempted:
            try:
                return await guess.research
            except Exception:  # researched again by the turn, which says what is wrong
                return None
        guess.research.cancel()
        if guess.history is not None:
            await asyncio.to_thread(self.llm.discard, guess.history, guess.tools)
        return None

    def drop(self, session_id: str) -> None:
        """The session's client has gone: its guess stops (its cells are overwritten by the next prompt)."""
        guess = self.guesses.pop(session_id, None)
        if guess is not None:
            guess.stop.set()

    async def _prefill(self, guess: Guess, instructions: str | None, offer: Offer) -> None:
        try:
            exchange = await guess.research
        except Exception:
            log.exception("research for a guessed question failed")
            return
        if not self.llm.warms or guess.stop.is_set():
            return
        await self.queue.acquire(background=True)
        try:
            if not guess.stop.is_set():
                await asyncio.to_thread(self._evaluate, guess, [{"role": "user", "content": guess.question}, *exchange],
                                        instructions, offer)
        except Exception:  # a guess only saves time: the turn does the work itself
            log.exception("a prefill ahead of the commit failed")
        finally:
            self.queue.release()

    def _evaluate(self, guess: Guess, question: list[dict], instructions: str | None, offer: Offer) -> None:
        fitted = self.prompt.before_commit(guess.session_id, instructions, offer, question)
        if fitted is None:
            return
        asked = max(i for i, m in enumerate(fitted.messages) if m["role"] == "user")
        guess.history, guess.tools = fitted.messages[:asked], offer.native
        self.llm.prefill(fitted.messages, offer.native, stop=lambda: self._must_stop(guess),
                         progress=lambda n: guess.batches.append((time.perf_counter(), n)))

    def _must_stop(self, guess: Guess) -> bool:
        """Between batches (in the worker thread): wait while whisper drafts, then stop if the guess
        was dropped or a turn waits for the model."""
        while self._drafts and not guess.stop.is_set():
            time.sleep(DRAFT_WAIT_S)
        return guess.stop.is_set() or self.queue.turn_waiting.is_set()

    async def idle(self) -> None:
        """Wait for guesses being prefilled (tests and shutdown)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)
