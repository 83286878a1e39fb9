"""models.call_writing: what of a call is written for the model, read with Home Assistant's tools."""

from __future__ import annotations

from models.call_writing import CallShape, CallWriting

QWEN = CallShape('<tool_call>\n{"name": "', '", "arguments": {')
HA = ("intent__HassTurnOn", "intent__HassTurnOff", "light__HassLightSet", "homeassistant__GetLiveContext")


def write(writing: CallWriting, *pieces: str) -> list[str]:
    return [writing.next_forced(piece) for piece in pieces]


def test_a_name_that_only_one_tool_begins_with_is_finished_with_the_arguments_brace():
    writing = CallWriting(QWEN, HA)
    assert write(writing, "", "intent", "__Hass", "Turn", "On", ' {"') == ["", "", "", "", '", "arguments": {', ""]
    assert write(CallWriting(QWEN, HA), "light") == ['__HassLightSet", "arguments": {']


def test_a_piece_that_runs_into_what_follows_the_name_gets_only_the_rest():
    writing = CallWriting(QWEN, HA)
    assert write(writing, "intent__HassTurn", 'On", "') == ["", 'arguments": {']


def test_one_tool_is_named_at_once_and_a_name_no_tool_has_is_left_to_the_model():
    assert CallWriting(QWEN, ("get_weather",)).next_forced() == 'get_weather", "arguments": {'
    writing = CallWriting(QWEN, HA)
    assert write(writing, "add", '", "arguments": {') == ["", ""]
    assert writing.finished


def test_a_name_written_whole_by_the_model_gets_nothing_more():
    writing = CallWriting(QWEN, HA)
    assert write(writing, "intent__HassTurn", 'Off", "arguments": {"', 'name') == ["", "", ""]
    assert writing.finished


def test_what_was_taken_back_is_left_for_the_model_to_write():
    writing = CallWriting(QWEN, HA)
    assert write(writing, "light") == ['__HassLightSet", "arguments": {']
    writing.take_back(" {")  # left for the model, which writes its own ` {"`
    assert writing.written == 'light__HassLightSet", "arguments":'
    assert write(writing, ' {"') == [""]
