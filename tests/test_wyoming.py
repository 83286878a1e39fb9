"""Home Assistant's protocol: a real `parlour serve` Wyoming port, driven by the `wyoming` package's
own client, with the real models."""

from __future__ import annotations

import asyncio
import re

import jiwer
import numpy as np
import pytest
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.event import Event
from wyoming.handle import Handled
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from harness.realtime import free_port
from tests.helpers import until
from voice.turns.prompt_layout import compact_calls, evidence_first
from voice.wyoming.assistant import session_for


def words(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split())


@pytest.fixture
def wyoming_server(make_server):
    def make():
        port = free_port()
        return make_server(wyoming_port=port), port
    return make


async def exchange(port: int, events: list[Event], *until: str, timeout: float = 120) -> list[Event]:
    """Send `events`, then read until an event of one of the types `until` (inclusive)."""
    async with AsyncTcpClient("127.0.0.1", port) as client:
        for event in events:
            await client.write_event(event)
        received = []
        while True:
            event = await asyncio.wait_for(client.read_event(), timeout)
            assert event is not None, "the server closed the connection"
            received.append(event)
            if event.type in until:
                return received


def audio_events(pcm: bytes, rate: int, channels: int = 1, chunk: int = 4096) -> list[Event]:
    events = [AudioStart(rate=rate, width=2, channels=channels).event()]
    events += [AudioChunk(rate=rate, width=2, channels=channels, audio=pcm[i:i + chunk]).event()
               for i in range(0, len(pcm), chunk)]
    return events + [AudioStop().event()]


def spoken_audio(events: list[Event]) -> tuple[bytes, int]:
    chunks = [AudioChunk.from_event(e) for e in events if AudioChunk.is_type(e.type)]
    return b"".join(c.audio for c in chunks), chunks[0].rate


def test_describe_lists_speech_to_text_speech_and_the_assistant(wyoming_server):
    server, port = wyoming_server()
    info = Info.from_event(asyncio.run(exchange(port, [Describe().event()], "info"))[-1])
    assert [p.name for p in info.asr] == ["parlour-asr"] and info.asr[0].supports_transcript_streaming
    assert info.asr[0].models[0].languages == ["en"]
    assert [p.name for p in info.tts] == ["parlour-tts"] and info.tts[0].supports_synthesize_streaming
    assert info.tts[0].voices[0].name == "en_US-joe-medium"
    assert [p.name for p in info.handle] == ["parlour"] and info.handle[0].supports_handled_streaming
    assert info.handle[0].models[0].name.endswith(".gguf")


def test_speech_in_any_format_is_transcribed(wyoming_server, tts):
    server, port = wyoming_server()
    said = "Turn on the lights in the kitchen and close the blinds."
    mono = np.frombuffer(b"".join(tts.synthesize(said, rate=22_050)), dtype="<i2")
    stereo = np.repeat(mono, 2).astype("<i2").tobytes()  # 22,050 Hz, two channels
    events = asyncio.run(exchange(port, [Transcribe(language="en").event()] + audio_events(stereo, 22_050, 2),
                                  "transcript"))
    assert [e.type for e in events] == ["transcript-start", "transcript-chunk", "transcript-stop", "transcript"]
    heard = Transcript.from_event(events[-1]).text
    assert jiwer.wer(words(said), words(heard)) <= 0.1, heard


def test_synthesized_speech_says_the_text(wyoming_server, stt):
    server, port = wyoming_server()
    # Piper samples noise, so each rendering differs; this sentence was heard exactly 20 times in 20
    # (the earlier "the tea is ready" became "the tears ready" about one time in eight).
    text = "Please remember to water the plants on Sunday morning."
    events = asyncio.run(exchange(port, [Synthesize(text=text).event()], "audio-stop"))
    assert events[0].type == "audio-start" and AudioStart.from_event(events[0]).rate == 22_050
    pcm, rate = spoken_audio(events)
    assert len(pcm) / 2 / rate > 1.0
    heard = stt.transcribe(pcm, sample_rate=rate).text
    assert jiwer.wer(words(text), words(heard)) <= 0.2, heard


def test_streamed_text_is_spoken_before_it_ends(wyoming_server):
    server, port = wyoming_server()

    async def run() -> tuple[list[str], list[str]]:
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(SynthesizeStart().event())
            await client.write_event(SynthesizeChunk(text="The first sentence is complete").event())
            await client.write_event(SynthesizeChunk(text=". The second one is still being").event())
            before = []
            while not before or before[-1] != "audio-stop":  # the first sentence, before synthesize-stop
                before.append((await asyncio.wait_for(client.read_event(), 60)).type)
            await client.write_event(SynthesizeChunk(text=" written.").event())
            await client.write_event(SynthesizeStop().event())
            # Home Assistant also sends the whole text; a streaming server ignores it.
            await client.write_event(Synthesize(text="The first sentence is complete. The second...").event())
            after = []
            while not after or after[-1] != "synthesize-stopped":
                after.append((await asyncio.wait_for(client.read_event(), 60)).type)
            return before, after

    before, after = asyncio.run(run())
    assert before[0] == "audio-start" and "audio-chunk" in before
    assert after[0] == "audio-start" and after.count("audio-start") == 1 and after[-2:] == ["audio-stop",
                                                                                            "synthesize-stopped"]


