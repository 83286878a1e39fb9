"""The people-facing clients: `parlour talk` and the browser page, against a real server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from harness.realtime import Client, done
from models.audio import read_wav, write_wav
from models.engine import cpu_features
from tests.browser import Chromium, chromium_path
from tests.helpers import until

OUTPUT = Path(__file__).resolve().parent.parent / "test-output"


def words(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split())


@pytest.fixture
def server(make_server):
    return make_server(reply_tokens=48)


def speak_to_wav(tts, text: str, path: Path, rate: int, padding_s: float = 0.0) -> float:
    pad = bytes(int(rate * padding_s) * 2)
    pcm = pad + b"".join(tts.synthesize(text, rate=rate)) + pad
    write_wav(path, pcm, rate)
    return len(pcm) / 2 / rate


def test_talk_runs_one_turn_from_a_wav_to_a_wav(server, tts, stt, tmp_path):
    question, answer = tmp_path / "question.wav", tmp_path / "answer.wav"
    speak_to_wav(tts, "Tell me a story about a cat.", question, 16_000)
    run = subprocess.run(
        [sys.executable, "-m", "voice.cli", "talk", "--port", str(server.port), "--input", str(question),
         "--output", str(answer)], capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert "story about a cat" in words(next(line for line in lines if line.startswith("you> ")))
    reply_text = next(line for line in lines if line.startswith("parlour> ")).removeprefix("parlour> ")
    samples, rate = read_wav(answer)
    assert rate == 24_000 and samples.size / rate > 0.5
    heard = words(stt.transcribe(samples, sample_rate=rate).text).split()
    said = words(reply_text).split()
    assert said and sum(word in heard for word in said) >= 0.6 * len(said), (reply_text, heard)
    session_id = lines[0].removeprefix("session ")
    assert server.service.store.messages(session_id)[-1].message["content"] == reply_text


def test_talk_without_portaudio_or_a_device_is_one_line(tmp_path):
    run = subprocess.run([sys.executable, "-m", "voice.cli", "talk", "--port", "9"], capture_output=True,
                         text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and run.stderr.startswith("parlour: error: ")


def test_health_and_figures_over_http(server):
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz") as answer:
        health = json.load(answer)
    assert health["status"] == "ok" and health["model"].endswith(".gguf")
    # What the engine runs with: llama.cpp's own features for this CPU, and no repacking.
    assert health["engine"]["cpu_features"] == cpu_features() and health["engine"]["repack"] is False
    assert health["engine"]["threads"] == health["engine"]["threads_batch"] == 2
    client = Client(server.url())
    response = done(client.ask("Hello!"))
    client.close()
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/v1/figures") as answer:
        figures = json.load(answer)
    assert figures[-1]["session_id"] == client.session_id
    assert figures[-1]["prompt_tokens"] == int(response["usage"]["input_tokens"])
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/v1/sessions") as answer:
        assert client.session_id in [s["id"] for s in json.load(answer)]


@pytest.mark.skipif(chromium_path() is None, reason="Chromium is not installed (scripts/test installs it as root)")
def test_the_page_in_a_real_browser(server, tts, tmp_path):
    microphone = tmp_path / "question.wav"
    seconds = speak_to_wav(tts, "Tell me a long story about a lighthouse keeper.", microphone, 48_000, padding_s=0.4)
    browser = Chromium(f"http://127.0.0.1:{server.port}/", microphone, tmp_path / "profile")
    try:
        browser.wait_for("window.parlour && window.parlour.phase === 'idle'", 60)
        browser.hold("#talk", seconds - 0.1)
        transcript = browser.wait_for("window.parlour.lastTranscript", 120)
        # The page's captured audio starts wherever Chromium's looping fake microphone is, so whisper
        # sometimes hears "lighthouse" as another word ("Lycos"): the page, not whisper, is tested here.
        assert {"story", "keeper"} <= set(words(transcript).split()), transcript
        browser.wait_for("window.parlour.playedMs > 800", 120)  # the reply is playing
        first_reply = browser.evaluate("window.parlour.lastReply")
        assert first_reply
        log = browser.evaluate("document.getElementById('log').innerText")
        assert transcript in log and first_reply.split()[0] in log
        browser.screenshot(OUTPUT / "page-speaking.png")
        # Pressing again interrupts the reply and records the next question (the fake microphone loops).
        browser.hold("#talk", seconds - 0.1)
        browser.wait_for("document.getElementById('log').innerText.includes('(interrupted)')", 60)
        browser.wait_for("window.parlour.phase === 'idle' && window.parlour.playedMs > 500", 180)
        assert browser.evaluate("document.getElementById('figures').children.length") >= 1
        browser.screenshot(OUTPUT / "page.png")
        print(f"screenshots: {OUTPUT / 'page-speaking.png'}, {OUTPUT / 'page.png'}")
        session_id = browser.evaluate("window.parlour.sessionId")
    finally:
        browser.close()
    stored = server.service.store.messages(session_id)
    assert [m.message["role"] for m in stored] == ["user", "assistant", "user", "assistant"]
    assert stored[0].message["content"] == transcript  # the page showed what the server heard
    interrupted = stored[1]
    assert interrupted.status == "interrupted"
    spoken = " ".join(sentence for sentence, _, _ in interrupted.figures["timeline"])
    assert len(interrupted.message["content"]) < len(spoken)  # trimmed to what the page had played


def test_pages_from_other_sites_are_refused(server):
    from websockets.exceptions import InvalidStatus

    with pytest.raises(InvalidStatus) as refused:
        Client(server.url(), origin="http://evil.example")
    assert refused.value.response.status_code == 403
    request = urllib.request.Request(f"http://127.0.0.1:{server.port}/v1/sessions",
                                     headers={"Origin": "http://evil.example"})
    with pytest.raises(urllib.error.HTTPError) as http_refused:
        urllib.request.urlopen(request)
    assert http_refused.value.code == 403
    same = Client(server.url(), origin=f"http://127.0.0.1:{server.port}")  # the page's own origin is fine
    assert same.session_id
    same.close()


def test_talk_records_between_key_presses_plays_the_reply_and_barges_in(server, tts, stt, capsys):
    import asyncio

    from models.audio import pcm16_to_float
    from tests.fake_audio import FakeSoundDevice
    from voice.clients.talk import talk

    device = FakeSoundDevice(input_rate=48_000)
    for _attempt in range(5):  # Piper samples noise: a rendering whisper hears, as the speech fixture chooses
        rendering = b"".join(tts.synthesize("Tell me a long story about a lighthouse keeper.", rate=48_000))
        if "lighthouse keeper" in words(stt.transcribe(rendering, sample_rate=48_000).text):
            break
    question = pcm16_to_float(rendering)

    async def scenario() -> None:
        keys: asyncio.Queue = asyncio.Queue()
        client = asyncio.create_task(talk(server.url(), None, None, sd=device, keys=keys))
        keys.put_nowait(" ")  # start talking
        # Taken once talk is connected, and it records from the moment it takes the key.
        await until(keys.empty, 60)
        await asyncio.sleep(0.2)  # the user starts speaking a moment after the key
        device.say(question)
        await until(lambda: device.pending.size == 0, 60)  # the microphone has heard all of it
        await asyncio.sleep(0.3)  # and the key is let go a moment after the last word
        keys.put_nowait(" ")  # send
        await until(lambda: device.played_seconds() > 1.0, 60)
        keys.put_nowait(" ")  # barge in: stop the reply and talk again
        await until(keys.empty, 60)  # talk has taken it: the interruption goes out before the next key
        keys.put_nowait("q")
        await asyncio.wait_for(client, 60)

    asyncio.run(scenario())
    printed = capsys.readouterr().out
    session_id = re.search(r"session (\S+):", printed).group(1)
    assert "lighthouse keeper" in words(re.search(r"you> (.*)", printed).group(1))
    assert device.played_seconds() > 1.0  # the reply was played as it arrived
    for _ in range(100):  # the cancel and the truncate reach the store
        stored = server.service.store.messages(session_id)
        if stored[-1].status == "interrupted" and stored[-1].figures.get("timeline"):
            break
        time.sleep(0.1)
    reply = stored[-1]
    assert reply.message["role"] == "assistant" and reply.status == "interrupted"
    spoken = " ".join(sentence for sentence, _, _ in reply.figures["timeline"])
    heard = reply.message["content"]
    assert heard and len(heard) < len(spoken)  # trimmed to the second or so that was actually played
    assert spoken.split()[:len(heard.rstrip("…").split())] == heard.rstrip("…").split()  # its opening words, whole


@pytest.mark.skipif(chromium_path() is None, reason="Chromium is not installed (scripts/test installs it as root)")
def test_the_page_asks_for_the_api_key_when_keys_are_set(make_server, tts, tmp_path):
    from voice.store.sessions import owner_of

    server = make_server(api_keys=["page-key"])
    microphone = tmp_path / "silence.wav"
    write_wav(microphone, bytes(48_000 * 2), 48_000)
    browser = Chromium(f"http://127.0.0.1:{server.port}/", microphone, tmp_path / "profile")
    try:
        browser.wait_for("getComputedStyle(document.getElementById('key')).display === 'block'", 60)
        assert browser.evaluate("window.parlour.phase") == "connecting"  # nothing without a key
        browser.evaluate("document.getElementById('key-input').value = 'page-key';"
                         "document.getElementById('key').requestSubmit(); true")
        browser.wait_for("window.parlour.phase === 'idle' && window.parlour.sessionId", 60)
        session_id = browser.evaluate("window.parlour.sessionId")
        assert browser.evaluate("window.parlour.errors.length") == 0
        # The page's connection acts for the key it was given, and for no other.
        assert server.service.store.exists(session_id, owner_of("page-key"))
        assert not server.service.store.exists(session_id, owner_of("other-key"))
    finally:
        browser.close()
