"""Bad input on every door: the chat APIs and Wyoming answer each malformed request or event with a
clear error in their own shape, never a 500 or a traceback, and go on serving.

The first tests need no model (validation is pure); the last ones drive a real server with a
seeded sample of mutations, as scripts/fuzz_doors.py does with thousands.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from wyoming.audio import AudioStart
from wyoming.client import AsyncTcpClient
from wyoming.event import Event, Eventable, async_read_event
from wyoming.info import Info
from wyoming.tts import Synthesize

from harness import doors
from harness.fuzz import mutations
from harness.realtime import free_port
from models.tool_schema import fit_call
from voice.chat import ollama, openai_chat
from voice.chat.turn import BadRequest, ChatRequest
from voice.turns.tools import tool_instructions
from voice.wyoming.events import BadEvent, LostFraming, parse, read_event


def test_whole_floats_are_integers_and_fractions_are_not():
    """Home Assistant's number fields hold floats: it sends `num_ctx: 8192.0`, as Ollama accepts."""
    chat = ollama.chat_request(doors.HOME_ASSISTANT_CHAT)
    assert chat.context == 8192 and isinstance(chat.context, int)
    assert [t["function"]["name"] for t in chat.tools] == [
        t["function"]["name"] for t in doors.HOME_ASSISTANT_CHAT["tools"]]
    with pytest.raises(BadRequest) as bad:
        ollama.chat_request({**doors.HOME_ASSISTANT_CHAT, "options": {"num_ctx": 8192.5}})
    assert bad.value.param == "options.num_ctx" and "fractional" in str(bad.value)
    assert openai_chat.chat_request({**doors.OPENAI_CHAT, "max_tokens": 5.0}).max_tokens == 5


@pytest.mark.parametrize("parse_body, valid", [(ollama.chat_request, doors.OLLAMA_BODIES),
                                              (openai_chat.chat_request, doors.OPENAI_BODIES)],
                         ids=["ollama", "openai"])
def test_every_mutated_chat_body_is_parsed_or_refused_naming_its_field(parse_body, valid):
    parsed = refused = 0
    for value, body in [(original, mutated) for original in valid for mutated in mutations(original, keep=())]:
        try:
            chat = parse_body(body)
            assert isinstance(chat, ChatRequest)
            # What reads a request's tools after the door: their description in words (a template
            # that knows no tools) and the fitting of a call's arguments to their schema.
            described = tool_instructions(False, chat.tools)
            assert all(f"- {tool['function']['name']}(" in described for tool in chat.tools)
            for tool in chat.tools:
                call = {"id": "c", "type": "function", "function": {"name": tool["function"]["name"],
                                                                    "arguments": '{"name": "x", "area": ["y"]}'}}
                assert json.loads(fit_call(call, chat.tools, "x")["function"]["arguments"]) is not None
            parsed += 1
        except BadRequest as bad:
            refused += 1
            assert str(bad).startswith(bad.param) and bad.status == 400
            assert bad.param.split(".")[0] in {*value, "body"}, (bad.param, body)
    assert parsed > 100 and refused > 100, (parsed, refused)


def test_every_mutated_wyoming_event_is_typed_or_refused_naming_its_field():
    typed = refused = 0
    for event in [mutated for value in doors.WYOMING_EVENTS for mutated in mutations(value)]:
        data = event.get("data")
        try:
            value = parse(Event(event["type"], data if isinstance(data, dict) else {}, event.get("payload")))
            assert isinstance(value, Eventable)
            typed += 1
        except BadEvent as bad:
            refused += 1
            said = str(bad).startswith(event["type"]) if bad.code == "bad_request" else event["type"] in str(bad)
            assert bad.code in ("bad_request", "unknown_event") and said, (bad.code, str(bad))
    assert typed > 50 and refused > 200, (typed, refused)
    with pytest.raises(BadEvent) as bad:
        parse(Event("synthesize", {"voice": {"name": "x"}}))
    assert str(bad.value) == "synthesize: text: Field required"
    with pytest.raises(BadEvent, match="width"):
        parse(AudioStart(rate=16_000, width=7, channels=1).event())


