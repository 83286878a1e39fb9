"""Nothing said or heard is lost when the process dies: a real `parlour serve` killed with SIGKILL at
different moments of one session, restarted on the same data directory, and the session resumed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed

from harness.realtime import ANSWERED, Client, done, reply_text
from tests.helpers import write_docs
from voice.knowledge.base import KnowledgeBase
from voice.store.sessions import SessionStore
from voice.turns.prompt_layout import compact_calls, evidence_first


class ServerProcess:
    """`parlour serve` as a user runs it, on a free port, with a clean environment."""

    def __init__(self, data_dir: Path, tmp_path: Path):
        env = {k: v for k, v in os.environ.items() if not k.startswith("PARLOUR_")}
        env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "voice.cli", "serve", "--port", "0", "--data-dir", str(data_dir),
             "--threads", "2", "--temperature", "0", "--reply-tokens", "160"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        line = self.process.stdout.readline()
        assert "listening on ws://127.0.0.1:" in line, line + self.process.stdout.read()
        self.port = int(line.split("127.0.0.1:")[1].split("/")[0])

    def url(self, session_id: str | None = None) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime" + (f"?session_id={session_id}" if session_id else "")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)


def flat(text: str) -> str:
    return " ".join(text.split())


def sentence_ends(text: str) -> int:
    return sum(text.count(mark + " ") for mark in ".!?")


@pytest.fixture
def kill_and_restart(tmp_path):
    data = tmp_path / "data"
    running: list[ServerProcess] = []

    def restart() -> ServerProcess:
        if running and running[-1].process.poll() is None:
            running[-1].kill()
        running.append(ServerProcess(data, tmp_path))
        return running[-1]

    yield restart
    for server in running:
        if server.process.poll() is None:
            server.kill()


def test_replies_survive_sigkill_at_every_moment_of_a_session(kill_and_restart, tmp_path, speech, llm):
    # 1. Killed in the middle of a long streamed text reply, after two sentences had arrived.
    server = kill_and_restart()
    client = Client(server.url())
    session_id = client.session_id
    client.say("Tell me a long story about a lighthouse keeper and his dog.")
    client.send({"type": "response.create", "response": {"output_modalities": ["text"], "max_output_tokens": 150}})
    streamed = ""
    while sentence_ends(streamed) < 2:
        event = client.recv()
        assert event["type"] != "response.done", ("the reply ended before it could be cut", streamed)
        if event["type"] == "response.output_text.delta":
            streamed += event["delta"]
    server.kill()

    # 2. Killed while a spoken reply is being heard, half a second after its first audio.
    server = kill_and_restart()
    client = Client(server.url(session_id))
    client.append_audio(speech("Please list the numbers from one to forty in words."))
    client.send({"type": "input_audio_buffer.commit"})
    client.send({"type": "response.create", "response": {"output_modalities": ["audio"], "max_output_tokens": 150}})
    spoken_transcript = ""
    while (event := client.recv())["type"] != "response.output_audio.delta":
        if event["type"] == "response.output_audio_transcript.delta":
            spoken_transcript += event["delta"]
    # Killed on a timer, whatever the client is reading: speech comes in bursts, a sentence at a time.
    killer = threading.Timer(0.5, server.kill)
    killer.start()
    try:
        while True:
            event = client.recv(timeout=60)
            assert event["type"] != "response.done", ("the spoken reply ended before it could be cut",
                                                      spoken_transcript)
            if event["type"] == "response.output_audio_transcript.delta":
                spoken_transcript += event["delta"]
    except ConnectionClosed:
        pass
    killer.join()

    # 3. Killed during research: the search's results have been announced, no reply text yet.
    write_docs(tmp_path / "docs")  # a knowledge base from now on
    KnowledgeBase(tmp_path / "data" / "knowledge.sqlite3").index(tmp_path / "docs")
    server = kill_and_restart()
    client = Client(server.url(session_id))
    client.say("How much rain does Galway get?")
    client.send({"type": "response.create", "response": {"output_modalities": ["text"], "max_output_tokens": 40}})
    researched = client.until("conversation.item.done")  # the question
    while not any(e["type"] == "conversation.item.done" and e["item"]["type"] == "function_call_output"
                  for e in researched):
        researched.append(client.recv())
    assert not any(e["type"] == "response.output_text.delta" for e in researched)
    server.kill()

    # 4. Killed during transcription: the commit was sent, nothing answered yet.
    server = kill_and_restart()
    client = Client(server.url(session_id))
    client.append_audio(speech("This question is never heard."))
    client.send({"type": "input_audio_buffer.commit"})
    server.kill()

    # The store, read as the restarted service reads it.
    server = kill_and_restart()
    store = SessionStore(tmp_path / "data" / "sessions.sqlite3")
    stored = store.messages(session_id)
    roles = [m.message["role"] for m in stored]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant", "tool"], roles
    assert not any(m.status == "in_progress" for m in stored)

    story = stored[1]  # 1: up to its last stored sentence, a prefix of what was streamed
    assert story.status == "interrupted" and story.message["content"]
    assert flat(streamed).startswith(flat(story.message["content"]))
    assert story.message["content"].rstrip()[-1] in ".!?,;:"

    spoken = stored[3]  # 2: the sentences whose audio had been sent, with their timeline
    assert spoken.status == "interrupted" and spoken.message["content"]
    timeline = spoken.figures["timeline"]
    assert spoken.message["content"] == " ".join(sentence for sentence, _, _ in timeline)
    assert flat(spoken_transcript).startswith(flat(spoken.message["content"]))
    assert "numbers" in stored[2].message["content"].lower()

    assert stored[5].message["tool_calls"][0]["function"]["name"] == "search"  # 3: the research is kept
    assert "1,200 mm" in stored[6].message["content"]

    # The next turn's prompt holds everything kept, interrupted replies and research included.
    client = Client(server.url(session_id))
    follow_up = client.ask("In one sentence, what were we talking about?", max_tokens=12)
    assert done(follow_up)["status"] in ANSWERED and reply_text(follow_up)
    transcript = store.transcript(session_id)
    assert transcript[2]["content"] == story.message["content"]
    assert int(done(follow_up)["usage"]["input_tokens"]) == llm.count(evidence_first(compact_calls(transcript[:-1])))
    client.close()
    store.close()


def test_a_clean_restart_keeps_the_models_cache_for_the_device_that_spoke_last(tmp_path):
    """Home Assistant's prompt is evaluated whole only once: `parlour serve` stopped with SIGTERM
    keeps the model's cache, and the next start reads it back. Its recorded request, with two of
    its eleven tools so that the first start's evaluation stays short."""
    import json
    import urllib.request

    from harness import doors

    body = json.dumps({**doors.HOME_ASSISTANT_CHAT, "tools": doors.HOME_ASSISTANT_CHAT["tools"][4:6],
                       "stream": False, "options": {"num_predict": 2}}).encode()

    def command(server: ServerProcess) -> int:
        request = urllib.request.Request(f"http://127.0.0.1:{server.port}/api/chat", body,
                                         {"Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(request, timeout=300).read())["prompt_eval_count"]

    server = ServerProcess(tmp_path / "data", tmp_path)
    first = command(server)
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(60) == 0
    again = ServerProcess(tmp_path / "data", tmp_path)
    try:
        after_restart = command(again)
    finally:
        again.kill()
    assert first > 500 and after_restart < 20, (first, after_restart)
