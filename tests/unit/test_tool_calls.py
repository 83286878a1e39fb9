"""The one tool-call parser, on the shapes small local models really write (no model needed)."""

from __future__ import annotations

import json

import pytest

from models.tool_calls import CallScanner, parse_tool_calls
from models.tool_schema import fit_call, made_up

NAMES = {"search", "weather"}


def calls_of(text: str) -> list[tuple[str, dict]]:
    parsed = parse_tool_calls(text, NAMES)
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.calls]


@pytest.mark.parametrize("text", [
    '<tool_call>\n{"name": "search", "arguments": {"query": "boiler code"}}\n</tool_call>',
    '<tool_call>{"name": "search", "arguments": {"query": "boiler code"}}',  # closing tag never came
    '<tools>\n{"name": "search", "arguments": {"query": "boiler code"}}\n</tools>\n```',  # seen from the 1.5B
    '{"name": "search", "arguments": {"query": "boiler code"}}',
    '```json\n{"name": "search", "arguments": {"query": "boiler code"}}\n```',
    '{{"name": "search", "arguments": {"query": "boiler code"}}}',  # Qwen's template shows {{ }}
    '{{"name": "search", "arguments": {{"query": "boiler code"}}}}',
    '{"name": "search", "parameters": {"query": "boiler code"}}',
    '{"name": "search", "arguments": "{\\"query\\": \\"boiler code\\"}"}',  # arguments as a JSON string
    '{"type": "function", "function": {"name": "search", "arguments": {"query": "boiler code"}}}',
    '[{"name": "search", "arguments": {"query": "boiler code"}}]',
    # Written Python-style inside doubled braces, as the 1.5B did for Home Assistant's HassLightSet.
    '{{"name": "search", "arguments": {"query": "boiler code", "page": None, "exact": False}}}',
])
def test_each_shape_gives_one_openai_call_and_no_text(text):
    parsed = parse_tool_calls(text, NAMES)
    called = calls_of(text)
    assert [(name, {k: v for k, v in arguments.items() if v not in (None, False)}) for name, arguments in called] \
        == [("search", {"query": "boiler code"})]
    assert parsed.text == ""
    call = parsed.calls[0]
    assert call["type"] == "function" and call["id"].startswith("call_")


def test_several_calls_in_one_reply_keep_their_order():
    text = ('<tool_call>\n{"name": "weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "search", "arguments": {"query": "Oslo trip"}}\n</tool_call>')
    assert calls_of(text) == [("weather", {"city": "Oslo"}), ("search", {"query": "Oslo trip"})]
    ids = [c["id"] for c in parse_tool_calls(text, NAMES).calls]
    assert len(set(ids)) == 2


def test_half_text_half_call_keeps_the_words():
    text = 'Let me look that up.\n<tool_call>\n{"name": "search", "arguments": {"query": "boiler"}}\n</tool_call>'
    parsed = parse_tool_calls(text, NAMES)
    assert parsed.text == "Let me look that up."
    assert calls_of(text) == [("search", {"query": "boiler"})]


def test_an_invented_tool_is_no_call_and_no_text():
    parsed = parse_tool_calls('<tool_call>{"name": "calculator", "arguments": {"x": "17*3"}}</tool_call>', NAMES)
    assert parsed.calls == [] and parsed.text == ""


@pytest.mark.parametrize("text", [
    "Paris is the capital of France.",
    'In JSON an object looks like {"a": 1}.',
    "Use {braces} carefully.",
    "```python\nprint({'a': 1})\n```",
])
def test_answers_are_not_calls(text):
    parsed = parse_tool_calls(text, NAMES)
    assert parsed.calls == []
    assert parsed.text == text


def test_the_scanner_releases_words_and_holds_a_call():
    scanner = CallScanner(NAMES)
    pieces = ["Let me", " check.", " <tool", "_call>", '{"name": "search", ', '"arguments": {"query": "x"}}',
              "</tool_call>"]
    shown = "".join(scanner.feed(p) for p in pieces)
    assert shown == "Let me check. "
    parsed = scanner.finish()
    assert [c["function"]["name"] for c in parsed.calls] == ["search"] and parsed.text == ""


def test_the_scanner_gives_back_held_text_that_was_no_call():
    scanner = CallScanner(NAMES)
    shown = "".join(scanner.feed(p) for p in ["The set ", "{1, 2}", " has two members."])
    assert shown == "The set "
    parsed = scanner.finish()
    assert parsed.calls == [] and shown + parsed.text == "The set {1, 2} has two members."


