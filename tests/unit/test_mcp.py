"""Tools on MCP servers (voice/tools/): the configuration, the client against a real MCP server made
with the `mcp` package on 127.0.0.1 (harness/mcp_server.py), its failures, and the turn engine
running a model's call itself and answering from the result (with the fake model)."""

from __future__ import annotations

import asyncio
import json

import pytest

from harness.mcp_server import TOKEN, HomeMcpServer
from harness.realtime import free_port
from tests.unit.fake_model import FakeModel
from voice.config import Config, ConfigError
from voice.knowledge.research import Research
from voice.store.sessions import SessionStore
from voice.tools.mcp import (
    McpHttpError,
    McpProtocolError,
    McpServer,
    McpToolError,
    call_tool,
    configured_servers,
    list_tools,
)
from voice.tools.toolbox import Toolbox
from voice.turns.engine import TurnEngine
from voice.turns.events import Calls, Delta, Done, ToolsRan, TurnRequest

INSTRUCTIONS = "You are a helpful assistant."


@pytest.fixture(scope="module")
def home():
    with HomeMcpServer() as server:
        yield server


@pytest.fixture(autouse=True)
def lights_off(home):
    home.lights.update(dict.fromkeys(home.lights, False))


def served(home: HomeMcpServer, token: str = TOKEN) -> McpServer:
    return McpServer("home", home.url, {"Authorization": f"Bearer {token}"})


def test_servers_come_from_the_configuration_with_their_tokens_from_the_environment():
    config = Config(mcp_servers=["home=http://127.0.0.1:8123/api/mcp", "notes=https://notes.example/mcp"],
                    mcp_tokens=["home=HA_TOKEN"])
    (home, notes) = configured_servers(config, {"HA_TOKEN": "secret"})
    assert (home.label, home.url, home.headers) == ("home", "http://127.0.0.1:8123/api/mcp",
                                                    {"Authorization": "Bearer secret"})
    assert (notes.label, notes.headers) == ("notes", {})


@pytest.mark.parametrize(("servers", "tokens", "problem"), [
    (["home"], [], "each entry is LABEL=VALUE"),
    (["home=ftp://host/mcp"], [], r"needs an http\(s\) URL"),
    (["home=http://a/mcp", "home=http://b/mcp"], [], "a label is given twice"),
    (["home=http://a/mcp"], ["garden=TOKEN"], "not one of mcp_servers' labels"),
    (["home=http://a/mcp"], ["home=UNSET_VARIABLE"], "UNSET_VARIABLE"),
])
def test_a_server_the_configuration_cannot_describe_is_one_plain_line(servers, tokens, problem):
    with pytest.raises(ConfigError, match=problem) as raised:
        configured_servers(Config(mcp_servers=servers, mcp_tokens=tokens), {})
    assert "\n" not in str(raised.value)


def test_the_tools_a_server_offers_are_listed_with_their_schemas(home):
    tools = asyncio.run(list_tools(served(home)))
    assert [tool.name for tool in tools] == ["turn_on", "turn_off", "broken"]
    turn_on = tools[0]
    assert turn_on.input_schema["properties"]["name"]["type"] == "string" and "name" in turn_on.input_schema["required"]
    function = turn_on.spec["function"]
    assert function["name"] == "turn_on" and "Turn on a light" in function["description"]
    allowed = McpServer("home", home.url, served(home).headers, allowed_tools=frozenset({"turn_off"}))
    assert [tool.name for tool in asyncio.run(list_tools(allowed))] == ["turn_off"]


def test_a_call_acts_and_answers_and_a_failing_tool_says_why(home):
    assert asyncio.run(call_tool(served(home), "turn_on", {"name": "kitchen light"})) == "The kitchen light is on."
    assert home.lights["kitchen light"] is True
    with pytest.raises(McpToolError, match="the garage door does not answer") as raised:
        asyncio.run(call_tool(served(home), "broken", {"name": "garage"}))
    assert raised.value.shape == {"type": "tool_execution_error", "message": str(raised.value)}


@pytest.mark.parametrize("case", ["wrong token", "wrong path", "nothing listening"])
def test_a_server_that_refuses_or_is_not_there_is_an_http_error(home, case):
    server = {"wrong token": served(home, token="wrong"),
              "wrong path": McpServer("home", home.url.replace("/mcp", "/nothing"), served(home).headers),
              "nothing listening": McpServer("home", f"http://127.0.0.1:{free_port()}/mcp")}[case]
    with pytest.raises((McpHttpError, McpProtocolError)) as raised:
        asyncio.run(list_tools(server))
    assert isinstance(raised.value, McpHttpError)
    expected = {"wrong token": 401, "wrong path": 404, "nothing listening": 502}[case]
    assert raised.value.http_code == expected and raised.value.shape["code"] == expected


