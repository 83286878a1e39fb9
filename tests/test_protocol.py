"""The Realtime protocol as real clients use it: items under the client's ids, function tools, every
response ending in response.done, the Agents SDK, and a fuzz of malformed events."""

from __future__ import annotations

import asyncio
import itertools
import json

from harness.fuzz import mutations
from harness.realtime import ANSWERED, VALID_EVENTS, WEATHER_TOOL, Client, done, reply_text


def user_item(text: str, item_id: str | None = None) -> dict:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    return {**item, "id": item_id} if item_id else item


def test_items_keep_the_clients_ids_and_places_and_can_be_retrieved_and_deleted(server):
    client = Client(server.url())
    client.send({"type": "conversation.item.create", "item": user_item("My cat is called Tom.", "msg_second")})
    added = client.until("conversation.item.done")[0]
    assert added["type"] == "conversation.item.added" and added["item"]["id"] == "msg_second"
    client.send({"type": "conversation.item.create", "previous_item_id": "root",
                 "item": {"type": "message", "role": "system",
                          "content": [{"type": "input_text", "text": "The user likes short answers."}],
                          "id": "msg_first"}})
    first = client.until("conversation.item.done")[-1]
    assert first["item"]["id"] == "msg_first" and first["previous_item_id"] is None
    store = server.service.store
    assert [m.item_id for m in store.messages(client.session_id)] == ["msg_first", "msg_second"]

    client.send({"type": "conversation.item.create", "event_id": "evt_dup", "item": user_item("Again.", "msg_second")})
    duplicate = client.until("error")[-1]["error"]
    assert duplicate["param"] == "item.id" and duplicate["event_id"] == "evt_dup"
    client.send({"type": "conversation.item.create", "previous_item_id": "msg_nowhere", "item": user_item("Lost.")})
    assert client.until("error")[-1]["error"]["param"] == "previous_item_id"

    client.send({"type": "conversation.item.retrieve", "item_id": "msg_second"})
    retrieved = client.until("conversation.item.retrieved")[-1]["item"]
    assert retrieved["content"][0]["text"] == "My cat is called Tom."

    events = client.ask("What is my cat called?", max_tokens=12,
                        metadata={"client_event_id": "evt_ask"})
    created = next(e for e in events if e["type"] == "response.created")
    assert created["response"]["metadata"] == {"client_event_id": "evt_ask"}  # echoed, as LiveKit waits for
    assert "Tom" in reply_text(events)

    client.send({"type": "conversation.item.delete", "item_id": "msg_first"})
    assert client.until("conversation.item.deleted")[-1]["item_id"] == "msg_first"
    client.send({"type": "conversation.item.retrieve", "item_id": "msg_first"})
    assert client.until("error")[-1]["error"]["code"] == "item_not_found"
    assert "msg_first" not in [m.item_id for m in store.messages(client.session_id)]
    assert [m.status for m in store.messages(client.session_id, deleted=True)][0] == "deleted"
    assert all("short answers" not in (m["content"] or "") for m in store.transcript(client.session_id)[1:])
    client.close()


def test_a_function_call_round_trip_and_deleting_the_call_takes_its_output(server):
    client = Client(server.url())
    client.send({"type": "session.update", "session": {"type": "realtime", "tools": [WEATHER_TOOL]}})
    assert client.until("session.updated")[-1]["session"]["tools"][0]["name"] == "get_weather"
    events = client.ask("What is the weather in Paris right now?", max_tokens=60)
    kinds = [e["type"] for e in events]
    assert "response.output_text.delta" not in kinds  # the call is not spoken or shown as text
    assert kinds.index("response.function_call_arguments.delta") < kinds.index(
        "response.function_call_arguments.done") < kinds.index("response.output_item.done")
    response = done(events)
    assert response["status"] == "completed" and [o["type"] for o in response["output"]] == ["function_call"]
    call = response["output"][0]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Paris"}

    client.send({"type": "conversation.item.create", "item": {
        "type": "function_call_output", "call_id": call["call_id"],
        "output": '{"temperature": "21 C", "sky": "sunny"}'}})
    client.until("conversation.item.done")
    client.send({"type": "response.create", "response": {"output_modalities": ["text"], "max_output_tokens": 40}})
    answer = client.until("response.done")
    assert "21" in reply_text(answer) and done(answer)["status"] in ANSWERED
    stored = [m.message for m in server.service.store.messages(client.session_id)]
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[1]["tool_calls"][0]["id"] == call["call_id"] == stored[2]["tool_call_id"]

    client.send({"type": "conversation.item.delete", "item_id": call["id"]})
    deleted = [e["item_id"] for e in client.until("conversation.item.deleted", "error")]
    output_id = server.service.store.messages(client.session_id, deleted=True)[2].item_id
    client.send({"type": "input_audio_buffer.clear"})
    deleted += [e["item_id"] for e in client.until("input_audio_buffer.cleared")
                if e["type"] == "conversation.item.deleted"]
    assert deleted == [call["id"], output_id]
    assert [m["role"] for m in server.service.store.transcript(client.session_id)] == ["system", "user", "assistant"]

    # tool_choice "none" keeps the tools out of the prompt: an answer in words.
    words = done(client.ask("What is the weather in Rome?", max_tokens=24, tool_choice="none"))
    assert [o["type"] for o in words["output"]] == ["message"]
    client.close()