def test_the_scanner_waits_on_a_marker_still_arriving():
    scanner = CallScanner(NAMES)
    assert scanner.feed("Sure <to") == "Sure "
    assert scanner.feed("y> is a word.") == "<toy> is a word."


def test_calls_to_tools_never_offered_come_apart_and_are_not_run():
    from voice.knowledge.research import Research

    parsed = parse_tool_calls('{{"name": "add", "arguments": {"a": 12, "b": 7}}}', NAMES)
    assert parsed.calls == [] and parsed.text == ""
    assert [c["function"]["name"] for c in parsed.unknown] == ["add"]
    research = Research("model", None)
    assert research.run(parsed.unknown, found_only=True) == []
    exchange = research.run(parsed.unknown)  # every call keeps a result when asked to
    assert exchange[0]["tool_calls"] == parsed.unknown and exchange[1]["tool_call_id"] == parsed.unknown[0]["id"]


def test_a_call_cut_off_by_the_length_limit_is_no_text():
    parsed = parse_tool_calls('<tools>\n{"type": "function", "function": {"name": "say_hello", "descr', NAMES)
    assert parsed.text == "" and parsed.calls == [] and len(parsed.unknown) == 1


def test_a_call_described_in_words_counts_for_single_string_tools():
    text = 'To find it, you can use the `search` function with the query "dentist appointment".'
    parsed = parse_tool_calls(text, NAMES, {"search": "query"})
    assert [json.loads(c["function"]["arguments"]) for c in parsed.calls] == [{"query": "dentist appointment"}]
    assert parsed.text == ""
    assert parse_tool_calls(text, NAMES).calls == []  # only where asked for
    assert parse_tool_calls('She said "hello" to me.', NAMES, {"search": "query"}).calls == []
    for text, query in [('You may call the "search" function with the argument {"query": "fruit colour"}.',
                         "fruit colour"),
                        ('You can search for "Galway" in your notes.', "Galway")]:
        calls = parse_tool_calls(text, NAMES, {"search": "query"}).calls
        assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"query": query}]


def test_the_scanner_holds_a_first_sentence_that_describes_a_call():
    scanner = CallScanner(NAMES, {"search": "query"})
    pieces = ["To find it, you can", " use the search function", ' with the query "boiler".', " Then I'll answer."]
    assert "".join(scanner.feed(p) for p in pieces) == ""
    assert scanner.finish().calls
    scanner = CallScanner(NAMES, {"search": "query"})
    pieces = ["Paris is", " the capital.", " It is big."]
    assert "".join(scanner.feed(p) for p in pieces) == "Paris is the capital. It is big."


LIGHT_SET = {"type": "function", "function": {"name": "light__HassLightSet", "parameters": {
    "type": "object", "properties": {
        "name": {"type": "string"}, "area": {"type": "string"},
        "domain": {"type": "array", "items": {"type": "string"}},
        "color": {"type": "string", "enum": ["red", "green", "blue"]},
        "brightness": {"type": "integer", "minimum": 0, "maximum": 100}}}}}
LIVE_CONTEXT = {"type": "function", "function": {"name": "homeassistant__GetLiveContext",
                                                   "parameters": {"type": "object", "properties": {}}}}


@pytest.mark.parametrize("written, fitted", [
    ({"name": "Kitchen Light", "brightness": 40}, {"name": "Kitchen Light", "brightness": 40}),  # already fits
    # Home Assistant's InvalidSlotInfo
    ({"area": ["Porch"], "domain": "light"}, {"area": "Porch", "domain": ["light"]}),
    ({"name": "Lamp", "color": None, "floor": "Ground"}, {"name": "Lamp"}),  # None, and a parameter it lacks
    ({"name": "Lamp", "brightness": "40%"}, {"name": "Lamp", "brightness": 40}),
    ({"name": "Lamp", "brightness": 250.0}, {"name": "Lamp", "brightness": 100}),
    ({"name": "Lamp", "brightness": 40.5, "color": "RED"}, {"name": "Lamp", "color": "red"}),
    ({"name": "Lamp", "color": "mauve", "brightness": "inf"}, {"name": "Lamp"}),
])
def test_arguments_are_fitted_to_the_tools_schema(written, fitted):
    call = {"id": "c", "type": "function",
            "function": {"name": "light__HassLightSet", "arguments": json.dumps(written)}}
    assert json.loads(fit_call(call, [LIGHT_SET])["function"]["arguments"]) == fitted