def ask(port: int, text: str, conversation_id: str) -> list[Event]:
    question = Transcript(text=text, context={"conversation_id": conversation_id, "device_id": "kitchen"})
    return asyncio.run(exchange(port, [question.event()], "handled", timeout=180))


def test_a_conversation_id_is_one_remembered_session_across_restarts(make_server, llm):
    port = free_port()
    server = make_server(wyoming_port=port)
    events = ask(port, "My name is Ada. Remember it.", "conv-1")
    assert [e.type for e in events][0] == "handled-start" and [e.type for e in events][-2:] == ["handled-stop",
                                                                                               "handled"]
    chunks = "".join(e.data["text"] for e in events if e.type == "handled-chunk")
    handled = Handled.from_event(events[-1])
    assert handled.text == chunks.strip() and handled.text and handled.context["conversation_id"] == "conv-1"

    events = ask(port, "What is my name?", "conv-1")
    session = session_for("conv-1")
    transcript = server.service.store.transcript(session)
    assert [m["role"] for m in transcript[1:]] == ["user", "assistant"] * 2
    # The first exchange too.
    assert server.service.engine.recent[-1].prompt_tokens == llm.count(evidence_first(compact_calls(transcript[:-1])))
    assert "Ada" in Handled.from_event(events[-1]).text

    ask(port, "Hello there.", "conv-2")
    assert len(server.service.store.transcript(session_for("conv-2"))) == 3  # another session
    server.stop()

    port = free_port()
    restarted = make_server(wyoming_port=port)
    ask(port, "Thanks.", "conv-1")
    assert len(restarted.service.store.transcript(session)) == 7


def test_bad_input_gets_errors_and_the_next_request_is_served(wyoming_server):
    server, port = wyoming_server()
    stray = AudioChunk(rate=16_000, width=2, channels=1, audio=bytes(3200)).event()
    events = asyncio.run(exchange(port, [Event(type="no-such-event"), stray, AudioStop().event(),
                                         SynthesizeChunk(text="hi").event(), Describe().event()], "info"))
    errors = [(e.data["code"], e.data["text"]) for e in events if e.type == "error"]
    assert [code for code, _ in errors] == ["unknown_event", "audio_not_started", "audio_not_started",
                                            "synthesize_not_started"]
    assert "no-such-event" in errors[0][1]
    assert events[-1].type == "info"


def test_a_client_gone_mid_reply_leaves_the_service_serving(wyoming_server):
    server, port = wyoming_server()

    async def leave() -> None:
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(Transcript(text="Tell me a long story about a lighthouse.",
                                                context={"conversation_id": "gone"}).event())
            assert (await asyncio.wait_for(client.read_event(), 120)).type == "handled-start"

    asyncio.run(leave())
    events = ask(port, "What is the capital of France?", "after")
    assert "Paris" in Handled.from_event(events[-1]).text
    stored = server.service.store.transcript(session_for("gone"))
    assert stored[1] == {"role": "user", "content": "Tell me a long story about a lighthouse."}


def test_a_reply_that_cannot_fit_ends_its_handling_and_says_why(make_server):
    port = free_port()
    make_server(wyoming_port=port, context=512, reply_tokens=64, instructions="Be brief. " * 300)
    question = Transcript(text="What is two plus two?", context={"conversation_id": "no-room"})
    events = asyncio.run(exchange(port, [question.event()], "handled", "not-handled"))
    assert [e.type for e in events][-3:] == ["handled-start", "handled-stop", "not-handled"]
    assert "system prompt" in events[-1].data["text"]


def test_a_busy_model_answers_not_handled(make_server):
    port = free_port()
    server = make_server(wyoming_port=port, max_queue=1)
    server.idle()  # the start's warm-up is done: the model is free
    engine = server.service.engine

    async def one(text: str, conversation: str) -> list[Event]:
        question = Transcript(text=text, context={"conversation_id": f"busy-{conversation}"})
        return await exchange(port, [question.event()], "handled", "not-handled", timeout=180)

    async def three() -> list[list[Event]]:
        first = asyncio.create_task(one("Tell me a long story about a lighthouse.", "first"))
        await until(lambda: engine.generating == 1)  # the first holds the model
        second = asyncio.create_task(one("And another about a ship.", "second"))
        await until(lambda: engine.waiting == 1)  # the second waits for it: the queue is full
        third = await one("What is two plus two?", "third")
        return [await first, await second, third]

    results = asyncio.run(three())
    assert [events[-1].type for events in results] == ["handled", "handled", "not-handled"]
    assert "waiting" in results[2][-1].data["text"]
