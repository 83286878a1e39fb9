"""The Realtime protocol's rules, without sockets or models: client events in, effects out."""

from __future__ import annotations

import base64
import json

import pytest

from voice.realtime.effects import (
    AddItem,
    Cancel,
    DeleteItem,
    DetectSpeech,
    Draft,
    Preempt,
    Respond,
    RetrieveItem,
    SaveInstructions,
    Send,
    Transcribe,
    TranscribeDraft,
    TruncateItem,
)
from voice.realtime.protocol import CANCELLING, IDLE, LIFECYCLE, REFUSALS, RESPONDING, TRANSCRIBING, RealtimeProtocol


def raw(kind: str, **fields) -> str:
    return json.dumps({"type": kind, **fields})


def speech(ms: int) -> str:
    return base64.b64encode(b"\x01\x00" * 24 * ms).decode()


def user_text(text: str, **fields) -> str:
    return raw("conversation.item.create", item={"type": "message", "role": "user",
                                                 "content": [{"type": "input_text", "text": text}]}, **fields)


def sent(effects) -> list[dict]:
    return [effect.event for effect in effects if isinstance(effect, Send)]


def kinds(effects) -> list[str]:
    return [e.event["type"] if isinstance(e, Send) else type(e).__name__ for e in effects]


def error_code(effects) -> str:
    (error,) = [event for event in sent(effects) if event["type"] == "error"]
    return error["error"]["code"]


def fresh() -> RealtimeProtocol:
    protocol = RealtimeProtocol("sess_1", "Be brief.", "amy", max_audio_seconds=60, max_text_chars=4000)
    assert kinds(protocol.opened()) == ["session.created"]
    return protocol


def transcribing() -> RealtimeProtocol:
    protocol = fresh()
    protocol.receive(raw("input_audio_buffer.append", audio=speech(400)))  # under a draft's step
    (effect,) = protocol.receive(raw("input_audio_buffer.commit"))
    assert isinstance(effect, Transcribe) and len(effect.audio) == 400 * 48 and effect.draft is None
    assert protocol.state is TRANSCRIBING
    return protocol


def responding() -> RealtimeProtocol:
    protocol = fresh()
    protocol.receive(user_text("What is the capital of France?"))
    (effect,) = protocol.receive(raw("response.create", event_id="evt_1"))
    assert isinstance(effect, Respond) and protocol.response is effect.response
    assert protocol.state is RESPONDING
    return protocol


def cancelling() -> RealtimeProtocol:
    protocol = responding()
    (effect,) = protocol.receive(raw("response.cancel"))
    assert isinstance(effect, Cancel) and effect.response is protocol.response
    assert protocol.state is CANCELLING
    return protocol


REACH = {IDLE: fresh, TRANSCRIBING: transcribing, RESPONDING: responding, CANCELLING: cancelling}


def test_the_table_names_every_state_and_what_it_leaves_out_is_refused():
    assert {state for state, _ in LIFECYCLE} == set(REACH)
    client_events = {"commit": raw("input_audio_buffer.commit"), "response.create": raw("response.create"),
                     "response.cancel": raw("response.cancel"), "item.create": user_text("hello")}
    refused = []
    for state in REACH:
        for happening, event in client_events.items():
            # Whatever a client can do in any state is either in the table, or refused with the
            # error REFUSALS names for it, and the state stays.
            if (state, happening) not in LIFECYCLE:
                protocol = REACH[state]()
                assert error_code(protocol.receive(event)) == REFUSALS[happening][1], (state, happening)
                assert protocol.state is state
                refused.append((state, happening))
    assert set(refused) == {(IDLE, "response.cancel"), (TRANSCRIBING, "response.cancel"),
                            (RESPONDING, "response.create")}


@pytest.mark.parametrize("state", list(REACH))
def test_response_create_in_each_state(state):
    protocol = REACH[state]()
    effects = protocol.receive(raw("response.create", event_id="evt_again"))
    if state is IDLE:
        assert isinstance(effects[0], Respond) and protocol.state is RESPONDING
    elif state is RESPONDING:
        assert error_code(effects) == "conversation_already_has_active_response"
        assert sent(effects)[0]["error"]["event_id"] == "evt_again"
        assert protocol.state is RESPONDING
    else:  # waits: for the transcript, or for the cancelled response's response.done
        assert effects == [] and protocol.state is state


