"""What a front end is given: the service's shared parts, typed, and a narrow view of the turn engine.

The Realtime connection, Wyoming and the chat APIs take a `Service` (`voice.server.Service` is
one) and ask for turns only through `Turns`: they never reach into the engine's queue, upkeep or
guesses.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import AbstractContextManager
from typing import Protocol

from models.model import Model
from models.stt import SpeechToText, Transcript
from models.tts import TextToSpeech
from voice.config import Config
from voice.store.sessions import SessionStore
from voice.turns.events import TurnEvent, TurnRequest


class Turns(Protocol):
    """The turn engine as the front ends see it (`voice.turns.engine.TurnEngine`)."""

    def respond(self, request: TurnRequest) -> AsyncGenerator[TurnEvent, None]: ...

    def preempt(self, request: TurnRequest, question: str, settled: bool = True) -> None: ...

    def forget_guesses(self, session_id: str) -> None: ...

    def hearing(self) -> None: ...

    def drafting(self) -> AbstractContextManager[None]: ...

    @property
    def context(self) -> int: ...

    @property
    def runs_tools(self) -> bool: ...


class Service(Protocol):
    """The parts every front end shares."""

    @property
    def config(self) -> Config: ...

    @property
    def store(self) -> SessionStore: ...

    @property
    def engine(self) -> Turns: ...

    @property
    def llm(self) -> Model: ...

    @property
    def stt(self) -> SpeechToText: ...

    @property
    def tts(self) -> TextToSpeech: ...

    @property
    def voice_name(self) -> str: ...

    @property
    def port(self) -> int | None: ...

    @property
    def started(self) -> float: ...

    def transcribe(self, audio: bytes, rate: int = ...) -> Transcript:
        """What whisper hears, expecting the knowledge base's names; blocking."""

    def owner_of_key(self, key: str | None) -> str | None:
        """The owner an API key acts for: "" without API keys, None if it is missing or wrong."""
