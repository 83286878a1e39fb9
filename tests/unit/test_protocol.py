"""The Realtime protocol without sockets or models: the fuzz of malformed events that
tests/test_protocol.py sends to a live server, sent straight to `RealtimeProtocol`."""

from __future__ import annotations

import itertools
import json
import typing
from collections import deque

import pytest

from harness.fuzz import mutations, sample
from harness.realtime import VALID_EVENTS
from voice.realtime.client_events import read
from voice.realtime.effects import Cancel, DetectSpeech, Effect, Respond, Send, Transcribe, TranscribeDraft
from voice.realtime.protocol import IDLE, RealtimeProtocol

EFFECTS = typing.get_args(Effect)
RESPONSE_EVERY = 50  # events a response runs for before it ends, so events arrive in every state


class Connection:
    """What voice/realtime/connection.py does with the protocol's effects, with work that ends at once:
    a transcription succeeds, a draft hears nothing, no speech is detected, and a response runs until
    it is cancelled or `end_response` is called."""

    def __init__(self, protocol: RealtimeProtocol):
        self.protocol = protocol
        self.responding = False

    def carry_out(self, effects: list[Effect]) -> list[Effect]:
        """`effects` and those that follow from reporting back, in order."""
        done, pending = [], deque(effects)
        while pending:
            effect = pending.popleft()
            done.append(effect)
            if isinstance(effect, Respond):
                self.responding = True
            elif isinstance(effect, Cancel):
                pending.extend(self._ended())
            elif isinstance(effect, Transcribe):
                pending.extend(self.protocol.transcribed(True))
            elif isinstance(effect, TranscribeDraft):
                pending.extend(self.protocol.drafted(effect.generation, None))
            elif isinstance(effect, DetectSpeech):
                pending.extend(self.protocol.speech_detected([], False))
        return done

    def end_response(self) -> list[Effect]:
        return self.carry_out(self._ended()) if self.responding else []

    def _ended(self) -> list[Effect]:
        self.responding = False
        return self.protocol.response_ended()


def errors(effects: list[Effect]) -> list[dict]:
    return [e.event["error"] for e in effects if isinstance(e, Send) and e.event["type"] == "error"]


@pytest.mark.parametrize("fuzz", ["every mutation in order", "a seeded sample"])
def test_every_malformed_event_is_refused_with_an_error_or_served_and_the_protocol_serves_on(fuzz):
    events = list(itertools.chain.from_iterable(mutations(e) for e in VALID_EVENTS)) if fuzz.startswith("every") \
        else sample(VALID_EVENTS, 2_000, seed=1)
    protocol = RealtimeProtocol("sess_fuzz", "Be brief.", "amy", max_audio_seconds=60, max_text_chars=4000)
    connection = Connection(protocol)
    connection.carry_out(protocol.opened())
    refused = 0
    for number, event in enumerate(events, 1):
        raw = json.dumps(event)
        effects = connection.carry_out(protocol.receive(raw))  # an exception fails the test here
        assert all(isinstance(effect, EFFECTS) for effect in effects), (event, effects)
        for error in errors(effects):
            assert error["message"] and error["code"] != "internal_error", (event, error)
        if read(raw).problem is not None:  # what the `openai` package's models refuse is refused
            assert errors(effects), event
            refused += 1
        if number % RESPONSE_EVERY == 0:
            connection.end_response()
    assert refused > len(events) // 2  # the fuzz did send mostly malformed events

    # And the protocol still serves valid events.
    for _ in range(len(events)):  # each ended response may start one deferred behind it
        if not connection.end_response():
            break
    assert protocol.state is IDLE
    effects = connection.carry_out(protocol.receive(json.dumps(
        {"type": "session.update", "session": {"type": "realtime", "tool_choice": "none"}})))
    assert [e.event["type"] for e in effects if isinstance(e, Send)] == ["session.updated"]
    effects = connection.carry_out(protocol.receive(json.dumps({"type": "response.create"})))
    assert [type(e) for e in effects] == [Respond] and protocol.response is effects[0].response