@pytest.mark.parametrize("state", list(REACH))
def test_cancel_in_each_state(state):
    protocol = REACH[state]()
    effects = protocol.receive(raw("response.cancel"))
    if state is RESPONDING:
        assert kinds(effects) == ["Cancel"] and protocol.state is CANCELLING
    elif state is CANCELLING:
        assert effects == [] and protocol.state is CANCELLING  # asked twice: still one response.done
    else:
        assert error_code(effects) == "response_cancel_not_active" and protocol.state is state


def test_push_to_talk_then_response_create_waits_for_the_transcript():
    protocol = transcribing()
    assert protocol.receive(raw("response.create")) == []
    (effect,) = protocol.transcribed(ok=True)
    assert isinstance(effect, Respond) and protocol.state is RESPONDING
    assert protocol.response_ended() == [] and protocol.state is IDLE


def test_a_short_commit_is_refused_and_changes_nothing():
    protocol = fresh()
    protocol.receive(raw("input_audio_buffer.append", audio=speech(60)))
    assert error_code(protocol.receive(raw("input_audio_buffer.commit"))) == "input_audio_buffer_commit_empty"
    assert protocol.state is IDLE


def test_input_during_a_response_is_stored_after_it_in_arrival_order():
    protocol = responding()
    assert protocol.receive(user_text("first after")) == []
    protocol.receive(raw("input_audio_buffer.append", audio=speech(400)))
    assert protocol.receive(raw("input_audio_buffer.commit")) == []  # heard after the reply is stored
    assert protocol.receive(user_text("second after")) == []
    effects = protocol.response_ended()
    assert kinds(effects) == ["AddItem", "Transcribe"] and protocol.state is TRANSCRIBING
    assert effects[0].message == {"role": "user", "content": "first after"}
    (effect,) = protocol.transcribed(ok=True)  # the item that came after the commit follows its transcript
    assert isinstance(effect, AddItem) and effect.message["content"] == "second after"
    assert protocol.state is IDLE


def test_a_new_response_after_a_cancel_starts_once_the_old_one_is_done():
    protocol = cancelling()
    old = protocol.response
    assert protocol.receive(raw("response.create")) == []
    (effect,) = protocol.response_ended()
    assert isinstance(effect, Respond) and effect.response is not old and protocol.state is RESPONDING


def test_items_retrieved_deleted_and_the_running_reply_protected():
    protocol = responding()
    reply = protocol.response.item_id
    assert kinds(protocol.receive(raw("conversation.item.retrieve", item_id="item_a"))) == ["RetrieveItem"]
    assert protocol.receive(raw("conversation.item.delete", item_id="item_a", event_id="e")) == [
        DeleteItem("item_a", "e")]
    assert error_code(protocol.receive(raw("conversation.item.delete", item_id=reply))) == "invalid_value"
    protocol.response_ended()
    assert kinds(protocol.receive(raw("conversation.item.delete", item_id=reply))) == ["DeleteItem"]


def test_truncating_the_running_reply_waits_until_it_is_stored():
    protocol = cancelling()
    reply = protocol.response.item_id
    assert protocol.receive(raw("conversation.item.truncate", item_id=reply, content_index=0, audio_end_ms=900)) == []
    assert protocol.response_ended() == [TruncateItem(reply, 0, 900, None)]
    other = protocol.receive(raw("conversation.item.truncate", item_id="item_old", content_index=0, audio_end_ms=5))
    assert other == [TruncateItem("item_old", 0, 5, None)]
    bad = protocol.receive(raw("conversation.item.truncate", item_id="item_old", content_index=0, audio_end_ms=-1))
    assert error_code(bad) == "invalid_value"


def test_function_call_round_trip():
    protocol = fresh()
    tool = {"type": "function", "name": "get_weather", "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    effects = protocol.receive(raw("session.update", session={"type": "realtime", "tools": [tool],
                                                              "output_modalities": ["text"]}))
    assert sent(effects)[0]["session"]["tools"][0]["name"] == "get_weather"
    protocol.receive(user_text("Weather in Paris?"))
    (respond,) = protocol.receive(raw("response.create", response={"tool_choice": "required"}))
    assert respond.response.tools[0]["function"]["name"] == "get_weather"
    assert respond.response.tool_choice == "required" and respond.response.modalities == ["text"]
    protocol.response_ended()  # the response called the function and ended
    (added,) = protocol.receive(raw("conversation.item.create", item={
        "type": "function_call_output", "call_id": "call_1", "output": "21 and sunny"}))
    assert added.message == {"role": "tool", "tool_call_id": "call_1", "content": "21 and sunny"}
    (again,) = protocol.receive(raw("response.create", response={"tool_choice": "none"}))
    assert again.response.tool_choice == "none"
    bad = protocol.receive(raw("session.update", session={"type": "realtime", "tools": [{"type": "mcp"}]}))
    assert sent(bad)[0]["type"] == "error"


