"""Memory (ADR 0141 and recall): summaries ready before exchanges must leave, never a silent drop,
and what the user said in earlier sessions found again, never across keys. Real server, real model."""

from __future__ import annotations

import json

from fitting.summary import summary_room
from harness.realtime import ANSWERED, Client, done, reply_text
from models.tool_calls import new_call
from voice.knowledge.recall import recalled
from voice.store.sessions import SessionStore

FILLER = "Here is a note, no need to comment: " + "blue and green " * 60 + "Noted?"
CONTEXT, REPLY = 768, 48  # a small context, filled in a few turns


def test_summaries_are_made_before_exchanges_must_leave(make_server):
    server = make_server(context=CONTEXT, reply_tokens=REPLY)
    client = Client(server.url())
    client.ask("My sister's name is Maeve. Please remember that.", max_tokens=16)
    metadata = []
    for _ in range(6):
        server.idle()  # the pause before the user speaks again: background summaries finish
        metadata.append(done(client.ask(FILLER, max_tokens=8))["metadata"])
        if metadata[-1]["removed"] != "0":
            break
    first_removal = next(i for i, m in enumerate(metadata) if m["removed"] != "0")
    # The summary was there before the first removal: nothing to summarize on the reply's path.
    assert metadata[first_removal]["summary"] == "true" and metadata[first_removal]["summarized_ms"] == "0"
    assert all(m["dropped"] == "0" for m in metadata)
    summary = server.service.store.summaries(client.session_id)[-1]
    assert summary.start == 1 and "Maeve" in summary.text
    client.close()


def test_with_no_pause_nothing_is_dropped(make_server):
    server = make_server(context=CONTEXT, reply_tokens=REPLY)
    client = Client(server.url())
    client.ask("My sister's name is Maeve. Please remember that.", max_tokens=16)
    responses = []
    for _ in range(6):
        responses.append(done(client.ask(FILLER, max_tokens=8)))
        if responses[-1]["metadata"]["removed"] != "0":  # the first exchange had to go
            break
    assert responses[-1]["metadata"]["removed"] != "0"
    assert all(r["metadata"]["dropped"] == "0" for r in responses)
    assert any(r["metadata"]["summary"] == "true" for r in responses)
    assert all(r["usage"]["input_tokens"] <= CONTEXT - REPLY for r in responses)
    answer = reply_text(client.ask("What is my sister's name?", max_tokens=16))
    assert "Maeve" in answer
    client.close()


def test_a_turn_that_must_remove_an_unsummarized_exchange_summarizes_it_first(make_server):
    server = make_server(context=CONTEXT, reply_tokens=REPLY)
    llm = server.service.llm
    client = Client(server.url())
    client.ask("My dog is called Biscuit. He is a small brown beagle from the shelter by the harbour, and every "
               "morning he waits at the door for his walk along the strand, then sleeps on the sofa all afternoon.",
               max_tokens=40)
    server.idle()
    # A message that just does not fit beside the first exchange: it must go at once, before any
    # summary of it was made ahead. The exchange is longer than any summary may be, so a summary
    # of it always has room (a short reply once left a one-line exchange no shorter than its summary).
    transcript = server.service.store.transcript(client.session_id)
    before = llm.measure(transcript)
    assert before - llm.measure(transcript[:1]) > summary_room(CONTEXT - REPLY) + 8
    long = "Here is a note, no need to comment:"
    while llm.count_message({"role": "user", "content": long}) < CONTEXT - REPLY - before + 2:
        long += " blue and green"
    assert not server.service.store.summaries(client.session_id)
    response = done(client.ask(long + " Just say OK.", max_tokens=8))
    metadata = response["metadata"]
    assert metadata["removed"] != "0" and metadata["dropped"] == "0"
    assert metadata["summary"] == "true" and int(metadata["summarized_ms"]) > 0
    assert "Biscuit" in server.service.store.summaries(client.session_id)[-1].text
    assert response["status"] in ANSWERED
    client.close()