def test_an_item_created_while_a_response_streams_follows_its_reply(server):
    client = Client(server.url())
    client.say("Tell me a long story about a lighthouse.")
    client.send({"type": "response.create", "response": {"output_modalities": ["text"], "max_output_tokens": 60}})
    client.until("response.output_text.delta")
    client.send({"type": "conversation.item.create", "item": user_item("And then?", "msg_later")})
    events = client.until("response.done")
    while not any(e["type"] == "conversation.item.done" and e["item"]["id"] == "msg_later" for e in events):
        events.append(client.recv())
    later = next(i for i, e in enumerate(events)
                 if e["type"] == "conversation.item.added" and e["item"]["id"] == "msg_later")
    # Acknowledged after the reply ended.
    assert later > next(i for i, e in enumerate(events) if e["type"] == "response.done")
    roles = [(m.item_id, m.message["role"]) for m in server.service.store.messages(client.session_id)]
    assert [r for _, r in roles] == ["user", "assistant", "user"] and roles[-1][0] == "msg_later"
    client.close()


def test_the_agents_sdk_calls_a_function_tool_and_answers_from_its_result(server):
    from agents import function_tool
    from agents.realtime import RealtimeAgent, RealtimeRunner

    cities: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        cities.append(city)
        return "21 degrees and sunny"

    async def converse() -> tuple[list[str], list[str]]:
        agent = RealtimeAgent(name="Assistant", instructions="Answer in one short sentence.", tools=[get_weather])
        runner = RealtimeRunner(agent, config={"model_settings": {"output_modalities": ["text"]}})
        session = await runner.run(model_config={"url": f"ws://127.0.0.1:{server.port}/v1/realtime",
                                                 "api_key": "unused"})
        seen, history = [], []
        async with session:
            await session.send_message("What is the weather in Paris right now?")
            ends = 0
            async for event in session:
                seen.append(event.type)
                if event.type == "history_updated":
                    history = event.history
                if event.type == "error":
                    raise AssertionError(event)
                if event.type == "agent_end":
                    ends += 1
                    if ends == 2:  # the call's response, then the answer's
                        break
        said = [getattr(part, "text", None) or getattr(part, "transcript", None) or ""
                for item in history if item.type == "message" and item.role == "assistant" for part in item.content]
        return seen, said

    seen, said = asyncio.run(asyncio.wait_for(converse(), 240))
    assert "tool_start" in seen and "tool_end" in seen
    assert any("21" in text or "sunny" in text.lower() for text in said), said  # the history holds the reply
    assert [c.lower() for c in cities] == ["paris"]
    sessions = server.service.store.list()
    stored = [m.message for m in server.service.store.messages(sessions[0].id)]
    assert [m["role"] for m in stored][-3:] == ["assistant", "tool", "assistant"]
    assert stored[-2]["content"] == "21 degrees and sunny"
    assert "21" in stored[-1]["content"] or "sunny" in stored[-1]["content"].lower()


def test_the_agents_sdk_speaks_hands_free_with_its_default_turn_detection(server, speech):
    from agents.realtime import RealtimeAgent, RealtimeRunner

    async def converse() -> tuple[list[str], int]:
        agent = RealtimeAgent(name="Assistant", instructions="Answer in one short sentence.")
        session = await RealtimeRunner(agent).run(model_config={
            "url": f"ws://127.0.0.1:{server.port}/v1/realtime", "api_key": "unused"})
        seen, audio_bytes, history = [], 0, []
        async with session:
            silence = b"\0\0" * 24_000
            question = silence + speech("What is the capital of France?") + silence
            for start in range(0, len(question), 9_600):  # no commit: the server hears the end of speech
                await session.send_audio(question[start:start + 9_600])
            async for event in session:
                seen.append(event.type)
                if event.type == "error":
                    raise AssertionError(event)
                if event.type == "audio":
                    audio_bytes += len(event.audio.data)
                if event.type == "history_updated":
                    history = event.history
                if event.type == "agent_end":
                    break
        said = [part.transcript or "" for item in history if item.type == "message" and item.role == "assistant"
                for part in item.content]
        return seen, audio_bytes, said

    seen, audio_bytes, said = asyncio.run(asyncio.wait_for(converse(), 240))
    assert any("paris" in text.lower() for text in said), said  # the history holds the spoken reply's words
    assert audio_bytes > 24_000  # more than half a second of speech came back
    stored = [m.message for m in server.service.store.messages(server.service.store.list()[0].id)]
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert stored[0]["content"] == "What is the capital of France?" and "Paris" in stored[1]["content"]


