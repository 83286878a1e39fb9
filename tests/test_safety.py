"""Safe by default: Host checks against DNS rebinding, bounded connections and audio, and a loaded
server that answers every turn or says it is busy."""

from __future__ import annotations

import http.client
import socket
import threading

import pytest
from websockets.exceptions import InvalidStatus

from harness.realtime import ANSWERED, Client, done
from voice.hosts import HostCheck

HTTP_PATHS = ["/", "/healthz", "/v1/sessions", "/v1/figures", "/v1/realtime"]


def get(port: int, path: str, host: str, origin: str | None = None) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Host": host, **({"Origin": origin} if origin else {})}
    connection.request("GET", path, headers=headers)
    response = connection.getresponse()
    body = response.read().decode()
    connection.close()
    return response.status, body


def test_the_host_check_names_only_the_server():
    check = HostCheck("127.0.0.1", 8765, ["parlour.lan", "tablet.home:8765", "[fd00::5]"])
    assert check.names_server("127.0.0.1:8765") and check.names_server("localhost:8765")
    assert check.names_server("[::1]:8765") and check.names_server("LOCALHOST:8765")
    assert not check.names_server("localhost:9999")  # another service's port on this machine
    assert not check.names_server("evil.example:8765") and not check.names_server("127.0.0.1.evil.example:8765")
    assert not check.names_server(None) and not check.names_server("") and not check.names_server("[::1")
    assert not check.names_server("localhost:http")
    assert check.names_server("parlour.lan:443") and check.names_server("parlour.lan")  # any port
    assert check.names_server("tablet.home:8765") and not check.names_server("tablet.home:8766")
    assert check.names_server("[fd00::5]:8765")
    assert check.origin_allowed("http://localhost:8765") and check.origin_allowed("https://parlour.lan")
    assert not check.origin_allowed("http://evil.example:8765") and not check.origin_allowed("null")
    assert not check.origin_allowed("file://localhost:8765")
    wildcard = HostCheck("0.0.0.0", 8765, [])
    assert wildcard.names_server("127.0.0.1:8765") and not wildcard.names_server("0.0.0.0:8765")


def test_a_rebinding_host_is_refused_on_every_path(make_server):
    server = make_server(allowed_hosts=["parlour.lan"])
    port = server.port
    client = Client(server.url())
    client.ask("Say hello.", max_tokens=4)  # a stored session a rebinding page would want to read
    for path in HTTP_PATHS:
        status, body = get(port, path, f"evil.example:{port}", origin=f"http://evil.example:{port}")
        assert status == 403, path
        assert body.startswith("403 Forbidden: the Host 'evil.example") and "allowed_hosts" in body
        assert client.session_id not in body
    for host in (f"evil.example:{port}", f"localhost.evil.example:{port}"):
        with pytest.raises(InvalidStatus) as refused:  # the name resolves to this server, as rebinding makes it
            Client(f"ws://{host}/v1/realtime", sock=socket.create_connection(("127.0.0.1", port)))
        assert refused.value.response.status_code == 403
    # The server's own names and the configured ones are served.
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"parlour.lan:{port}"):
        status, body = get(port, "/v1/sessions", host)
        assert status == 200 and client.session_id in body, host
    status, _ = get(port, "/v1/sessions", f"parlour.lan:{port}", origin=f"http://parlour.lan:{port}")
    assert status == 200
    status, _ = get(port, "/v1/sessions", f"127.0.0.1:{port}", origin="http://parlour.lan.evil.example")
    assert status == 403
    allowed = Client(f"ws://parlour.lan:{port}/v1/realtime", sock=socket.create_connection(("127.0.0.1", port)))
    assert allowed.session_id
    allowed.close()
    client.close()


def test_connections_beyond_the_limit_are_refused_until_one_closes(make_server):
    server = make_server(max_connections=2)
    first, second = Client(server.url()), Client(server.url())
    with pytest.raises(InvalidStatus) as refused:
        Client(server.url())
    assert refused.value.response.status_code == 503
    assert b"max_connections" in refused.value.response.body
    first.close()
    for _ in range(50):  # the server notices the close shortly after
        try:
            third = Client(server.url())
            break
        except InvalidStatus:
            threading.Event().wait(0.1)
    else:
        pytest.fail("a slot did not come free after a connection closed")
    assert done(third.ask("Say yes.", max_tokens=4))["status"] in ANSWERED
    third.close()
    second.close()


def test_audio_beyond_the_cap_gets_an_error_and_the_next_turn_is_served(make_server, tts):
    server = make_server(max_audio_seconds=2)
    client = Client(server.url())
    client.append_audio(b"\0\0" * 24_000 * 3)  # three seconds, in 200 ms appends
    errors = [e for e in client.until("error") if e["type"] == "error"]
    assert errors[0]["error"]["code"] == "invalid_audio" and "2 seconds" in errors[0]["error"]["message"]
    client.send({"type": "input_audio_buffer.clear"})
    client.until("input_audio_buffer.cleared")
    question = b"".join(tts.synthesize("What is the capital of France?"))
    assert len(question) < 2 * 48_000
    response = done(client.speak(question, max_tokens=12))
    assert response["status"] in ANSWERED
    client.close()


def test_sixteen_clients_at_once_are_answered_or_told_the_server_is_busy(make_server):
    server = make_server()  # max_queue 8
    turns = 2
    outcomes: dict[int, list[str]] = {}

    def converse(number: int) -> None:
        client = Client(server.url())
        seen = []
        for turn in range(turns):
            # A question (not a statement) is never recalled into another session's prompt.
            client.say(f"Client {number}, question {turn}: will you say the word ok?")
            client.send({"type": "response.create",
                         "response": {"output_modalities": ["text"], "max_output_tokens": 3}})
            response = done(client.until("response.done"))  # every response ends so, busy or not
            seen.append(response["status_details"]["error"]["code"] if response["status"] == "failed"
                        else response["status"])
        outcomes[number] = [client.session_id, *seen]
        client.close()

    threads = [threading.Thread(target=converse, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    assert len(outcomes) == 16
    results = [r for _, *seen in outcomes.values() for r in seen]
    assert set(results) <= {"completed", "incomplete", "server_busy"}, results
    assert len(results) - results.count("server_busy") >= 9  # the one served plus the max_queue that may wait
    assert "server_busy" in results
    store = server.service.store
    for number, (session_id, *seen) in outcomes.items():
        stored = store.messages(session_id)
        questions = [m.message["content"] for m in stored if m.message["role"] == "user"]
        assert questions == [f"Client {number}, question {t}: will you say the word ok?" for t in range(turns)]
        # Every answered question is followed by its reply, in order.
        replies_after = [stored[i + 1].message["role"] == "assistant" if i + 1 < len(stored) else False
                         for i, m in enumerate(stored) if m.message["role"] == "user"]
        assert sum(replies_after) == len(seen) - seen.count("server_busy"), (seen, [m.message for m in stored])
