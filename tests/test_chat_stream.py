"""The chat stream: a real server on an ephemeral port, the real model, a real SQLite file."""

from __future__ import annotations

import json
import threading

import pytest
from websockets.exceptions import InvalidStatus

from harness.realtime import ANSWERED, Client, done, reply_text
from tests.helpers import write_docs
from voice.knowledge.base import CHUNK_CHARS, KnowledgeBase
from voice.store.sessions import SessionStore
from voice.turns.prompt_layout import compact_calls, evidence_first


def test_a_reply_streams_and_reports_its_figures(server):
    client = Client(server.url())
    events = client.ask("What is the capital of France?", max_tokens=24)
    assert "Paris" in reply_text(events)  # the default model answers right, and in English
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["conversation.item.added", "conversation.item.done"]
    assert kinds.index("response.created") < kinds.index("response.output_item.added") < kinds.index(
        "response.content_part.added") < kinds.index("response.output_text.delta")
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert len(deltas) > 1  # streamed, not sent whole
    text = reply_text(events)
    assert next(e for e in events if e["type"] == "response.output_text.done")["text"] == text
    response = done(events)
    assert response["status"] in ANSWERED and response["output"][0]["content"][0]["text"] == text
    metadata = response["metadata"]
    figures = {name: int(metadata[name]) for name in ("queue_ms", "fit_ms", "ttft_ms", "total_ms", "evaluated_tokens")}
    # The turn's clock: waiting and fitting come before the first token, which comes before the end.
    assert figures["queue_ms"] + figures["fit_ms"] <= figures["ttft_ms"] <= figures["total_ms"]
    assert figures["evaluated_tokens"] > 0
    assert len(metadata) <= 16  # the protocol's limit
    assert int(metadata["evaluated_tokens"]) <= response["usage"]["input_tokens"]
    assert "cached_tokens" in response["usage"]["input_token_details"]
    stored = server.service.store.messages(client.session_id)
    assert [m.message["role"] for m in stored] == ["user", "assistant"]
    assert stored[1].message["content"] == text and stored[1].status == "complete"
    client.close()


def test_a_follow_up_prompt_holds_the_earlier_turn(server, llm):
    client = Client(server.url())
    first = done(client.ask("My name is Ada. Remember it."))
    second = done(client.ask("What is my name?"))
    transcript = server.service.store.transcript(client.session_id)
    # All four earlier messages.
    assert int(second["usage"]["input_tokens"]) == llm.count(evidence_first(compact_calls(transcript[:-1])))
    # The second prompt extends the first, so llama.cpp reused the first's cached tokens.
    assert second["usage"]["input_token_details"]["cached_tokens"] >= int(first["usage"]["input_tokens"]) - 1
    client.close()


def test_a_research_turn_is_stored_as_a_tool_exchange(make_server, tmp_path):
    docs = tmp_path / "docs"
    write_docs(docs)
    knowledge = KnowledgeBase(tmp_path / "data" / "knowledge.sqlite3")
    knowledge.index(docs)
    server = make_server()
    client = Client(server.url())
    events = client.ask("How much rain does Galway get?")
    added = [e["item"] for e in events if e["type"] == "conversation.item.added"]
    assert [i["type"] for i in added] == ["message", "function_call", "function_call_output", "message"]
    assert [i.get("role") for i in added if i["type"] == "message"] == ["user", "assistant"]
    assert json.loads(added[1]["arguments"])["query"] == "How much rain does Galway get?"
    assert added[2]["call_id"] == added[1]["call_id"] and "1,200 mm" in added[2]["output"]
    stored = [m.message for m in server.service.store.messages(client.session_id)]
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[1]["tool_calls"][0]["function"]["name"] == "search"
    assert stored[2]["tool_call_id"] == stored[1]["tool_calls"][0]["id"]
    results = knowledge.search("How much rain does Galway get?")
    assert results and all(len(r.text) <= CHUNK_CHARS for r in results)
    assert all(r.text in stored[2]["content"] for r in results)
    client.close()


