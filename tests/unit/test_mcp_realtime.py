"""A Realtime client's own `mcp` tools, without a model: the URLs it may reach, the tools array
checked and refused by the sans-I/O protocol, the listing's events, the turn engine storing a call
that waits for approval (with the fake model), and the client's answer run against a real MCP server
(harness/mcp_server.py)."""

from __future__ import annotations

import asyncio
import json

import pytest

from harness.mcp_server import TOKEN, HomeMcpServer
from tests.unit.fake_model import FakeModel
from voice.knowledge.research import Research
from voice.realtime import approvals
from voice.realtime.client_events import BadEvent
from voice.realtime.effects import AnswerApproval, ListMcpTools, Respond, Send
from voice.realtime.items import Items
from voice.realtime.protocol import RealtimeProtocol
from voice.store.sessions import SessionStore
from voice.tools.mcp import Approval, McpHttpError, McpServer, McpTool, list_tools, url_allowed
from voice.tools.toolbox import Toolbox
from voice.turns.engine import TurnEngine
from voice.turns.events import ApprovalAsked, Delta, ToolsRan, TurnRequest

HOME_URL = "http://127.0.0.1:8123/mcp"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@pytest.mark.parametrize(("url", "allowed"), [
    ("http://127.0.0.1:8123/mcp", True),  # equal to an entry
    ("https://tools.example/home/mcp", True),  # under an entry that ends in "/"
    ("http://127.0.0.1:8123/mcp/other", False),  # an entry without "/" allows itself alone
    ("https://tools.example/home/../admin", False),
    ("https://tools.example/home/%2e%2e/admin", False),
    ("https://tools.example/home@evil.example/", False),
    ("https://tools.example/homely", False),
    ("http://192.168.1.1/", False),
])
def test_a_url_is_allowed_when_it_equals_an_entry_or_lies_under_one_that_ends_in_a_slash(url, allowed):
    assert url_allowed(url, ["http://127.0.0.1:8123/mcp", "https://tools.example/home/"]) is allowed


def test_nothing_is_allowed_by_default():
    assert not url_allowed(HOME_URL, [])


def protocol(allowed: list[str] | None = None) -> RealtimeProtocol:
    return RealtimeProtocol("sess_mcp", "Be brief.", "amy", max_audio_seconds=60, max_text_chars=4000,
                            mcp_allowed_urls=[HOME_URL] if allowed is None else allowed)


def update(*tools: dict) -> str:
    return json.dumps({"type": "session.update", "session": {"type": "realtime", "tools": list(tools)}})


def home_tool(**fields) -> dict:
    return {"type": "mcp", "server_label": "home", "server_url": HOME_URL, **fields}


def sent(effects) -> list[dict]:
    return [effect.event for effect in effects if isinstance(effect, Send)]


def test_an_mcp_tool_is_listed_with_the_ga_events_and_its_credentials_are_used_but_never_shown():
    served = protocol()
    effects = served.receive(update(home_tool(authorization="secret", allowed_tools=["turn_on"],
                                              require_approval="never")))
    updated, added, in_progress = sent(effects)
    assert updated["type"] == "session.updated"
    assert updated["session"]["tools"] == [{"type": "mcp", "server_label": "home", "server_url": HOME_URL,
                                            "require_approval": "never", "allowed_tools": ["turn_on"]}]
    assert "secret" not in json.dumps(sent(effects))
    item = added["item"]
    assert (added["type"], item["type"], item["server_label"], item["tools"]) == \
        ("conversation.item.added", "mcp_list_tools", "home", [])
    assert in_progress == {**in_progress, "type": "mcp_list_tools.in_progress", "item_id": item["id"]}
    (listing,) = [effect for effect in effects if isinstance(effect, ListMcpTools)]
    assert listing.item_id == item["id"] and listing.server.headers == {"Authorization": "Bearer secret"}
    assert listing.server.allowed_tools == {"turn_on"}

    turn_on = McpTool(listing.server, "turn_on", "Turn on a light.", SCHEMA)
    completed, done = sent(served.mcp_tools_listed("home", item["id"], [turn_on]))
    assert completed == {**completed, "type": "mcp_list_tools.completed", "item_id": item["id"]}
    assert done["type"] == "conversation.item.done" and done["item"]["tools"] == [turn_on.listed]

    assert sent(served.receive(update(home_tool(authorization="secret", allowed_tools=["turn_on"],
                                                require_approval="never"))))[1:] == []  # unchanged: not listed again
    (respond,) = [e for e in served.receive('{"type": "response.create"}') if isinstance(e, Respond)]
    assert respond.response.toolbox is not None and "turn_on" in respond.response.toolbox
    assert not respond.response.toolbox.needs_approval("turn_on")