def test_a_fuzz_of_malformed_events_never_drops_the_connection(make_server):
    server = make_server(research="off", reply_tokens=2)
    client = Client(server.url())
    sent = 0
    for event in itertools.chain.from_iterable(mutations(e) for e in VALID_EVENTS):
        client.send(event)
        sent += 1
        if sent % 200 == 0:  # a barrier: everything before it has been read and answered
            client.send({"type": "response.cancel"})
            client.until("error")
    client.send({"type": "response.cancel"})
    client.send({"type": "input_audio_buffer.clear"})
    client.until("input_audio_buffer.cleared", timeout=300)
    ended = lambda: sum(e["type"] == "response.done" for e in client.events)  # noqa: E731
    while ended() < sum(e["type"] == "response.created" for e in client.events):
        client.recv()
    errors = [e["error"] for e in client.events if e["type"] == "error"]
    assert sent > 1_000 and len(errors) > sent // 2
    internal = [e for e in errors if e["code"] == "internal_error"]
    assert not internal, internal[:3]
    assert all(e["message"] for e in errors)
    # Every response that began has ended.
    created = [e["response"]["id"] for e in client.events if e["type"] == "response.created"]
    ended = [e["response"]["id"] for e in client.events if e["type"] == "response.done"]
    assert created == ended
    # And the connection still serves a turn.
    client.send({"type": "session.update", "session": {"type": "realtime", "tool_choice": "none"}})
    client.until("session.updated")
    assert done(client.ask("Say hello.", max_tokens=2))["status"] in ANSWERED
    client.close()


def test_every_item_a_response_adds_is_announced_in_the_conversation_as_the_ga_api_does(server):
    """`conversation.item.added` right after `response.output_item.added`, `.done` right after
    `response.output_item.done`, each following the item before it (Pipecat runs a function call
    only once it has seen the call's `conversation.item.added`)."""
    client = Client(server.url())
    client.say("What is the capital of France?")
    question = client.until("conversation.item.done")[-1]["item"]["id"]
    client.send({"type": "response.create", "response": {"output_modalities": ["text"], "max_output_tokens": 16}})
    events = client.until("response.done")
    kinds = [e["type"] for e in events]
    added, finished = kinds.index("response.output_item.added"), kinds.index("response.output_item.done")
    assert kinds[added + 1] == "conversation.item.added" and kinds[finished + 1] == "conversation.item.done"
    reply = done(events)["output"][0]
    assert events[added + 1]["item"]["id"] == events[finished + 1]["item"]["id"] == reply["id"]
    assert events[added + 1]["previous_item_id"] == events[finished + 1]["previous_item_id"] == question
    assert events[finished + 1]["item"] == reply and reply["status"] == "completed"

    client.send({"type": "session.update", "session": {"type": "realtime", "tools": [WEATHER_TOOL],
                                                      "tool_choice": "required"}})
    client.until("session.updated")
    events = client.ask("What is the weather in Oslo?", max_tokens=60)
    kinds = [e["type"] for e in events]
    call = done(events)["output"][0]
    announced = next(e for e in events if e["type"] == "conversation.item.added" and e["item"]["id"] == call["id"])
    assert call["type"] == "function_call" and announced["item"]["call_id"] == call["call_id"]
    assert events.index(announced) < kinds.index("response.function_call_arguments.done")
    asked = next(e for e in events if e["type"] == "conversation.item.added" and e["item"]["role"] == "user")
    assert announced["previous_item_id"] == asked["item"]["id"]
    assert kinds[kinds.index("response.output_item.done") + 1] == "conversation.item.done"
    client.close()


def test_a_response_with_no_user_message_greets_and_one_after_a_reply_answers(make_server):
    server = make_server(instructions="You are a cheerful concierge. Greet the guest in one short sentence.")
    client = Client(server.url())
    client.send({"type": "response.create", "response": {"output_modalities": ["text"], "max_output_tokens": 24}})
    events = client.until("response.done")
    greeting = reply_text(events)
    assert done(events)["status"] in ANSWERED and greeting.strip()
    assert not [e for e in events if e["type"] == "error"]
    added = next(e for e in events if e["type"] == "conversation.item.added")
    assert added["previous_item_id"] is None  # the conversation's first item
    client.send({"type": "response.create", "response": {"output_modalities": ["text"], "max_output_tokens": 24}})
    again = client.until("response.done")
    assert done(again)["status"] in ANSWERED and reply_text(again).strip()
    stored = [m.message for m in server.service.store.messages(client.session_id)]
    assert stored == [{"role": "assistant", "content": greeting}, {"role": "assistant", "content": reply_text(again)}]
    client.close()
