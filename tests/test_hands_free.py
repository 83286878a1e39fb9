"""Hands-free turns: `server_vad` turn detection (faster-whisper's Silero VAD) over a real server."""

from __future__ import annotations

from harness.realtime import ANSWERED, Client, done

SILENCE = b"\0\0" * 24_000  # one second at 24 kHz


def hands_free(client: Client, **settings) -> dict:
    client.send({"type": "session.update", "session": {"type": "realtime", "audio": {"input": {
        "turn_detection": {"type": "server_vad", **settings}}}}})
    return client.until("session.updated")[-1]["session"]["audio"]["input"]["turn_detection"]


def test_speech_then_silence_is_committed_and_answered_without_a_commit(server, speech):
    client = Client(server.url())
    settings = hands_free(client, silence_duration_ms=500)
    assert settings["type"] == "server_vad" and settings["create_response"] is True
    question = speech("What is the capital of France?")
    client.append_audio(SILENCE + question + SILENCE)
    events = client.until("response.done")
    kinds = [e["type"] for e in events]
    assert kinds.index("input_audio_buffer.speech_started") < kinds.index("input_audio_buffer.speech_stopped") < \
        kinds.index("input_audio_buffer.committed") < kinds.index("response.created")
    started = next(e for e in events if e["type"] == "input_audio_buffer.speech_started")
    stopped = next(e for e in events if e["type"] == "input_audio_buffer.speech_stopped")
    spoken_ms = len(question) // 48
    assert 700 <= started["audio_start_ms"] <= 1_300  # the speech began after one second of silence
    assert abs(stopped["audio_end_ms"] - (1_000 + spoken_ms + 500)) <= 400
    transcript = next(e for e in events if e["type"] == "conversation.item.input_audio_transcription.completed")
    assert transcript["transcript"] == "What is the capital of France?"
    assert transcript["item_id"] == started["item_id"] == stopped["item_id"]
    response = done(events)
    assert response["status"] in ANSWERED and "Paris" in response["output"][0]["content"][0]["transcript"]
    assert any(e["type"] == "response.output_audio.delta" for e in events)
    # Silence alone is never a turn.
    client.append_audio(SILENCE * 2)
    client.send({"type": "input_audio_buffer.clear"})
    assert [e["type"] for e in client.until("input_audio_buffer.cleared")] == ["input_audio_buffer.cleared"]
    client.close()


def test_a_client_that_sets_no_turn_detection_is_hands_free_as_the_ga_api_is(server, speech):
    """Pipecat's service left at its defaults sends audio and waits: no commit ever comes."""
    client = Client(server.url(), push_to_talk=False)
    detection = client.session["session"]["audio"]["input"]["turn_detection"]
    assert detection["type"] == "server_vad" and detection["create_response"] is True
    client.append_audio(SILENCE + speech("What is the capital of France?") + SILENCE)
    response = done(client.until("response.done"))
    assert response["status"] in ANSWERED and "Paris" in response["output"][0]["content"][0]["transcript"]
    client.close()


def test_speaking_over_a_reply_interrupts_it_and_the_new_question_is_answered(make_server, speech):
    server = make_server(reply_tokens=200)
    client = Client(server.url())
    hands_free(client)
    client.append_audio(speech("Tell me a long story about a lighthouse keeper.") + SILENCE)
    client.until("response.output_audio.delta")
    client.append_audio(speech("Stop. What is two plus two?") + SILENCE)
    events = client.until("input_audio_buffer.committed")
    interrupted = done(events)
    assert interrupted["status"] == "cancelled"
    assert [e["type"] for e in events].index("input_audio_buffer.speech_started") < \
        [e["type"] for e in events].index("response.done")
    answer = client.until("response.done")
    assert done(answer)["status"] in ANSWERED
    said = done(answer)["output"][0]["content"][0]["transcript"].lower()
    assert "4" in said or "four" in said
    stored = server.service.store.messages(client.session_id)
    assert [m.message["role"] for m in stored] == ["user", "assistant", "user", "assistant"]
    assert stored[1].status == "interrupted" and "plus" in stored[2].message["content"].lower()
    client.close()