def test_a_tool_that_takes_nothing_gets_nothing_and_a_required_argument_stays():
    call = {"id": "c", "type": "function", "function": {"name": "homeassistant__GetLiveContext",
                                                        "arguments": '{"name": "Hallway Light", "domain": "light"}'}}
    assert json.loads(fit_call(call, [LIVE_CONTEXT])["function"]["arguments"]) == {}
    strict = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"n": "many"}'}}
    assert json.loads(fit_call(call, [strict])["function"]["arguments"]) == {"n": "many"}  # the client says why not


@pytest.mark.parametrize("pieces", [
    ["To determine if the hallway light is on, I will use the `homeassistant__GetLiveContext` tool.\n",
     '{"name": "homeassistant__GetLiveContext", "arguments": {}}'],
    ["To turn on the living room lamp, you can use the following command:\n",
     '{"name": "light__HassLightSet", "arguments": {"name": "Living Room Lamp"}}'],
])
def test_words_that_introduce_a_call_are_never_shown(pieces):
    names = ["homeassistant__GetLiveContext", "light__HassLightSet"]
    scanner = CallScanner(names, wary=True)
    assert "".join(scanner.feed(p) for p in pieces) == ""
    assert scanner.announced  # had no call followed, the turn engine would make the model call
    assert len(scanner.finish().calls) == 1


def test_a_wary_scanner_streams_an_answer_after_its_first_sentence():
    scanner = CallScanner(["light__HassLightSet"], wary=True)
    assert scanner.feed("Paris is the capital") == ""
    assert scanner.feed(" of France. It is") == "Paris is the capital of France. It is"
    assert not scanner.announced
    assert scanner.finish().text == ""


def test_free_text_that_names_nothing_the_request_said_is_left_out():
    said = "Static Context: - names: Bedroom Light  areas: Bedroom\nSet the bedroom light to 40 percent."
    written = {"name": "Bedroom Light", "area": "Bedroom", "floor": "Ground", "domain": ["light"], "brightness": 40,
               "color": "red"}
    schema = {**LIGHT_SET["function"]["parameters"], "properties": {
        **LIGHT_SET["function"]["parameters"]["properties"], "floor": {"type": "string"}}}
    call = {"id": "c", "type": "function",
            "function": {"name": "light__HassLightSet", "arguments": json.dumps(written)}}
    tool = {"type": "function", "function": {"name": "light__HassLightSet", "parameters": schema}}
    fitted = json.loads(fit_call(call, [tool], said)["function"]["arguments"])
    # "Ground" names nothing said; "light" is a word said; "red" is the schema's own enum value.
    assert fitted == {"name": "Bedroom Light", "area": "Bedroom", "domain": ["light"], "brightness": 40, "color": "red"}
    assert json.loads(fit_call(call, [tool])["function"]["arguments"])["floor"] == "Ground"  # nothing said: kept


@pytest.mark.parametrize("text", ["```json", '```json\n{"name": "light__HassLightSet", "argu', "<tool_call>\n{"])
def test_a_call_cut_off_by_the_length_limit_is_never_shown(text):
    parsed = parse_tool_calls(text, ["light__HassLightSet"])
    assert parsed.text == "" and [c["function"]["name"] for c in parsed.unknown] == ["unreadable"]


def test_a_call_to_a_tool_named_without_its_prefix_is_a_call_to_that_tool():
    names = ["homeassistant__GetLiveContext", "intent__HassTurnOn", "light__HassTurnOn"]
    parsed = parse_tool_calls('{"name": "GetLiveContext", "arguments": {}}', names)
    assert [c["function"]["name"] for c in parsed.calls] == ["homeassistant__GetLiveContext"]
    ambiguous = parse_tool_calls('{"name": "HassTurnOn", "arguments": {}}', names)  # two tools end so
    assert not ambiguous.calls and [c["function"]["name"] for c in ambiguous.unknown] == ["HassTurnOn"]


def test_a_required_argument_of_free_text_that_names_nothing_said_is_made_up():
    weather = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]

    def call(city):
        return {"id": "c", "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}

    assert made_up(call("Paris"), weather, "Answer briefly. What is the capital of France?")
    assert not made_up(call("Oslo"), weather, "Answer briefly. What is the weather in Oslo?")
    assert not made_up(call("oslo"), weather, "How cold is Oslo?")  # words, whatever their case
    assert made_up(call("New York"), weather, "How many legs does a spider have?")
    assert not made_up(call("Oslo, Norway"), weather, "How cold is Oslo?")  # the model may word it itself