def test_a_refused_session_update_changes_nothing():
    protocol = fresh()
    effects = protocol.receive(raw("session.update", session={
        "type": "realtime", "instructions": "Talk like a pirate.", "output_modalities": ["text"],
        "audio": {"output": {"speed": 9}}}))
    assert error_code(effects) == "invalid_value"
    assert protocol.modalities == ["audio"] and protocol.instructions == "Be brief."
    effects = protocol.receive(raw("session.update", session={"instructions": "Talk like a pirate."}))
    assert effects[0] == SaveInstructions("Talk like a pirate.")
    assert sent(effects)[0]["session"]["instructions"] == "Talk like a pirate."


def hands_free(**detection) -> RealtimeProtocol:
    protocol = fresh()
    protocol.receive(raw("session.update", session={"type": "realtime", "audio": {"input": {
        "turn_detection": {"type": "server_vad", "silence_duration_ms": 300, **detection}}}}))
    assert protocol.vad is not None and protocol.vad.silence_duration_ms == 300
    return protocol


def test_hands_free_speech_is_committed_and_answered():
    protocol = hands_free()
    (detect,) = protocol.receive(raw("input_audio_buffer.append", audio=speech(1000)))
    assert isinstance(detect, DetectSpeech) and detect.settings is protocol.vad
    started = protocol.speech_detected([("started", 200)], speaking=True)
    assert kinds(started) == ["input_audio_buffer.speech_started"]
    stopped = protocol.speech_detected([("stopped", 900)], speaking=False)
    assert kinds(stopped) == ["input_audio_buffer.speech_stopped", "Transcribe"]
    assert stopped[1].item_id == sent(started)[0]["item_id"] == sent(stopped)[0]["item_id"]
    assert kinds(protocol.transcribed(ok=True)) == ["Respond"]


def test_hands_free_noise_is_not_answered_and_silence_is_trimmed_to_the_padding():
    protocol = hands_free(prefix_padding_ms=100)
    protocol.receive(raw("input_audio_buffer.append", audio=speech(1000)))
    assert protocol.speech_detected([], speaking=False) == []
    assert len(protocol.audio.data) == 100 * 48  # only the padding before speech is kept
    protocol.speech_detected([("started", 0), ("stopped", 400)], speaking=False)
    assert protocol.transcribed(ok=False) == [] and protocol.state is IDLE  # nothing heard: no response


def test_speaking_over_a_reply_interrupts_it_unless_told_not_to():
    protocol = hands_free()
    protocol.receive(user_text("Tell me a long story."))
    protocol.receive(raw("response.create"))
    effects = protocol.speech_detected([("started", 100)], speaking=True)
    assert kinds(effects) == ["input_audio_buffer.speech_started", "Cancel"] and protocol.state is CANCELLING
    assert kinds(protocol.speech_detected([("stopped", 800)], speaking=False)) == ["input_audio_buffer.speech_stopped"]
    assert kinds(protocol.response_ended()) == ["Transcribe"]  # the interrupted reply is stored first
    assert kinds(protocol.transcribed(ok=True)) == ["Respond"]

    patient = hands_free(interrupt_response=False)
    patient.receive(user_text("Tell me a long story."))
    patient.receive(raw("response.create"))
    assert kinds(patient.speech_detected([("started", 100)], speaking=True)) == ["input_audio_buffer.speech_started"]
    assert patient.state is RESPONDING


def test_bad_events_are_answered_with_the_field_and_the_event_id():
    protocol = responding()
    effects = protocol.receive(json.dumps({"type": "session.update", "event_id": "evt_9", "session": {"audio": 5}}))
    (error,) = sent(effects)
    assert error["error"]["event_id"] == "evt_9" and error["error"]["param"].startswith("session.audio")
    assert error_code(protocol.receive("not json")) == "invalid_json"
    assert error_code(protocol.receive(raw("output_audio_buffer.clear"))) == "unsupported_event"
    assert protocol.state is RESPONDING  # none of it touched the running response


def test_retrieve_is_answered_in_any_state():
    for reach in REACH.values():
        protocol = reach()
        assert protocol.receive(raw("conversation.item.retrieve", item_id="x", event_id="e")) == [
            RetrieveItem("x", "e")]


