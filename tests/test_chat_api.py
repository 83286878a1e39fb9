"""The chat APIs as their own clients use them: the `ollama` package's AsyncClient (Home Assistant's
Ollama integration) and the `openai` package, against a real server and the real default model."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
from datetime import datetime, timedelta

import ollama
import openai
import pytest

from harness import home_assistant as ha
from harness.doors import HOME_ASSISTANT_AFTER_CALL, HOME_ASSISTANT_CHAT
from voice.chat.thread import BadHistory, answer_calls, fingerprint
from voice.text.clock import split_clock
from voice.turns.prompt_layout import without_earlier_commands


def ollama_client(server, key: str | None = None) -> ollama.AsyncClient:
    return ollama.AsyncClient(host=f"http://127.0.0.1:{server.port}",
                              headers={"Authorization": f"Bearer {key}"} if key else None)


def call(server, method: str, *args, key: str | None = None, **kwargs):
    """One AsyncClient call (a client belongs to one event loop: each call gets its own)."""
    async def run():
        return await getattr(ollama_client(server, key), method)(*args, **kwargs)
    return asyncio.run(run())


def chat(server, messages: list[dict], key: str | None = None, **options) -> list:
    """A streamed /api/chat, as Home Assistant asks: its parts."""
    async def run():
        stream = await ollama_client(server, key).chat(model="parlour:latest", messages=messages, stream=True,
                                                       **options)
        return [part async for part in stream]
    return asyncio.run(run())


def openai_client(server, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key=key, max_retries=0)


def stored(server) -> list[list[dict]]:
    store = server.service.store
    return [[m.message for m in store.messages(s.id)] for s in store.list()]


def test_a_tool_result_answers_the_call_it_names_or_the_next_one():
    calls = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "", "type": "function", "function": {"name": "HassTurnOn", "arguments": "{}"}},
        {"id": "call_b", "type": "function", "function": {"name": "HassTurnOff", "arguments": "{}"}}]}
    answered = answer_calls([calls, {"role": "tool", "content": "b", "tool_call_id": "call_b"},
                             {"role": "tool", "content": "a"}], [])
    first_id = answered[0]["tool_calls"][0]["id"]
    assert first_id.startswith("call_") and answered[1]["tool_call_id"] == "call_b"
    assert answered[2]["tool_call_id"] == first_id
    with pytest.raises(BadHistory):
        answer_calls([{"role": "tool", "content": "stray"}], [])


def test_the_clock_leaves_the_system_prompt_and_the_fingerprint_ignores_it():
    morning, later = ha.system_prompt(datetime(2026, 1, 2, 8, 0, 0)), ha.system_prompt(datetime(2026, 1, 2, 8, 0, 9))
    assert split_clock(morning)[0] == split_clock(later)[0] and "Static Context" in split_clock(morning)[0]
    assert split_clock(morning)[1] == "Current time is 08:00:00. Today's date is 2026-01-02."
    said = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]
    assert fingerprint([{"role": "system", "content": morning}, *said]) == fingerprint(said)
    split = [{"role": "assistant", "content": "On it.", "tool_calls": [{"function": {"name": "HassTurnOn"}}]}]
    apart = [{"role": "assistant", "content": "On it."},
             {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "HassTurnOn"}}]}]
    assert fingerprint(split) == fingerprint(apart) != fingerprint(said)


def test_earlier_commands_leave_the_prompt_and_the_rest_stays():
    def call(name):
        return {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": name, "arguments": "{}"}}]}
    prompt = [{"role": "system", "content": "home"},
              {"role": "user", "content": "Lamp on."}, call("HassTurnOn"), {"role": "tool", "content": "ok"},
              {"role": "assistant", "content": "The lamp is on."},
              {"role": "user", "content": "Who wrote the GPL?"}, call("search"), {"role": "tool", "content": "FSF"},
              {"role": "assistant", "content": "The FSF."},
              {"role": "user", "content": "Fan off."}, call("HassTurnOff"), {"role": "tool", "content": "ok"}]
    kept = [m["content"] for m in without_earlier_commands(prompt, {"search"})]
    assert kept == ["home", "Who wrote the GPL?", None, "FSF", "The FSF.",
                    'Fan off. (The command before this one was "Lamp on.": HassTurnOn {}.)', None, "ok"]


def test_home_assistant_turns_on_a_light_and_the_conversation_is_one_session(server):
    """HA 2026.11's Ollama integration, with the request it really sent (harness/recorded/): 11
    tools, its prompt with the entities, `num_ctx: 8192.0`, `keep_alive: -1.0`, `think: false`;
    it runs the call and sends the result back in its own shape."""
    listed = call(server, "list")
    assert [m.model for m in listed.models] == ["parlour:latest"]
    assert "tools" in call(server, "show", "parlour:latest").capabilities
    recorded = HOME_ASSISTANT_CHAT
    messages = [dict(m) for m in recorded["messages"]]
    options = {"options": recorded["options"], "keep_alive": recorded["keep_alive"], "think": recorded["think"]}
    parts = chat(server, messages, tools=recorded["tools"], **options)
    calls = [call for part in parts for call in part.message.tool_calls or []]
    assert [c.function.name for c in calls] == ["intent__HassTurnOn"]
    assert dict(calls[0].function.arguments)["name"].lower() == "kitchen light"  # an object, as Ollama sends
    assert parts[-1].done and parts[-1].prompt_eval_count > 1000  # the prompt with the entities, evaluated once

    messages.append({"role": "assistant", "tool_calls": [  # as HA sends it back: no content, no call id
        {"function": {"name": c.function.name, "arguments": dict(c.function.arguments)}} for c in calls]})
    messages.append(HOME_ASSISTANT_AFTER_CALL["messages"][-1])  # {"data": {..."action_done"...}, "error": false}
    parts = chat(server, messages, tools=recorded["tools"], **options)
    said = "".join(part.message.content or "" for part in parts)
    assert "kitchen light" in said.lower() and not any(part.message.tool_calls for part in parts)
    assert parts[-1].prompt_eval_count < 150  # the result is new; the prompt and the call were cached

    (session,) = stored(server)
    assert [m["role"] for m in session] == ["user", "assistant", "tool", "assistant"]
    assert session[0]["content"] == recorded["messages"][-1]["content"]
    assert session[2]["tool_call_id"] == session[1]["tool_calls"][0]["id"]
    assert session[3]["content"] == said


def test_with_device_memory_a_new_conversation_from_the_same_device_continues(make_server):
    """HA forgets a conversation after 5 minutes; with device_memory the same prompt (the same
    device) does not."""
    server = make_server(device_memory=True)
    first = [{"role": "system", "content": ha.system_prompt()},
             {"role": "user", "content": "My name is Ada. Say only OK."}]
    chat(server, first, options={"num_predict": 8})
    later = ha.system_prompt(datetime.now() + timedelta(minutes=9))
    chat(server, [{"role": "system", "content": later}, {"role": "user", "content": "What is my name?"}],
         options={"num_predict": 12})
    other = ha.system_prompt(area="Bedroom")  # another satellite: its own memory
    chat(server, [{"role": "system", "content": other}, {"role": "user", "content": "Say hi."}],
         options={"num_predict": 6})
    sessions = sorted(stored(server), key=len)
    assert [len(s) for s in sessions] == [2, 4]
    assert [m["content"].split("\n")[0] for m in sessions[1] if m["role"] == "user"] == [
        "My name is Ada. Say only OK.", "What is my name?"]
    assert "ada" in sessions[1][3]["content"].lower()


def test_openai_clients_stream_reuse_the_prefix_and_continue_by_history(server):
    client = openai_client(server)
    assert [m.id for m in client.models.list()] == ["parlour"]
    question = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
    chunks = list(client.chat.completions.create(model="parlour", messages=question, stream=True,
                                                 stream_options={"include_usage": True}, max_tokens=20))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Paris" in text and chunks[-1].usage.completion_tokens > 0
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")
    follow = question + [{"role": "assistant", "content": text}, {"role": "user", "content": "And of Germany?"}]
    reply = client.chat.completions.create(model="parlour", messages=follow, max_completion_tokens=20)
    assert "Berlin" in reply.choices[0].message.content
    cached = reply.usage.prompt_tokens_details.cached_tokens
    assert cached >= chunks[-1].usage.prompt_tokens  # the first request's prompt was not evaluated again
    (session,) = stored(server)
    assert [m["content"] for m in session] == [question[0]["content"], text, "And of Germany?",
                                              reply.choices[0].message.content]


def test_openai_function_calling_round_trip(server):
    client = openai_client(server)
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                               "parameters": {"type": "object", "properties": {
                                                   "city": {"type": "string"}}, "required": ["city"]}}}]
    messages = [{"role": "user", "content": "What is the weather in Oslo?"}]
    first = client.chat.completions.create(model="parlour", messages=messages, tools=tools, tool_choice="required")
    (call,) = first.choices[0].message.tool_calls
    assert first.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments)["city"] == "Oslo"
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "Snow, minus 4 degrees."}]
    second = client.chat.completions.create(model="parlour", messages=messages, tools=tools, max_tokens=30)
    assert "snow" in second.choices[0].message.content.lower() or "-4" in second.choices[0].message.content
    # The call was written as the template renders it, so the call sent back was read from the cache.
    assert second.usage.prompt_tokens_details.cached_tokens > first.usage.prompt_tokens + 10
    (session,) = stored(server)
    assert session[2] == {"role": "tool", "content": "Snow, minus 4 degrees.", "tool_call_id": call.id}


def test_a_named_tool_choice_is_a_call_to_that_tool_whatever_was_asked(server):
    tools = [{"type": "function", "function": {"name": name, "description": f"The {name.split('_')[1]} of a city",
                                               "parameters": {"type": "object", "properties": {
                                                   "city": {"type": "string"}}, "required": ["city"]}}}
             for name in ("get_weather", "get_population")]
    reply = openai_client(server).chat.completions.create(
        model="parlour", messages=[{"role": "user", "content": "What is the weather in Oslo?"}], tools=tools,
        tool_choice={"type": "function", "function": {"name": "get_population"}}, max_tokens=40)
    (call,) = reply.choices[0].message.tool_calls
    assert call.function.name == "get_population" and json.loads(call.function.arguments)["city"] == "Oslo"


def test_a_long_history_is_fitted_and_kept(make_server):
    server = make_server(context=1024)
    history = []
    for n in range(16):  # more than a 1,024-token context holds
        history += [{"role": "user", "content": f"Note {n}: the shed key is under pot number {n}. " * 4},
                    {"role": "assistant", "content": f"Noted: pot {n}."}]
    messages = history + [{"role": "user", "content": "Say OK."}]
    reply = openai_client(server).chat.completions.create(model="parlour", messages=messages, max_tokens=8)
    assert reply.choices[0].message.content
    assert 0 < reply.usage.prompt_tokens <= 1024 - 64
    (session,) = stored(server)
    assert len(session) == len(messages) + 1  # the whole conversation is stored, whatever the prompt left out
    figures = json.loads(get(server.port, "/v1/figures")[1])[-1]
    assert figures["removed"] > 0
    # Ollama's num_ctx, smaller than the service's context, is the one the prompt is fitted into.
    parts = chat(server, messages + [{"role": "assistant", "content": reply.choices[0].message.content},
                                     {"role": "user", "content": "Say OK again."}],
                 options={"num_ctx": 600, "num_predict": 8})
    assert parts[-1].done
    assert json.loads(get(server.port, "/v1/figures")[1])[-1]["prompt_tokens_fitted"] <= 600 - 8


def get(port: int, path: str, host: str | None = None, method: str = "GET", body: str | None = None,
        headers: dict | None = None) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request(method, path, body=body, headers={"Host": host or f"127.0.0.1:{port}", **(headers or {})})
    response = connection.getresponse()
    answer = response.status, response.read().decode()
    connection.close()
    return answer


def test_bad_requests_get_each_api_error_shape_and_the_server_goes_on(server):
    with pytest.raises(ollama.ResponseError) as unknown:
        call(server, "chat", model="llama3.2:latest", messages=[{"role": "user", "content": "Hi"}])
    assert unknown.value.status_code == 404 and "llama3.2" in unknown.value.error
    with pytest.raises(ollama.ResponseError) as stray:
        call(server, "chat", model="parlour:latest", messages=[{"role": "tool", "content": "{}"}])
    assert stray.value.status_code == 400 and "answers no function call" in stray.value.error
    with pytest.raises(ollama.ResponseError) as pull:
        call(server, "pull", "llama3.2")
    assert pull.value.status_code == 404
    assert call(server, "pull", "parlour:latest").status == "success"
    status, body = get(server.port, "/api/chat", method="POST", body="{not json")
    assert status == 400 and "not JSON" in json.loads(body)["error"]
    oai = openai_client(server)
    with pytest.raises(openai.BadRequestError) as bad:
        oai.chat.completions.create(model="parlour", messages=[{"role": "user", "content": "Hi"}], max_tokens=-1)
    assert bad.value.body["type"] == "invalid_request_error" and "max_tokens" in bad.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Hi"}])
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model="parlour", messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:,"}}]}])
    reply = oai.chat.completions.create(model="parlour", messages=[{"role": "user", "content": "Say hello."}],
                                        max_tokens=6)
    assert reply.choices[0].message.content
    assert stored(server) == [[{"role": "user", "content": "Say hello."},
                               {"role": "assistant", "content": reply.choices[0].message.content}]]


def test_malformed_http_is_answered_and_the_server_goes_on(server):
    def raw(data: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as connection:
            connection.sendall(data)
            received = b""
            while chunk := connection.recv(4096):  # the server closes the connection after its answer
                received += chunk
            return received
    assert raw(b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    too_big = raw(f"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                  f"Content-Length: {10 ** 9}\r\n\r\n".encode())
    assert too_big.startswith(b"HTTP/1.1 413 ") and b"over" in too_big
    status, body = get(server.port, "/api/tags")
    assert status == 200 and json.loads(body)["models"][0]["name"] == "parlour:latest"


def test_keys_and_hosts_guard_the_chat_apis(make_server):
    server = make_server(api_keys=["home-key", "other-key"])
    with pytest.raises(ollama.ResponseError) as refused:
        call(server, "list")
    assert refused.value.status_code == 401
    with pytest.raises(openai.AuthenticationError):
        openai_client(server, "wrong").chat.completions.create(model="parlour",
                                                               messages=[{"role": "user", "content": "Hi"}])
    chat(server, [{"role": "user", "content": "Say hi."}], key="home-key", options={"num_predict": 4})
    for key, count in (("home-key", 1), ("other-key", 0)):
        status, body = get(server.port, "/v1/sessions", headers={"Authorization": f"Bearer {key}"})
        assert status == 200 and len(json.loads(body)) == count  # a key sees only its own sessions
    status, body = get(server.port, "/api/tags", host=f"evil.example:{server.port}",
                       headers={"Authorization": "Bearer home-key"})
    assert status == 403 and "does not name this server" in body


def test_the_knowledge_base_is_searched_inside_parlour_beside_the_clients_tools(make_server, tmp_path):
    from voice.knowledge.base import KnowledgeBase

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "house.md").write_text("# The house\n\nThe wifi password is tulip-42. The bins go out on Tuesday.")
    KnowledgeBase(tmp_path / "data" / "knowledge.sqlite3").index(docs)
    server = make_server()
    messages = [{"role": "system", "content": ha.system_prompt()},
                {"role": "user", "content": "What is the wifi password?"}]
    parts = chat(server, messages, tools=ha.TOOLS, options={"num_predict": 24})
    said = "".join(part.message.content or "" for part in parts)
    assert "tulip-42" in said and not any(part.message.tool_calls for part in parts)  # HA never sees `search`
    (session,) = stored(server)
    assert [m["role"] for m in session] == ["user", "assistant", "tool", "assistant"]
    assert session[1]["tool_calls"][0]["function"]["name"] == "search" and "tulip-42" in session[2]["content"]
