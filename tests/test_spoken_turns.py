"""The voice suite: push-to-talk speech in, streamed speech out, against a real server."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import socket
import threading
import urllib.request

import jiwer
import numpy as np
from openai import AsyncOpenAI

from harness.realtime import ANSWERED, SERVER_EVENT, Client, done
from tests.helpers import until
from voice.text.sentences import Sentences
from voice.turns.prompt_layout import compact_calls, evidence_first


def words(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split())


def start_long_reply(client: Client, speech) -> list[dict]:
    """Ask for a long story and return the events up to its first audio."""
    client.append_audio(speech("Tell me a long story about a lighthouse keeper."))
    client.send({"type": "input_audio_buffer.commit"})
    client.send({"type": "response.create", "response": {"output_modalities": ["audio"], "max_output_tokens": 250}})
    return client.until("response.output_audio.delta")


def reply_audio(events: list[dict]) -> bytes:
    return b"".join(base64.b64decode(e["delta"]) for e in events if e["type"] == "response.output_audio.delta")


def reply_transcript(events: list[dict]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "response.output_audio_transcript.delta")


async def sdk_turn(url_base: str, pcm: bytes, session_id: str | None = None) -> list[dict]:
    """One push-to-talk turn through the official SDK; returns every raw server event, validated."""
    client = AsyncOpenAI(api_key="unused-locally", websocket_base_url=url_base)
    query = {"session_id": session_id} if session_id else {}
    received: list[dict] = []
    async with client.realtime.connect(model="parlour", extra_query=query) as connection:
        await connection.session.update(session={"type": "realtime", "instructions": "Answer in one short sentence.",
                                                  "audio": {"input": {"turn_detection": None}}})
        for start in range(0, len(pcm), 24_000):
            await connection.input_audio_buffer.append(audio=base64.b64encode(pcm[start:start + 24_000]).decode())
        await connection.input_audio_buffer.commit()
        await connection.response.create(response={"output_modalities": ["audio"], "max_output_tokens": 40})
        while True:
            raw = await asyncio.wait_for(connection.recv_bytes(), 180)
            event = json.loads(raw)
            SERVER_EVENT.validate_python(event)  # strict validation; the SDK alone parses leniently
            received.append(event)
            if event["type"] in ("response.done", "error"):
                return received


def test_the_openai_sdk_runs_a_push_to_talk_turn(server, speech, stt, llm):
    question = "What is the capital of France?"
    events = asyncio.run(sdk_turn(f"ws://127.0.0.1:{server.port}/v1", speech(question)))
    kinds = [e["type"] for e in events]
    assert kinds[0] == "session.created" and "error" not in kinds
    order = ["input_audio_buffer.committed", "conversation.item.added",
             "conversation.item.input_audio_transcription.completed", "response.created"]
    assert [kinds.index(k) for k in order] == sorted(kinds.index(k) for k in order)
    transcript = next(e for e in events if e["type"] == "conversation.item.input_audio_transcription.completed")
    assert jiwer.wer(words(question), words(transcript["transcript"])) <= 0.2
    user_item = next(e["item"] for e in events if e["type"] == "conversation.item.added")
    assert user_item["content"][0] == {"type": "input_audio", "transcript": transcript["transcript"]}

    audio = reply_audio(events)
    assert len(audio) % 2 == 0 and len(audio) / 2 / 24_000 > 0.5  # PCM16 at 24 kHz, over half a second
    samples = np.frombuffer(audio, dtype="<i2")
    assert np.abs(samples).max() > 1000
    said = reply_transcript(events)
    assert "Paris" in said  # the default model answers right, and in English
    heard = stt.transcribe(audio, sample_rate=24_000).text
    assert jiwer.wer(words(said), words(heard)) <= 0.35, (said, heard)  # the audio speaks the transcript

    response = done(events)
    assert response["status"] in ANSWERED and response["output_modalities"] == ["audio"]
    assert response["output"][0]["content"][0] == {"type": "output_audio", "transcript": said}
    metadata = response["metadata"]
    figures = {name: int(metadata[name]) for name in ("stt_ms", "fit_ms", "ttft_ms", "first_audio_ms", "total_ms")}
    # Timed from the commit: the transcript and the fit come before the first token, speech after it.
    assert (figures["stt_ms"] + figures["fit_ms"] <= figures["ttft_ms"] <= figures["first_audio_ms"]
            <= figures["total_ms"])
    assert int(metadata["evaluated_tokens"]) > 0
    assert "cached_tokens" in response["usage"]["input_token_details"]
    # One record of the turn: what /v1/figures serves and what was stored are what response.done said.
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/v1/figures") as answer:
        served = [f for f in json.load(answer) if f["session_id"] == response["conversation_id"]][-1]
    for figure in ("stt_ms", "stt_draft", "ttft_ms", "first_audio_ms", "total_ms", "queue_ms", "fit_ms"):
        assert served[figure] == json.loads(metadata[figure]), figure
    stored = server.service.store.messages(response["conversation_id"])[-1].figures
    assert {name: stored[name] for name in served} == served


def test_first_audio_leaves_after_the_first_sentence_not_the_whole_reply(server, speech):
    client = Client(server.url())
    events = client.speak(speech("Tell me a story about a cat."), max_tokens=60)
    kinds = [e["type"] for e in events]
    sentences = Sentences()
    complete = [s for s in sentences.feed(reply_transcript(events)) + [sentences.flush()] if s]
    assert len(complete) >= 2, reply_transcript(events)
    last_transcript = max(i for i, k in enumerate(kinds) if k == "response.output_audio_transcript.delta")
    assert kinds.index("response.output_audio.delta") < last_transcript
    client.close()


def test_a_second_spoken_turn_sees_the_first(server, speech, llm):
    client = Client(server.url())
    client.speak(speech("My dog is called Biscuit."))
    second = done(client.speak(speech("What is my dog called?")))
    transcript = server.service.store.transcript(client.session_id)
    assert "biscuit" in words(transcript[1]["content"])
    assert int(second["usage"]["input_tokens"]) == llm.count(evidence_first(compact_calls(transcript[:-1])))
    assert second["usage"]["input_token_details"]["cached_tokens"] > 0
    client.close()


def test_a_recording_answered_in_text_keeps_its_timing_to_itself(server, speech):
    client = Client(server.url())
    client.append_audio(speech("Say hello."))
    client.send({"type": "input_audio_buffer.commit"})
    client.send({"type": "response.create", "response": {"output_modalities": ["text"], "max_output_tokens": 8}})
    answered_in_text = done(client.until("response.done"))["metadata"]
    assert int(answered_in_text["stt_ms"]) >= 0 and "first_audio_ms" not in answered_in_text
    client.say("Say goodbye.")  # typed: the spoken reply to it was not transcribed
    client.send({"type": "response.create", "response": {"output_modalities": ["audio"], "max_output_tokens": 8}})
    spoken = done(client.until("response.done"))["metadata"]
    assert "stt_ms" not in spoken and int(spoken["first_audio_ms"]) >= 0
    client.close()


def test_cancel_mid_reply_stops_speech_and_stores_what_was_sent(server, speech):
    client = Client(server.url())
    events = start_long_reply(client, speech)
    client.send({"type": "response.cancel"})
    events += client.until("response.done")
    response = done(events)
    assert response["status"] == "cancelled"
    stored = server.service.store.messages(client.session_id)[-1]
    assert stored.status == "interrupted"
    assert stored.message["content"] == reply_transcript(events)
    assert int(response["usage"]["output_tokens"]) < 250
    assert done(client.speak(speech("Thank you.")))["status"] in ANSWERED  # still usable
    client.close()


def test_truncate_trims_the_stored_reply_to_what_was_heard(server, speech):
    client = Client(server.url())
    client.send({"type": "session.update", "session": {
        "instructions": "Answer with three short sentences."}})
    client.until("session.updated")
    events = client.speak(speech("Tell me about the moon."), max_tokens=60)
    item_id = done(events)["output"][0]["id"]
    total_ms = len(reply_audio(events)) // 48
    client.send({"type": "conversation.item.truncate", "item_id": item_id, "content_index": 0,
                 "audio_end_ms": total_ms // 3})
    truncated = client.until("conversation.item.truncated")[-1]
    assert truncated["item_id"] == item_id and truncated["audio_end_ms"] == total_ms // 3
    stored = server.service.store.message(client.session_id, item_id)
    full = reply_transcript(events)
    assert stored.status == "interrupted"
    assert len(stored.message["content"]) < len(full)
    heard = stored.message["content"].rstrip("…").split()
    assert heard and full.split()[:len(heard)] == heard  # the reply's opening words, whole
    # The next turn's history holds what was heard, not what was generated.
    assert server.service.store.transcript(client.session_id)[2]["content"] == stored.message["content"]
    client.close()


def test_a_spoken_session_resumes_after_a_restart(make_server, speech, llm):
    server = make_server()
    first = asyncio.run(sdk_turn(f"ws://127.0.0.1:{server.port}/v1", speech("Remember the number seven.")))
    session_id = first[0]["session"]["id"]
    server.stop()
    restarted = make_server()
    second = asyncio.run(sdk_turn(f"ws://127.0.0.1:{restarted.port}/v1", speech("Which number?"), session_id))
    assert second[0]["session"]["id"] == session_id
    transcript = restarted.service.store.transcript(session_id)
    assert "seven" in words(transcript[1]["content"]) or "7" in transcript[1]["content"]
    assert int(done(second)["usage"]["input_tokens"]) == llm.count(evidence_first(compact_calls(transcript[:-1])))


def test_bad_audio_input_gets_errors_and_the_next_turn_is_served(make_server, speech):
    server = make_server(max_audio_seconds=3)
    client = Client(server.url())
    cases = [
        ({"type": "input_audio_buffer.commit"}, "input_audio_buffer_commit_empty"),
        ({"type": "input_audio_buffer.append", "audio": "not base64!!"}, "invalid_audio"),
        ({"type": "input_audio_buffer.append", "audio": base64.b64encode(b"\x00\x01\x02").decode()}, "invalid_audio"),
        ({"type": "input_audio_buffer.append", "audio": 42}, "invalid_value"),
        ({"type": "input_audio_buffer.append", "audio": base64.b64encode(bytes(48_000 * 4)).decode()}, "invalid_audio"),
        ({"type": "conversation.item.truncate", "item_id": "item_nope", "content_index": 0, "audio_end_ms": 10},
         "item_not_found"),
        ({"type": "conversation.item.truncate", "item_id": "item_nope", "content_index": 0, "audio_end_ms": -1},
         "invalid_value"),
        ({"type": "session.update", "session": {"audio": {"output": {"speed": 0}}}}, "invalid_value"),
    ]
    for event, code in cases:
        client.send(event)
        error = client.recv()
        assert error["type"] == "error" and error["error"]["code"] == code, (event, error)
    client.append_audio(bytes(48_000))  # a second of silence
    client.send({"type": "input_audio_buffer.commit"})
    assert client.recv()["error"]["code"] == "no_speech"
    client.append_audio(speech("Hello."))
    client.send({"type": "input_audio_buffer.clear"})
    assert client.recv()["type"] == "input_audio_buffer.cleared"
    assert done(client.speak(speech("Good morning.")))["status"] in ANSWERED
    assert [m.message["role"] for m in server.service.store.messages(client.session_id)] == ["user", "assistant"]
    client.close()


def test_the_largest_allowed_append_fits_one_frame(make_server):
    server = make_server(max_audio_seconds=30)
    client = Client(server.url())
    client.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(bytes(48_000 * 29)).decode()})
    client.send({"type": "input_audio_buffer.clear"})
    assert client.recv()["type"] == "input_audio_buffer.cleared"  # no error: the frame was accepted
    client.close()


def test_session_update_sets_speed_and_ignores_unsupported_fields(server, speech):
    client = Client(server.url())
    client.send({"type": "session.update", "session": {
        "type": "realtime", "instructions": "Be brief.", "audio": {"output": {"speed": 1.5, "voice": "alloy"}},
        "tools": [], "tool_choice": "auto", "max_output_tokens": 100}})
    updated = client.until("session.updated")[-1]["session"]
    assert updated["instructions"] == "Be brief." and updated["audio"]["output"]["speed"] == 1.5
    assert server.service.store.instructions(client.session_id) == "Be brief."
    client.close()


def test_a_disconnect_mid_reply_keeps_the_question_and_what_was_sent(server, speech):
    client = Client(server.url())
    events = start_long_reply(client, speech)
    session_id = client.session_id
    client.ws.socket.shutdown(socket.SHUT_RDWR)  # the listener's network goes away mid-reply
    client.ws.socket.close()
    server.idle()
    for _ in range(100):
        stored = server.service.store.messages(session_id)
        if len(stored) == 2 and stored[1].status == "interrupted":
            break
        threading.Event().wait(0.1)
    assert [m.message["role"] for m in stored] == ["user", "assistant"]
    assert "lighthouse" in words(stored[0].message["content"])
    assert stored[1].status == "interrupted"
    assert stored[1].message["content"].startswith(reply_transcript(events))
    assert stored[1].figures["completion_tokens"] < 250  # the model stopped when the listener left
    # ...and the session carries on where it stopped.
    resumed = Client(server.url(session_id))
    assert done(resumed.speak(speech("Go on.")))["status"] in ANSWERED
    resumed.close()


def test_sentences_start_speech_at_the_first_phrase():
    def pieces(text: str, sentences: Sentences) -> list[str]:  # fed word by word, as a reply streams
        return [p for word in text.split(" ") for p in sentences.feed(word + " ")] + \
            [rest for rest in [sentences.flush()] if rest]

    text = "The sky is blue because of a process called scattering, which bends blue light. It is, in short, physics."
    assert pieces(text, Sentences()) == ["The sky is blue",
                                         "because of a process called scattering, which bends blue light.",
                                         "It is, in short, physics."]
    assert pieces("Under the GPL, you can sell copies of it. Yes.", Sentences()) == [
        "Under the GPL, you can sell copies", "of it.", "Yes."]
    assert pieces("In short, it is free.", Sentences()) == ["In short, it is free."]  # "In short," is too short
    # No phrase ends within twice `first_words` words: cut there, before an article.
    assert pieces("The GNU General Public License version three is a copyleft license.", Sentences()) == [
        "The GNU General Public License version three is", "a copyleft license."]
    # A streamed word is only judged once it is whole: "of" may yet become "often".
    streaming = Sentences()
    assert streaming.feed("Cats sleep a lot of") == [] and streaming.feed("ten, ") == ["Cats sleep a lot often,"]
    assert pieces("The sky is blue because of scattering.", Sentences(first_words=0)) == [
        "The sky is blue because of scattering."]
    # A speaker about to run out of audio takes the phrases written so far, up to the last one's end.
    slow = Sentences()
    assert slow.feed("The licence says so. You may copy it, change it and sell copies of ") == ["The licence says so."]
    assert slow.phrase() == "You may copy it, change it and sell copies"
    assert slow.phrase() == "" and slow.feed("it. ") == ["of it."]
    assert slow.feed("Two words ") == [] and slow.phrase() == ""  # too short to stand alone
    short = Sentences()
    assert short.feed("Yes, it is. Well, fine. 3.5 degrees! ") == ["Yes, it is.", "Well, fine.", "3.5 degrees!"]
    assert short.feed("And the rest") == [] and short.flush() == "And the rest"


def test_heard_text_keeps_what_played():
    from voice.speech.timeline import heard_text

    timeline = [["One two three.", 0, 1000], ["Four five six seven.", 1000, 2000]]
    assert heard_text(timeline, 2500) == "One two three. Four five six seven."
    assert heard_text(timeline, 1500) == "One two three. Four five…"
    assert heard_text(timeline, 1000) == "One two three."
    assert heard_text(timeline, 0) == ""


def test_cancel_then_truncate_while_the_reply_streams(server, speech):
    # What a client sends at barge-in: both at once, while the reply is still being spoken.
    client = Client(server.url())
    events = start_long_reply(client, speech)
    item_id = next(e for e in events if e["type"] == "response.output_item.added")["item"]["id"]
    client.send({"type": "response.cancel"})
    client.send({"type": "conversation.item.truncate", "item_id": item_id, "content_index": 0, "audio_end_ms": 400})
    events += client.until("conversation.item.truncated")
    assert done(events)["status"] == "cancelled"
    assert not [e for e in events if e["type"] == "error"]
    stored = server.service.store.message(client.session_id, item_id)
    assert stored.status == "interrupted"
    assert len(stored.message["content"]) < len(reply_transcript(events))  # what 0.4 s of audio held
    client.close()


def test_a_spoken_turn_gets_the_sentences_that_answer_it_and_a_text_turn_the_passages(make_server, tmp_path, llm):
    from voice.knowledge.base import KnowledgeBase

    docs = tmp_path / "docs"
    docs.mkdir()
    filler = " ".join(f"Ferry note {n}: the ferry to Aran leaves from Rossaveal pier in summer." for n in range(40))
    (docs / "ferries.md").write_text(f"# Ferries of Galway\n\n{filler} The harbour master is Orla Keane. {filler}")
    KnowledgeBase(tmp_path / "data" / "knowledge.sqlite3").index(docs)
    server = make_server(voice_research_tokens=120)
    client = Client(server.url())
    question = "Who is the harbour master?"
    client.say(question)
    client.send({"type": "response.create", "response": {"output_modalities": ["audio"], "max_output_tokens": 16}})
    spoken = done(client.until("response.done"))
    assert spoken["status"] in ANSWERED
    text = done(client.ask(question, max_tokens=16))
    assert text["status"] in ANSWERED
    results = [m for m in server.service.store.messages(client.session_id) if m.message["role"] == "tool"]
    spoken_result, text_result = (r.message["content"] for r in results)
    assert "Orla Keane" in spoken_result and "ferries.md" in spoken_result  # the answer, and where it came from
    assert llm.count_message({"role": "tool", "content": spoken_result}) <= 120 + 30  # the bound, and the closing line
    assert len(text_result) > 4 * len(spoken_result)  # the text stream keeps the passages
    client.close()


def test_audio_streamed_while_the_key_is_held_is_transcribed_before_release(server, speech, stt):
    import time

    question = "What is the capital of France?"
    clip = speech(question) + bytes(48 * 700)  # the key is let go 0.7 s after the last word
    client = Client(server.url())
    for start in range(0, len(clip), 4800):  # 100 ms chunks, as a microphone sends them
        client.append_audio(clip[start:start + 4800])
        time.sleep(0.1)
    client.send({"type": "input_audio_buffer.commit"})
    client.send({"type": "response.create", "response": {"output_modalities": ["audio"], "max_output_tokens": 16}})
    events = client.until("response.done")
    heard = next(e for e in events if e["type"] == "conversation.item.input_audio_transcription.completed")
    assert words(heard["transcript"]) == words(stt.transcribe(clip, 24_000).text) == words(question)
    reply = server.service.store.messages(client.session_id)[-1]
    assert reply.figures["stt_draft"] is True  # a draft made while the key was held was the transcript
    assert done(events)["metadata"]["stt_draft"] == "true"
    client.close()


def hold_key(client: Client, clip: bytes) -> None:
    """Send a clip as a held key does: 100 ms chunks, in real time."""
    import time

    for start in range(0, len(clip), 4800):
        client.append_audio(clip[start:start + 4800])
        time.sleep(0.1)


def ferry_notes(tmp_path) -> None:
    from voice.knowledge.base import KnowledgeBase

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "ferries.md").write_text("# Ferries of Galway\n\nThe ferry to Aran leaves from Rossaveal pier at ten. "
                                     "The harbour master is Orla Keane. Tickets cost twelve euro.")
    KnowledgeBase(tmp_path / "data" / "knowledge.sqlite3").index(docs)


def test_a_question_that_settled_while_the_key_was_held_is_researched_and_prefilled_before_release(
        make_server, tmp_path, speech):
    ferry_notes(tmp_path)
    server = make_server()
    client = Client(server.url())
    question = "Who is the harbour master?"
    hold_key(client, speech(question) + bytes(48 * 2500))  # the key is let go 2.5 s after the last word
    assert server.service.store.transcript(client.session_id)[1:] == []  # a guess is neither stored nor said
    assert not [e for e in client.events if e["type"].startswith(("conversation.", "response."))]
    client.send({"type": "input_audio_buffer.commit"})
    client.send({"type": "response.create", "response": {"output_modalities": ["audio"], "max_output_tokens": 16}})
    assert done(client.until("response.done"))["status"] in ANSWERED
    figures = server.service.store.messages(client.session_id)[-1].figures
    assert figures["preempted"] is True and figures["preempted_tokens"] > 0
    # At release only the reply's opening was left: the question and its research were in the cache.
    assert figures["evaluated_tokens"] < 8 < figures["research_tokens"]
    stored = [m["role"] for m in server.service.store.transcript(client.session_id)]
    assert stored == ["system", "user", "assistant", "tool", "assistant"]  # the research, stored once
    client.close()


def test_evidence_a_draft_found_while_the_user_still_spoke_is_prefilled_and_read_at_release(
        make_server, tmp_path, speech, llm):
    ferry_notes(tmp_path)
    server = make_server()
    client = Client(server.url())
    question = "Who is the harbour master at the ferry pier in Rossaveal?"
    hold_key(client, speech(question))  # no silence after the last word: no draft settled
    server.idle()
    guess = server.service.engine.preemptions.guesses[client.session_id]
    assert not guess.settled and guess.evaluated > 0
    cached = llm._llm.detokenize(llm._llama_context.cached_tokens()).decode()
    assert "Orla Keane" in cached and cached.endswith("\n\n")  # the evidence, none of the question's words
    assert server.service.store.transcript(client.session_id)[1:] == []
    client.send({"type": "input_audio_buffer.commit"})
    client.send({"type": "response.create", "response": {"output_modalities": ["audio"], "max_output_tokens": 16}})
    assert done(client.until("response.done"))["status"] in ANSWERED
    figures = server.service.store.messages(client.session_id)[-1].figures
    # At release evidence was read from the cache: unread, the evidence alone is more than was evaluated. How much
    # of it the draft had evaluated by release depends on the CPU's speed, so no finer share is asserted.
    assert figures["preempted_tokens"] > 0 and figures["evaluated_tokens"] < figures["research_tokens"]
    stored = [m["role"] for m in server.service.store.transcript(client.session_id)]
    assert stored == ["system", "user", "assistant", "tool", "assistant"]
    client.close()


def test_a_wrong_guess_is_removed_from_the_cache_and_the_question_asked_is_answered(make_server, tmp_path, speech, llm):
    ferry_notes(tmp_path)
    server = make_server()
    client = Client(server.url())
    guessed = "Who is the harbour master?"
    held = speech(guessed) + bytes(48 * 2500)
    went_on = speech("And how much do tickets cost?", after=held, hotwords=server.service.hotwords)
    hold_key(client, held)
    guess = server.service.engine.preemptions.guesses[client.session_id]
    assert "master" in words(guess.question) and guess.evaluated > 0
    client.append_audio(went_on)  # the user went on: sent at once, no draft
    client.send({"type": "input_audio_buffer.commit"})
    client.send({"type": "response.create", "response": {"output_modalities": ["audio"], "max_output_tokens": 16}})
    events = client.until("response.done")
    figures = server.service.store.messages(client.session_id)[-1].figures
    assert figures["preempted"] is False and done(events)["status"] in ANSWERED
    heard = next(e for e in events if e["type"] == "conversation.item.input_audio_transcription.completed")
    assert "tickets" in words(heard["transcript"])
    # Of the guess's cells the turn read only the evidence the two questions share, none of the
    # guessed question's words: what followed went before the turn.
    read = evidence_first(compact_calls(server.service.store.transcript(client.session_id)))
    evidence = read[1]["content"].removesuffix(heard["transcript"])
    assert evidence.endswith("\n\n") and "twelve euro" in evidence
    assert (llm.count(read[:1]) + 8 < figures["cached_tokens"]
            <= llm.count([read[0], {"role": "user", "content": evidence}]))
    questions = [m["content"] for m in server.service.store.transcript(client.session_id) if m["role"] == "user"]
    assert questions == [heard["transcript"]]
    hold_key(client, speech(guessed) + bytes(48 * 1000))  # guessed again, and the client goes away
    assert client.session_id in server.service.engine.preemptions.guesses
    client.close()
    asyncio.run(until(lambda: client.session_id not in server.service.engine.preemptions.guesses, 30))