def test_a_name_two_servers_share_is_offered_with_each_label(home):
    other = McpServer("garden", home.url, served(home).headers)
    toolbox = asyncio.run(Toolbox.gather([served(home), other]))
    names = [spec["function"]["name"] for spec in toolbox.specs]
    assert "home__turn_on" in names and "garden__turn_on" in names and "turn_on" not in names
    down = McpServer("down", f"http://127.0.0.1:{free_port()}/mcp")
    assert [spec["function"]["name"] for spec in asyncio.run(Toolbox.gather([served(home), down])).specs] == \
        ["turn_on", "turn_off", "broken"]  # a server that cannot be listed is left out, the others serve


def turn_with_tools(tmp_path, home, replies: list[str], question: str,
                    earlier: tuple[dict, ...] = ()) -> tuple[list, SessionStore, str, FakeModel]:
    store = SessionStore(tmp_path / "sessions.sqlite3")
    session_id = store.create(INSTRUCTIONS)
    for message in [*earlier, {"role": "user", "content": question}]:
        store.append(session_id, message)
    model = FakeModel(replies)
    engine = TurnEngine(model, store, Research("off", None), context=4096, reply_tokens=64)

    async def run() -> list:
        engine.use_tools(await Toolbox.gather([served(home)]))
        events = [event async for event in engine.respond(TurnRequest(session_id))]
        await engine.idle()
        return events
    return asyncio.run(run()), store, session_id, model


def test_the_engine_runs_a_call_to_a_servers_tool_and_answers_from_its_result(tmp_path, home):
    call = '<tool_call>{"name": "turn_on", "arguments": {"name": "kitchen light"}}</tool_call>'
    events, store, session_id, model = turn_with_tools(tmp_path, home, [call, "The kitchen light is on now."],
                                                "Turn on the kitchen light.")
    assert home.lights["kitchen light"] is True
    assert not [event for event in events if isinstance(event, Calls)]  # Parlour ran it: the client runs nothing
    (ran,) = [event for event in events if isinstance(event, ToolsRan)]
    assert ran.failures == [None]
    called, result = (stored.message for stored in ran.stored)
    assert called["tool_calls"][0]["server_label"] == "home"
    assert json.loads(called["tool_calls"][0]["function"]["arguments"]) == {"name": "kitchen light"}
    assert result == {"role": "tool", "tool_call_id": called["tool_calls"][0]["id"],
                      "content": "The kitchen light is on."}
    assert "".join(event.text for event in events if isinstance(event, Delta)) == "The kitchen light is on now."
    system = model.prompts[0][0]["content"]  # the server's prompt names the home's lights
    assert system.startswith(INSTRUCTIONS) and "The lights of this home are: kitchen light, hallway light" in system
    assert [m["role"] for m in store.transcript(session_id)] == ["system", "user", "assistant", "tool", "assistant"]
    assert isinstance(events[-1], Done) and events[-1].stored[0].message["content"] == "The kitchen light is on now."


def test_a_tool_that_fails_is_told_to_the_model_and_the_turn_goes_on(tmp_path, home):
    call = '<tool_call>{"name": "broken", "arguments": {"name": "garage"}}</tool_call>'
    events, _, _, _ = turn_with_tools(tmp_path, home, [call, "The garage door does not answer."],
                                                "Open the garage.")
    (ran,) = [event for event in events if isinstance(event, ToolsRan)]
    assert isinstance(ran.failures[0], McpToolError)
    assert "the garage door does not answer" in ran.stored[1].message["content"]
    assert isinstance(events[-1], Done) and events[-1].figures.status == "complete"


def test_an_earlier_command_leaves_the_prompt_and_the_next_question_is_told_what_it_did(tmp_path, home):
    call = {"id": "call_1", "type": "function", "server_label": "home",
            "function": {"name": "turn_on", "arguments": '{"name": "kitchen light"}'}}
    earlier = ({"role": "user", "content": "Turn on the kitchen light."},
               {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "call_1", "content": "The kitchen light is on."},
               {"role": "assistant", "content": "The kitchen light is on now."})
    again = '<tool_call>{"name": "turn_off", "arguments": {"name": "kitchen light"}}</tool_call>'
    home.lights["kitchen light"] = True
    _, store, session_id, model = turn_with_tools(tmp_path, home, [again, "It is off."], "And turn it off again.",
                                                  earlier)
    first = model.prompts[0]
    assert [m["role"] for m in first] == ["system", "user"]  # shown the last command, the model answers in words
    assert first[1]["content"].startswith("And turn it off again.") and "turn_on" in first[1]["content"]
    assert home.lights["kitchen light"] is False and len(store.messages(session_id)) == len(earlier) + 4