def test_a_label_alone_names_the_server_defined_before_and_a_changed_one_is_listed_again():
    served = protocol()
    served.receive(update(home_tool()))
    assert not [e for e in served.receive(update({"type": "mcp", "server_label": "home"}))
                if isinstance(e, ListMcpTools)]
    assert [e for e in served.receive(update(home_tool(allowed_tools=["turn_off"]))) if isinstance(e, ListMcpTools)]


@pytest.mark.parametrize(("tools", "param", "says"), [
    ([home_tool(server_url="http://192.168.1.1/mcp")], "session.tools.0.server_url", "mcp_allowed_urls"),
    ([{"type": "mcp", "server_label": "mail", "connector_id": "connector_gmail"}], "session.tools.0.connector_id",
     "not served"),
    ([home_tool(connector_id="connector_gmail")], "session.tools.0.connector_id", "give one"),
    ([home_tool(), home_tool()], "session.tools.1.server_label", "given twice"),
    ([home_tool(authorization="a", headers={"authorization": "Bearer b"})], "session.tools.0.authorization",
     "given twice"),
    ([{"type": "mcp", "server_label": "unknown"}], "session.tools.0.server_url", "needs a server_url"),
    ([home_tool(require_approval={"never": {"read_only": True}})],
     "session.tools.0.require_approval.never.read_only", "read_only"),
])
def test_an_mcp_tool_that_cannot_be_served_is_refused_naming_its_param_and_the_session_goes_on(tools, param, says):
    served = protocol()
    (error,) = sent(served.receive(update(*tools)))
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert error["error"]["param"] == param and says in error["error"]["message"]
    assert served.mcp.used == [] and served.tools == []  # a refused update changes nothing
    assert sent(served.receive(update(home_tool())))[0]["type"] == "session.updated"


def test_no_url_is_reachable_without_mcp_allowed_urls():
    (error,) = sent(protocol(allowed=[]).receive(update(home_tool())))
    assert error["error"]["param"] == "session.tools.0.server_url"


def test_a_server_that_cannot_be_listed_fails_with_an_error_and_a_listing_overtaken_is_dropped():
    served = protocol()
    (first,) = [e for e in served.receive(update(home_tool())) if isinstance(e, ListMcpTools)]
    (second,) = [e for e in served.receive(update(home_tool(allowed_tools=["turn_on"])))
                 if isinstance(e, ListMcpTools)]
    assert served.mcp_tools_listed("home", first.item_id, []) == []
    failed, error = sent(served.mcp_tools_listed("home", second.item_id, McpHttpError("down")))
    assert failed == {**failed, "type": "mcp_list_tools.failed", "item_id": second.item_id}
    assert error["type"] == "error" and error["error"]["code"] == "mcp_http_error"
    assert [e for e in served.receive(update(home_tool(allowed_tools=["turn_on"]))) if isinstance(e, ListMcpTools)]