def test_a_long_research_session_always_fits_and_drops_old_research_first(make_server, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    topics = ("rain", "wind", "tides")  # by the third turn, research from two turns back has gone
    for topic in topics:
        (docs / f"{topic}.md").write_text("\n\n".join(
            f"# {topic.title()} {n}\n\n" + f"The {topic} of Galway, note {n}. " * 30 for n in range(3)))
    KnowledgeBase(tmp_path / "data" / "knowledge.sqlite3").index(docs)
    server = make_server(context=1536, reply_tokens=32)
    budget = 1536 - 32
    client = Client(server.url())
    figures = []
    for topic in topics:
        response = done(client.ask(f"Tell me about the {topic} in Galway.", max_tokens=8))
        assert response["status"] in ANSWERED and response["usage"]["input_tokens"] <= budget
        figures.append(response["metadata"])
    steps = ",".join(f["fit_steps"] for f in figures)
    assert "research" in steps or "previous" in steps  # old research had to go
    assert "exchange" not in steps  # ...and the conversation itself never did
    # The last prompt still holds every question the user asked.
    transcript = server.service.store.transcript(client.session_id)
    removed, _ = server.service.store.fit_state(client.session_id)
    questions = [i for i, m in enumerate(transcript) if m["role"] == "user"]
    assert not set(questions) & set(removed)
    assert server.service.engine.prompt.low_water is None  # the model shifts its cache: only what must go goes
    client.close()


def test_a_session_resumes_after_the_server_restarts(make_server, llm):
    server = make_server()
    client = Client(server.url())
    done(client.ask("Remember the word lighthouse."))
    session_id = client.session_id
    client.close()
    server.stop()

    restarted = make_server()
    resumed = Client(restarted.url(session_id))
    assert resumed.session_id == session_id
    second = done(resumed.ask("Which word did I ask you to remember?"))
    transcript = restarted.service.store.transcript(session_id)
    assert transcript[1]["content"] == "Remember the word lighthouse."
    assert int(second["usage"]["input_tokens"]) == llm.count(evidence_first(compact_calls(transcript[:-1])))
    resumed.close()


def test_a_cancelled_response_is_stored_as_interrupted(server):
    client = Client(server.url())
    client.say("Write a very long story about a dragon who learns to sail.")
    client.send({"type": "response.create", "response": {"output_modalities": ["text"], "max_output_tokens": 256}})
    events = client.until("response.output_text.delta")
    client.send({"type": "response.cancel"})
    events += client.until("response.done")
    response = done(events)
    assert response["status"] == "cancelled"
    assert response["status_details"]["reason"] == "client_cancelled"
    sent = reply_text(events)
    assert int(response["usage"]["output_tokens"]) < 256
    stored = server.service.store.messages(client.session_id)[-1]
    assert stored.status == "interrupted" and stored.message["content"] == sent
    # The connection goes on: the next question is answered.
    assert done(client.ask("Thanks. Say hello."))["status"] in ANSWERED
    client.close()


BAD_EVENTS = [
    ("{not json", "invalid_json"),
    ("[1, 2]", "invalid_event"),
    ('{"event_id": "e1"}', "missing_field"),
    ('{"type": "input_audio_buffer.nonsense"}', "unknown_event"),
    ('{"type": "conversation.item.create"}', "missing_field"),
    ('{"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": []}}',
     "invalid_value"),
    ('{"type": "conversation.item.create", "item": {"type": "function_call", "call_id": "c1"}}', "missing_field"),
    ('{"type": "conversation.item.create", "item": {"type": "message", "role": "user", '
     '"content": [{"type": "input_audio", "audio": "AAAA"}]}}', "invalid_value"),
    ('{"type": "conversation.item.create", "item": {"type": "message", "role": "user", '
     '"content": [{"type": "input_text", "text": "   "}]}}', "invalid_value"),
    ('{"type": "response.cancel"}', "response_cancel_not_active"),
    ('{"type": "session.update", "session": {"output_modalities": ["video"]}}', "invalid_value"),
    ('{"type": "session.update", "session": {"instructions": 5}}', "invalid_value"),
    ('{"type": "session.update"}', "missing_field"),
]


def test_bad_input_gets_an_error_event_and_the_connection_stays_usable(server):
    client = Client(server.url())
    for raw, code in BAD_EVENTS:
        client.send(raw)
        event = client.recv()
        assert event["type"] == "error", raw
        assert event["error"]["code"] == code, (raw, event)
        assert event["error"]["message"]
    too_long = "word " * (server.config.max_text_chars // 5 + 10)
    client.say(too_long)
    error = client.recv()
    assert error["error"]["code"] == "text_too_long" and "limit" in error["error"]["message"]
    client.send({"type": "response.create", "event_id": "evt_mine",
                 "response": {"max_output_tokens": -3}})
    error = client.recv()
    assert error["error"]["code"] == "invalid_value" and error["error"]["event_id"] == "evt_mine"
    assert server.service.store.messages(client.session_id) == []  # nothing bad was stored
    assert done(client.ask("Hello there."))["status"] in ANSWERED
    client.close()


def test_two_clients_at_once_are_both_answered(server):
    results: dict[str, dict] = {}

    def converse(name: str) -> None:
        client = Client(server.url())
        results[name] = done(client.ask(f"Say hello to {name}."))
        client.close()

    threads = [threading.Thread(target=converse, args=(name,)) for name in ("Ann", "Bob")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    # Both answered: whole, or cut at the short max_output_tokens when the model greets at length.
    statuses = {name: r["status"] for name, r in results.items()}
    assert set(statuses) == {"Ann", "Bob"} and all(status in ANSWERED for status in statuses.values()), statuses
    assert all(r["output"][0]["content"][0]["text"].strip() for r in results.values())
    waits = sorted(int(r["metadata"]["queue_ms"]) for r in results.values())
    assert waits[1] > 0  # one waited its turn for the single model


def test_a_full_queue_answers_server_busy(make_server):
    server = make_server(max_queue=1)
    first, second, third = (Client(server.url()) for _ in range(3))
    first.say("Write a long story about the sea.")
    first.send({"type": "response.create", "response": {"output_modalities": ["text"], "max_output_tokens": 200}})
    first.until("response.output_text.delta")
    second.say("Hello?")
    second.send({"type": "response.create", "response": {"output_modalities": ["text"], "max_output_tokens": 8}})
    second.until("response.created")  # second's turn has taken the one waiting place
    third.say("Anyone?")
    third.send({"type": "response.create", "response": {"output_modalities": ["text"], "max_output_tokens": 8}})
    busy = third.until("response.done")
    assert [e["error"]["code"] for e in busy if e["type"] == "error"] == ["server_busy"]
    assert done(busy)["status"] == "failed" and done(busy)["status_details"]["error"]["code"] == "server_busy"
    first.send({"type": "response.cancel"})  # the story has kept the model busy long enough
    assert done(first.until("response.done"))["status"] == "cancelled"
    assert done(second.until("response.done"))["status"] in ANSWERED
    for client in (first, second, third):
        client.close()


def test_api_keys_are_required_and_keep_sessions_apart(make_server):
    server = make_server(api_keys=["key-a", "key-b"])
    for key in (None, "wrong"):
        with pytest.raises(InvalidStatus) as refused:
            Client(server.url(), api_key=key)
        assert refused.value.response.status_code == 401
    mine = Client(server.url(), api_key="key-a")
    done(mine.ask("This is private."))
    with pytest.raises(InvalidStatus) as hidden:
        Client(server.url(mine.session_id), api_key="key-b")
    assert hidden.value.response.status_code == 404
    again = Client(server.url(mine.session_id), api_key="key-a", subprotocols=["realtime"])
    assert again.session_id == mine.session_id
    mine.close()
    again.close()


def test_sessions_export_import_and_replay_by_id(server, tmp_path):
    import subprocess
    import sys

    client = Client(server.url())
    done(client.ask("Note this: the boat leaves at nine."))
    client.close()
    data_dir = server.config.data_dir
    cli = [sys.executable, "-m", "voice.cli"]
    listed = subprocess.run(cli + ["sessions", "list", "--data-dir", data_dir], capture_output=True, text=True)
    assert client.session_id in listed.stdout and "the boat leaves at nine" in listed.stdout
    exported = subprocess.run(cli + ["sessions", "export", client.session_id, "--data-dir", data_dir],
                              capture_output=True, text=True, check=True).stdout
    messages = json.loads(exported)
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]
    path = tmp_path / "export.json"
    path.write_text(exported)
    imported = subprocess.run(cli + ["sessions", "import", str(path), "--data-dir", data_dir],
                              capture_output=True, text=True, check=True).stdout.strip()
    assert SessionStore(server.config.database).transcript(imported) == messages
    replayed = subprocess.run(cli + ["replay", imported, "--estimate", "--json", "--data-dir", data_dir],
                              capture_output=True, text=True, check=True).stdout
    assert json.loads(replayed)["messages"] == messages
    missing = subprocess.run(cli + ["sessions", "show", "sess_nope", "--data-dir", data_dir],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and missing.stderr.strip() == "parlour: error: no such session: sess_nope"


def test_parlour_chat_streams_replies_and_shows_research(make_server, tmp_path):
    import subprocess
    import sys

    docs = tmp_path / "docs"
    write_docs(docs)
    KnowledgeBase(tmp_path / "data" / "knowledge.sqlite3").index(docs)
    server = make_server()
    run = subprocess.run(
        [sys.executable, "-m", "voice.cli", "chat", "--port", str(server.port), "--data-dir", server.config.data_dir],
        input="How much rain does Galway get?\n\nWhere is Cork?\n", capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    session_id = lines[0].removeprefix("session ")
    assert "  [searching: How much rain does Galway get?]" in lines
    assert any(line.startswith("  [found: Galway (galway.md)") for line in lines)
    assert sum(line.startswith("parlour> ") for line in lines) == 2
    stored = server.service.store.messages(session_id)
    replies = [m.message["content"] for m in stored if m.message["role"] == "assistant" and m.message["content"]]
    assert all(reply.strip() in run.stdout for reply in replies)


def test_parlour_chat_without_a_server_is_one_line(tmp_path):
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "voice.cli", "chat", "--port", "9"], input="", capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 2 and run.stderr.startswith("parlour: error: cannot reach ws://127.0.0.1:9/")
    assert run.stderr.count("\n") == 1


def test_the_model_policy_searches_the_notes_only_when_they_answer(make_server, tmp_path):
    docs = tmp_path / "docs"
    write_docs(docs)
    (docs / "cottage.md").write_text("# The cottage\n\nThe cottage in Clifden has wifi called HeronNet; "
                                     "the password is heron-42.")
    KnowledgeBase(tmp_path / "data" / "knowledge.sqlite3").index(docs)
    server = make_server(research="model")
    client = Client(server.url())
    events = client.ask("What is the wifi password at the cottage?", max_tokens=48)
    added = [e["item"] for e in events if e["type"] == "conversation.item.added"]
    assert [item["type"] for item in added] == ["message", "function_call", "function_call_output", "message"]
    assert json.loads(added[1]["arguments"])["query"] and added[2]["call_id"] == added[1]["call_id"]
    assert "heron-42" in reply_text(events) and done(events)["status"] in ANSWERED

    events = client.ask("What is 17 times 3?", max_tokens=24)
    assert [e["item"].get("role") for e in events if e["type"] == "conversation.item.added"] == ["user", "assistant"]
    assert "51" in reply_text(events)

    stored = [m.message for m in server.service.store.messages(client.session_id)]
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert stored[1]["tool_calls"][0]["id"] == stored[2]["tool_call_id"] and "heron-42" in stored[2]["content"]
    client.close()

def test_the_first_turn_finds_the_system_prompt_and_a_resumed_history_already_evaluated(make_server, llm):
    instructions = "You are Quillon, who keeps the lighthouse logs of Inis Oirr. Answer in one short line."
    server = make_server(instructions=instructions)
    server.idle()  # the service warmed the system prompt of new sessions when it started
    client = Client(server.url())
    first = done(client.ask("Hello, who are you?", max_tokens=8))
    system_tokens = llm.count([{"role": "system", "content": instructions}]) - llm.prompt_overhead
    assert first["usage"]["input_token_details"]["cached_tokens"] >= system_tokens - 2
    done(client.ask("My boat is called the Gannet.", max_tokens=8))
    client.close()
    other = Client(server.url())
    done(other.ask("Something else entirely: name a fruit.", max_tokens=4))  # the cache now holds another prompt
    other.close()
    resumed = Client(server.url(client.session_id))
    server.idle()  # resuming evaluated the session's history
    again = done(resumed.ask("What is my boat called?", max_tokens=8))
    history = server.service.store.transcript(client.session_id)[:-2]  # before this question and reply
    assert again["usage"]["input_token_details"]["cached_tokens"] >= llm.count(history) - llm.prompt_overhead - 4
    resumed.close()


def test_background_warming_stops_while_a_client_is_speaking(make_server, llm):
    server = make_server()
    client = Client(server.url())
    done(client.ask("My boat is called the Gannet and she is moored at Rossaveal.", max_tokens=8))
    client.close()
    other = Client(server.url())
    done(other.ask("Name a fruit.", max_tokens=4))  # the cache now holds another prompt
    other.close()
    server.service.engine.upkeep.hearing()  # someone is speaking (a draft or hands-free speech)
    resumed = Client(server.url(client.session_id))
    server.idle()  # the warm-up gave way at once rather than evaluating the history
    history = server.service.store.transcript(client.session_id)
    again = done(resumed.ask("What is my boat called?", max_tokens=8))
    assert again["usage"]["input_token_details"]["cached_tokens"] < llm.count(history) - llm.prompt_overhead - 4
    resumed.close()


def test_a_text_turn_over_the_budget_is_condensed_by_section_workers(make_server):
    server = make_server(context=1536, reply_tokens=48)
    client = Client(server.url())
    filler = "The ferry timetable lists sailings, fares and the pier's opening hours for every season. " * 35
    document = f"{filler}\n\nThe harbour master's name is Orla Keane.\n\n{filler}\n\n{filler}"
    response = done(client.ask(f"{document}\n\nFrom the text above: what is the harbour master's name?",
                               max_tokens=16))
    assert response["status"] in ANSWERED
    assert "condense" in response["metadata"]["fit_steps"]  # section workers wrote notes in its place
    assert response["usage"]["input_tokens"] <= 1536 - 48
    question, reply = server.service.store.messages(client.session_id)
    assert question.message["content"].startswith(filler)  # the store keeps what the user sent
    assert "Keane" in reply.message["content"]  # the notes carried the one line that answers
    client.close()