def test_held_audio_is_drafted_in_the_background_and_the_commit_uses_the_draft():
    protocol = fresh()
    (draft,) = protocol.receive(raw("input_audio_buffer.append", audio=speech(600)))
    assert isinstance(draft, TranscribeDraft) and len(draft.audio) == 600 * 48
    assert protocol.receive(raw("input_audio_buffer.append", audio=speech(600))) == []  # one draft at a time
    assert [type(e) for e in protocol.drafted(draft.generation, Draft("What is the", len(draft.audio)))] == [Preempt]
    (again,) = protocol.receive(raw("input_audio_buffer.append", audio=speech(100)))  # 700 ms since the draft
    assert len(again.audio) == 1300 * 48
    protocol.drafted(again.generation, Draft("What is the time?", len(again.audio)))
    (effect,) = protocol.receive(raw("input_audio_buffer.commit"))
    assert effect.draft == Draft("What is the time?", 1300 * 48) and len(effect.audio) == 1300 * 48


def test_each_draft_of_the_held_key_is_prefilled_ahead_and_a_settled_one_as_the_whole_question():
    protocol = fresh()
    protocol.tools = [{"type": "function", "function": {"name": "lights", "parameters": {}}}]
    (draft,) = protocol.receive(raw("input_audio_buffer.append", audio=speech(600)))
    (effect,) = protocol.drafted(draft.generation, Draft("What is the", len(draft.audio)))
    assert effect == Preempt("What is the", True, protocol.tools, "auto", settled=False)  # its evidence only
    (again,) = protocol.receive(raw("input_audio_buffer.append", audio=speech(600)))
    (effect,) = protocol.drafted(again.generation, Draft("What is the time?", len(again.audio), settled=True))
    assert effect == Preempt("What is the time?", True, protocol.tools, "auto", settled=True)
    (silence,) = protocol.receive(raw("input_audio_buffer.append", audio=speech(600)))
    assert silence.earlier == Draft("What is the time?", len(again.audio), settled=True)  # checked for speech only
    protocol.drafted(silence.generation, None)
    protocol.modalities = ["text"]
    (later,) = protocol.receive(raw("input_audio_buffer.append", audio=speech(600)))
    (effect,) = protocol.drafted(later.generation, Draft("What is the time now?", len(later.audio), settled=True))
    assert effect.spoken is False  # a text reply's research is not cut for speech


def test_a_commit_waits_for_the_draft_that_is_running():
    protocol = fresh()
    (draft,) = protocol.receive(raw("input_audio_buffer.append", audio=speech(900)))
    assert protocol.receive(raw("input_audio_buffer.commit")) == [] and protocol.state is TRANSCRIBING
    protocol.receive(raw("input_audio_buffer.append", audio=speech(200)))  # the next question begins
    (effect,) = protocol.drafted(draft.generation, Draft("Hello there.", len(draft.audio)))
    assert isinstance(effect, Transcribe) and effect.draft == Draft("Hello there.", 900 * 48)
    assert protocol.drafts.latest is None  # the draft was the committed buffer's, not the new one's


def test_a_cleared_buffer_forgets_its_draft():
    protocol = fresh()
    (draft,) = protocol.receive(raw("input_audio_buffer.append", audio=speech(700)))
    protocol.receive(raw("input_audio_buffer.clear"))
    assert protocol.drafted(draft.generation, Draft("Never mind.", len(draft.audio), settled=True)) == []
    protocol.receive(raw("input_audio_buffer.append", audio=speech(300)))
    (effect,) = protocol.receive(raw("input_audio_buffer.commit"))
    assert effect.draft is None and len(effect.audio) == 300 * 48
    hands_free_protocol = hands_free()
    effects = hands_free_protocol.receive(raw("input_audio_buffer.append", audio=speech(2000)))
    assert kinds(effects) == ["DetectSpeech"]  # hands-free commits after silence: no drafts


def test_a_commit_does_not_wait_for_a_draft_of_a_small_part_of_it():
    protocol = fresh()
    (draft,) = protocol.receive(raw("input_audio_buffer.append", audio=speech(600)))
    protocol.drafted(draft.generation, Draft("Tell me", len(draft.audio)))
    (running,) = protocol.receive(raw("input_audio_buffer.append", audio=speech(600)))
    protocol.receive(raw("input_audio_buffer.append", audio=speech(3000)))  # sent faster than spoken
    (effect,) = protocol.receive(raw("input_audio_buffer.commit"))
    assert isinstance(effect, Transcribe) and effect.draft == Draft("Tell me", 600 * 48)
    assert protocol.drafted(running.generation, None) == []  # too late: nothing waits