@pytest.mark.parametrize(("asked", "waits"), [
    (None, {"turn_on": True, "turn_off": True}),  # the GA default: always
    ("never", {"turn_on": False, "turn_off": False}),
    ({"never": {"tool_names": ["turn_off"]}}, {"turn_on": True, "turn_off": False}),
    ({"always": {"tool_names": ["turn_on"]}}, {"turn_on": True, "turn_off": False}),
])
def test_require_approval_says_which_tools_wait(asked, waits):
    served = protocol()
    fields = {} if asked is None else {"require_approval": asked}
    (listing,) = [e for e in served.receive(update(home_tool(**fields))) if isinstance(e, ListMcpTools)]
    assert {name: listing.server.approval.needed(name) for name in waits} == waits


# With a real MCP server ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def home():
    with HomeMcpServer() as server:
        yield server


def asked_server(home: HomeMcpServer) -> McpServer:
    return McpServer("home", home.url, {"Authorization": f"Bearer {TOKEN}"}, approval=Approval(others=True))


def test_a_call_that_waits_for_approval_is_stored_unrun_approved_then_run_and_answered(tmp_path, home):
    home.lights["kitchen light"] = False
    store = SessionStore(tmp_path / "sessions.sqlite3")
    session_id = store.create("Be brief.")
    store.append(session_id, {"role": "user", "content": "Turn on the kitchen light."})
    call = '<tool_call>{"name": "turn_on", "arguments": {"name": "kitchen light"}}</tool_call>'
    engine = TurnEngine(FakeModel([call, "The kitchen light is on."]), store, Research("off", None), context=4096,
                        reply_tokens=64)
    sent_events: list[dict] = []

    async def send(event: dict) -> None:
        sent_events.append(event)

    async def run() -> tuple[list, list]:
        toolbox = Toolbox(await list_tools(asked_server(home)))
        asking = [e async for e in engine.respond(TurnRequest(session_id, toolbox=toolbox))]
        assert home.lights["kitchen light"] is False  # not run: it waits
        (asked,) = [e for e in asking if isinstance(e, ApprovalAsked)]
        request_id = asked.stored[0].item_id
        await approvals.answer(AnswerApproval("mcpa_1", request_id, True, None, toolbox, None),
                               Items(store, session_id, send))
        answering = [e async for e in engine.respond(TurnRequest(session_id, toolbox=toolbox))]
        await engine.idle()
        return asking, answering

    asking, answering = asyncio.run(run())
    assert home.lights["kitchen light"] is True
    assert not [e for e in asking if isinstance(e, Delta | ToolsRan)]
    kinds = [e["type"] for e in sent_events]
    assert kinds == ["conversation.item.added", "conversation.item.done", "conversation.item.added",
                     "response.mcp_call.in_progress", "response.mcp_call.completed", "conversation.item.done"]
    call_item = sent_events[-1]["item"]
    assert call_item["type"] == "mcp_call" and call_item["output"] == "The kitchen light is on."
    assert call_item["approval_request_id"] == asking[0].stored[0].item_id
    assert "".join(e.text for e in answering if isinstance(e, Delta)) == "The kitchen light is on."
    roles = [m["role"] for m in store.transcript(session_id)]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]


def test_a_declined_call_is_not_run_and_its_result_says_so(tmp_path, home):
    home.lights["hallway light"] = False
    store = SessionStore(tmp_path / "sessions.sqlite3")
    session_id = store.create("Be brief.")
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "turn_on", "arguments": '{"name": "hallway light"}'},
         "server_label": "home", "approval": "requested"}]}
    request_id = store.append(session_id, message).item_id
    sent_events: list[dict] = []

    async def send(event: dict) -> None:
        sent_events.append(event)

    async def answer(approve: bool) -> None:
        toolbox = Toolbox(await list_tools(asked_server(home)))
        await approvals.answer(AnswerApproval(f"mcpa_{approve}", request_id, approve, "not now", toolbox, None),
                               Items(store, session_id, send))

    asyncio.run(answer(False))
    assert home.lights["hallway light"] is False
    assert [e["item"]["type"] for e in sent_events] == ["mcp_approval_response"] * 2
    assert "declined" in store.transcript(session_id)[-1]["content"]
    with pytest.raises(BadEvent, match="already answered"):
        asyncio.run(answer(True))
    assert home.lights["hallway light"] is False