def test_a_line_that_is_not_json_is_skipped_and_lost_framing_ends_the_stream():
    async def read(wire: bytes) -> list:
        reader = asyncio.StreamReader()
        reader.feed_data(wire)
        reader.feed_eof()
        seen = []
        while True:
            try:
                event = await read_event(reader)
            except (BadEvent, LostFraming) as problem:
                seen.append(type(problem).__name__)
                if isinstance(problem, LostFraming):
                    return seen
                continue
            if event is None:
                return seen
            seen.append(event.type)

    describe = doors.frame({"type": "describe"})
    assert asyncio.run(read(b"not json\n[1, 2]\n" + describe)) == ["BadEvent", "BadEvent", "describe"]
    assert asyncio.run(read(b'{"type": "x", "data_length": -5}\n' + describe)) == ["LostFraming"]
    assert asyncio.run(read(b'{"type": "x", "data": {"t": "\\ud800"}}\n' + describe)) == ["BadEvent", "describe"]
    chunk = doors.frame({"type": "audio-chunk", "data": {"rate": 16000, "width": 2, "channels": 1}}, b"\0" * 8)
    assert asyncio.run(read(chunk + describe)) == ["audio-chunk", "describe"]


def test_a_live_fuzz_of_the_chat_apis_gets_no_500_and_no_traceback(make_server, caplog):
    server = make_server(research="off", reply_tokens=2)
    caplog.set_level(logging.WARNING, logger="parlour")
    requests = doors.chat_requests(count=30, seed=7)
    statuses: dict[int, int] = {}
    for path, body in requests:
        status, reply = doors.post(server.port, path, body)
        statuses[status] = statuses.get(status, 0) + 1
        if status >= 400:
            problem = json.loads(reply)["error"]
            assert (problem if path.startswith("/api/") else problem["message"]).strip(), reply
    assert not [s for s in statuses if s >= 500], statuses
    assert statuses.get(400, 0) > 15 and statuses.get(200, 0) > 2, statuses
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records if r.exc_info][:3]
    valid = json.dumps(doors.SHORT_HOME_ASSISTANT_CHAT | {"stream": False}).encode()
    status, reply = doors.post(server.port, "/api/chat", valid)
    assert status == 200 and json.loads(reply)["done"] is True
    # Ollama's way to load a model: a chat with no messages (this one is always loaded).
    status, reply = doors.post(server.port, "/api/chat", b'{"model": "parlour:latest", "messages": []}')
    assert status == 200 and json.loads(reply)["done_reason"] == "load"


def test_a_live_fuzz_of_wyoming_gets_errors_that_say_what_is_wrong(make_server, caplog):
    port = free_port()
    make_server(research="off", reply_tokens=2, wyoming_port=port)
    caplog.set_level(logging.WARNING, logger="parlour")

    async def fuzz() -> list[Event]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for wire in doors.wyoming_lines(count=300, seed=11):
            writer.write(wire)
        writer.write(doors.frame({"type": "describe"}))  # a barrier: everything before it is answered
        answers = []
        while not Info.is_type((event := await asyncio.wait_for(async_read_event(reader), 300)).type):
            answers.append(event)
        writer.close()
        async with AsyncTcpClient("127.0.0.1", port) as client:  # and the door still serves
            await client.write_event(Synthesize(text="Hello.").event())
            while (event := await asyncio.wait_for(client.read_event(), 60)).type != "audio-stop":
                assert event.type != "error", event.data
        return answers

    answers = asyncio.run(fuzz())
    errors = [e.data for e in answers if e.type == "error"]
    assert len(errors) > 100, len(errors)
    internal = [e for e in errors if e["code"] == "internal_error"]
    assert not internal, internal[:3]
    assert all(e["code"] in ("bad_request", "unknown_event", "audio_not_started", "synthesize_not_started",
                             "invalid_audio", "audio_too_long") and e["text"] for e in errors), errors[:3]
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records if r.exc_info][:3]
