"""Prefill while the key is held (preemptive prefill): what each draft heard is researched, and
the prompt its turn will have is evaluated into the model's cache, before release.

While a push-to-talk key is held, whisper drafts the audio so far every half second
(voice.realtime.transcription). The model reads a question's evidence before its words
(voice.turns.prompt_layout.evidence_first), and the evidence a question finds is mostly settled
before its last words (the document it names, its opening): `Preemptions.start` researches each
draft and evaluates [history, evidence] in the background, fitted as the turn will fit it. A draft
whose last moments are silent is probably the whole question (`settled`): the question is evaluated
after its evidence too. A later draft that found other evidence keeps what the two share.

At the turn (`take`), if the committed question has the same words as the draft (case and
punctuation aside, as LiveKit Agents' preemptive generation compares transcripts), the draft's
research is the turn's; otherwise the question is researched now. Either way the cache keeps only
what the turn's prompt shares with it, and the rest is removed (llama_memory_seq_rm), so the turn
reads no cell of a wrong guess: a wrong guess costs idle CPU and nothing else.

A guess is never stored, announced or spoken: it lives here and in the cache until the commit. It
waits for the model behind turns like other background work, stops as soon as a turn waits, and
pauses while whisper drafts, so the drafts keep the CPU.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from models.model import Model
from voice.knowledge.research import Research
from voice.text.same_words import same_words
from voice.turns.figures import TurnFigures
from voice.turns.model_queue import ModelQueue
from voice.turns.prompt import TurnPrompt
from voice.turns.prompt_layout import compact_calls, evidence_first
from voice.turns.tools import Offer

log = logging.getLogger("parlour")
DRAFT_WAIT_S = 0.02  # how often a paused prefill looks again whether whisper is done
# A guess evaluates this many tokens between looks at whisper: a draft waits at most one batch
# (about 0.5 s at a depth of 6,000 tokens on a 2-core Zen 4).
GUESS_BATCH = 32


def as_read(question: str, exchange: list[dict]) -> dict:
    """The question's message as the model reads it, after its research (evidence_first)."""
    return evidence_first(compact_calls([{"role": "user", "content": question}, *exchange]))[-1]


@dataclass
class Guess:
    """What one session's latest draft heard, whether it `settled`, its research (a task giving the
    tool exchange) and, once prefilled, the prompt before the question (the history)."""

    session_id: str
    question: str
    spoken: bool
    settled: bool
    research: asyncio.Task[list[dict]]
    stop: threading.Event = field(default_factory=threading.Event)
    history: list[dict] | None = None
    tools: list[dict] | None = None
    # (perf_counter, tokens) of each batch evaluated for this question so far: shared by the guesses
    # of one held key, each draft's after the one before.
    batches: list[tuple[float, int]] = field(default_factory=list)

    @property
    def evaluated(self) -> int:
        """Tokens the key's guesses have evaluated so far."""
        return sum(n for _, n in self.batches)

    def evaluated_by(self, moment: float) -> int:
        """Tokens evaluated before `moment` (a perf_counter time): a batch under way at the commit
        is work after it, and is waited for."""
        return sum(n for at, n in self.batches if at <= moment)


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

    def start(self, session_id: str, question: str, spoken: bool, settled: bool, instructions: str | None,
              offer: Offer) -> None:
        """A draft heard `question` (`settled`: probably all of it); an earlier guess stops, and
        what its prefill shares with this one stays in the cache."""
        earlier = self.guesses.get(session_id)
        if earlier is not None and (earlier.question, earlier.spoken, earlier.settled) == (question, spoken, settled):
            return
        if earlier is not None:
            earlier.stop.set()
        loop = asyncio.get_running_loop()
        if earlier is not None and (earlier.question, earlier.spoken) == (question, spoken):
            research = earlier.research
        else:
            research = loop.create_task(asyncio.to_thread(self.research.for_question, question, spoken, session_id))
        guess = self.guesses[session_id] = Guess(session_id, question, spoken, settled, research,
                                                 batches=earlier.batches if earlier is not None else [])
        task = loop.create_task(self._prefill(guess, instructions, offer))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def take(self, session_id: str, question: str, spoken: bool, figures: TurnFigures) -> list[dict] | None:
        """The question's research: its guess's if the guess heard the same words, else its own;
        None if there was no guess (the turn researches). The cache keeps what the turn's prompt
        shares with the guess's and no more. Called holding the model."""
        guess = self.guesses.pop(session_id, None)
        if guess is None:
            return None
        guess.stop.set()
        figures.preempted = same_words(guess.question, question) and guess.spoken == spoken
        figures.preempted_tokens = guess.evaluated_by(figures.started)
        figures.preempted_late_tokens = guess.evaluated - figures.preempted_tokens
        exchange: list[dict] | None = None
        if figures.preempted:
            try:
                exchange = await guess.research
            except Exception:  # researched again below, which says what is wrong
                exchange = None
        else:
            guess.research.cancel()
        if exchange is None:
            exchange = await asyncio.to_thread(self.research.for_question, question, spoken, session_id)
        if guess.history is not None:
            await asyncio.to_thread(self.llm.discard, [*guess.history, as_read(question, exchange)], guess.tools,
                                    len(guess.history))
        return exchange

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
            if not guess.stop.is_set() and (guess.settled or exchange):
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
        *history, asked = fitted.messages
        if asked["role"] != "user":  # the evidence was cut to fit: the turn will see
            return
        if not guess.settled:  # the evidence, and the separator the question will follow
            asked = {**asked, "content": asked["content"].removesuffix(guess.question)}
        guess.history, guess.tools = history, offer.native
        done = [0]  # what this prefill has evaluated so far: `progress` tells it cumulatively

        def batch_ended(evaluated: int) -> None:
            guess.batches.append((time.perf_counter(), evaluated - done[0]))
            done[0] = evaluated

        self.llm.prefill([*history, asked], offer.native, stop=lambda: self._must_stop(guess), batch=GUESS_BATCH,
                         progress=batch_ended, apart=guess.question if guess.settled else "")

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