def _research(events: list[dict]) -> str:
    """The search result a turn stored, or "" if it researched nothing."""
    outputs = [e["item"]["output"] for e in events if e["type"] == "conversation.item.done"
               and e["item"]["type"] == "function_call_output"]
    return "\n".join(outputs)


def test_an_earlier_session_is_recalled_for_its_own_key_only(make_server):
    server = make_server(api_keys=["key-a", "key-b"])
    told = Client(server.url(), api_key="key-a")
    told.ask("My plumber is called Dermot and he comes on Thursdays.", max_tokens=16)
    told.close()
    other = Client(server.url(), api_key="key-b")
    other.ask("My plumber is called Ivan.", max_tokens=16)
    other.close()

    asked = Client(server.url(), api_key="key-a")
    events = asked.ask("What did I tell you about my plumber?", max_tokens=24)
    added = [e["item"] for e in events if e["type"] == "conversation.item.added"]
    assert [item["type"] for item in added] == ["message", "function_call", "function_call_output", "message"]
    assert json.loads(added[1]["arguments"])["query"] == "What did I tell you about my plumber?"
    found = _research(events)
    assert "Dermot" in found and "Ivan" not in found
    assert "Dermot" in reply_text(events)
    # A question the earlier sessions say nothing about is answered without research.
    events = asked.ask("What is the capital of France?", max_tokens=16)
    assert [e["item"]["type"] for e in events if e["type"] == "conversation.item.added"] == ["message", "message"]
    asked.close()

    asked = Client(server.url(), api_key="key-b")
    found = _research(asked.ask("What did I tell you about my plumber?", max_tokens=24))
    assert "Ivan" in found and "Dermot" not in found
    asked.close()


def test_a_request_that_brings_its_own_tools_recalls_no_other_conversation(make_server):
    """Home Assistant sends its tools and its home: a device command once got another
    conversation's words ("Set the bedroom light to 40 percent") and answered wrong."""
    import urllib.request

    server = make_server()
    told = Client(server.url())
    told.ask("My plumber is called Dermot and he comes on Thursdays.", max_tokens=16)
    told.close()

    def chat(tools: list[dict]) -> list[dict]:
        body = {"model": "parlour:latest", "stream": False, "options": {"num_predict": 8}, "tools": tools,
                "messages": [{"role": "user", "content": "What did I tell you about my plumber?"}]}
        request = urllib.request.Request(f"http://127.0.0.1:{server.port}/api/chat", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=120).read()
        newest = server.service.store.list()[0].id
        return [m.message for m in server.service.store.messages(newest)]

    light = {"type": "function", "function": {"name": "HassTurnOn", "parameters": {
        "type": "object", "properties": {"name": {"type": "string"}}}}}
    with_tools = chat([light])
    assert with_tools[0]["role"] == "user" and not [m for m in with_tools if m["role"] == "tool"], with_tools
    recalled_without_tools = chat([])
    assert [m["role"] for m in recalled_without_tools][:3] == ["user", "assistant", "tool"]
    assert "Dermot" in recalled_without_tools[2]["content"]


def test_recall_leaves_out_questions_commands_and_the_session_itself(tmp_path):
    store = SessionStore(tmp_path / "sessions.sqlite3")
    told = store.create("")
    store.append(told, {"role": "user", "content": "Where is my kitchen light? My kitchen light is blue."})
    commanded = store.create("")
    store.append(commanded, {"role": "user", "content": "Turn on the kitchen light."})
    store.append(commanded, {"role": "assistant", "content": None,
                             "tool_calls": [new_call("HassTurnOn", {"name": "kitchen light"})]})
    asking = store.create("")
    found = [r.text for r in recalled(store, asking, "What did I say about the kitchen light?")]
    assert found == ["My kitchen light is blue."]  # the statement alone: not the question or the command
    assert recalled(store, told, "What did I say about the kitchen light?") == []  # not its own session
    store.close()
