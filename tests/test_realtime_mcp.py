"""A Realtime client's own `mcp` tools, with the real model: the strict protocol client (every server
event validated against the `openai` package's RealtimeServerEvent) against a real server, whose
`mcp_allowed_urls` lets it reach a real MCP server made with the `mcp` package (harness/mcp_server.py),
and the official SDK's own session, whose parsing must give each event and item its GA class."""

from __future__ import annotations

import asyncio

import openai.types.realtime as rt
import pytest
from openai import AsyncOpenAI

from harness.mcp_server import HomeMcpServer
from harness.realtime import Client, done, free_port

TOKENS = 40


@pytest.fixture
def home():
    with HomeMcpServer() as server:
        yield server


def home_tool(home: HomeMcpServer, **fields) -> dict:
    return {"type": "mcp", "server_label": "home", "server_url": home.url, "authorization": home.token, **fields}


def use_tools(client: Client, *tools: dict) -> list[dict]:
    """session.update with `tools`: the events through the end of their listing."""
    client.send({"type": "session.update", "session": {"type": "realtime", "output_modalities": ["text"],
                                                       "tools": list(tools)}})
    return client.until("mcp_list_tools.failed", "conversation.item.done")


def test_a_sessions_mcp_tool_is_listed_and_a_text_turn_acts_through_it(home, make_server):
    server = make_server(mcp_allowed_urls=[home.url])
    client = Client(server.url())
    listed = use_tools(client, home_tool(home, require_approval="never"))
    kinds = [e["type"] for e in listed]
    assert kinds[-4:] == ["conversation.item.added", "mcp_list_tools.in_progress", "mcp_list_tools.completed",
                          "conversation.item.done"]
    assert home.token not in str(listed)  # the credentials are used, never shown
    item = listed[-1]["item"]
    assert item["type"] == "mcp_list_tools" and [t["name"] for t in item["tools"]] == ["turn_on", "turn_off", "broken"]

    response = done(client.ask("Turn on the kitchen light.", max_tokens=TOKENS))
    assert home.lights["kitchen light"] is True
    call, answer = response["output"][0], response["output"][-1]
    assert call["type"] == "mcp_call" and call["name"] == "turn_on" and call["output"] == "The kitchen light is on."
    assert answer["type"] == "message" and answer["content"][0]["text"]
    client.close()


def test_a_url_not_allowed_is_refused_and_a_server_that_is_down_fails_its_listing(home, make_server):
    down = f"http://127.0.0.1:{free_port()}/mcp"
    server = make_server(mcp_allowed_urls=[home.url, down])
    client = Client(server.url())
    client.send({"type": "session.update", "session": {"type": "realtime", "tools": [
        home_tool(home, server_url="http://127.0.0.1:1/elsewhere")]}})
    (error,) = client.until("error")
    assert error["error"]["param"] == "session.tools.0.server_url"

    failed = use_tools(client, home_tool(home, server_url=down))
    assert [e["type"] for e in failed][-3:] == ["conversation.item.added", "mcp_list_tools.in_progress",
                                                "mcp_list_tools.failed"]
    (error,) = client.until("error")
    assert error["error"]["code"] == "mcp_http_error"
    listed = use_tools(client, home_tool(home))  # the session goes on
    assert listed[-1]["type"] == "conversation.item.done" and listed[-1]["item"]["tools"]
    client.close()


def approval_request(client: Client, question: str) -> dict:
    response = done(client.ask(question, max_tokens=TOKENS))
    assert response["status"] == "completed"
    (request,) = [item for item in response["output"] if item["type"] == "mcp_approval_request"]
    return request


def answer(client: Client, request: dict, approve: bool, until: str) -> list[dict]:
    client.send({"type": "conversation.item.create", "item": {
        "type": "mcp_approval_response", "id": f"mcpa_{request['id']}", "approval_request_id": request["id"],
        "approve": approve}})
    return client.until(until)


def test_a_call_that_needs_approval_runs_only_once_approved_and_the_next_response_answers(home, make_server):
    server = make_server(mcp_allowed_urls=[home.url])
    client = Client(server.url())
    use_tools(client, home_tool(home))  # require_approval: "always", the GA default

    request = approval_request(client, "Turn on the kitchen light.")
    assert request["name"] == "turn_on" and home.lights["kitchen light"] is False
    ran = answer(client, request, True, "response.mcp_call.completed") + client.until("conversation.item.done")
    assert home.lights["kitchen light"] is True
    call = ran[-1]["item"]
    assert call["type"] == "mcp_call" and call["approval_request_id"] == request["id"]
    assert call["output"] == "The kitchen light is on."
    client.send({"type": "response.create", "response": {"output_modalities": ["text"], "max_output_tokens": TOKENS}})
    response = done(client.until("response.done"))
    assert response["output"][-1]["type"] == "message" and response["output"][-1]["content"][0]["text"]

    client.close()

    home.lights["kitchen light"] = False
    client = Client(server.url())  # a new session: the same question, declined
    use_tools(client, home_tool(home))
    request = approval_request(client, "Turn on the kitchen light.")
    declined = answer(client, request, False, "conversation.item.done")
    assert declined[-1]["item"]["type"] == "mcp_approval_response" and declined[-1]["item"]["approve"] is False
    assert home.lights["kitchen light"] is False
    client.close()


def test_the_openai_sdks_session_with_an_mcp_tool_gets_the_ga_events_and_items(home, make_server):
    server = make_server(mcp_allowed_urls=[home.url])

    async def session() -> list:
        client = AsyncOpenAI(api_key="unused-locally", websocket_base_url=f"ws://127.0.0.1:{server.port}/v1")
        received: list = []
        async with client.realtime.connect(model="parlour") as connection:
            await connection.session.update(session={
                "type": "realtime", "output_modalities": ["text"], "audio": {"input": {"turn_detection": None}},
                "tools": [home_tool(home, require_approval="never")]})
            while not isinstance(event := await asyncio.wait_for(connection.recv(), 60), rt.McpListToolsCompleted):
                received.append(event)  # a response asked for before the listing ends has no tools yet
            received.append(event)
            question = [{"type": "input_text", "text": "Turn on the bedroom lamp."}]
            await connection.conversation.item.create(item={"type": "message", "role": "user", "content": question})
            await connection.response.create(response={"output_modalities": ["text"], "max_output_tokens": TOKENS})
            while (event := await asyncio.wait_for(connection.recv(), 180)).type not in ("response.done", "error"):
                received.append(event)
            received.append(event)
        return received

    received = asyncio.run(session())
    assert home.lights["bedroom lamp"] is True
    kinds = {type(event) for event in received}  # the SDK parsed each into its own GA class
    assert {rt.McpListToolsInProgress, rt.McpListToolsCompleted, rt.ResponseMcpCallArgumentsDelta,
            rt.ResponseMcpCallArgumentsDone, rt.ResponseMcpCallInProgress, rt.ResponseMcpCallCompleted} <= kinds
    items = {type(event.item) for event in received if isinstance(event, rt.ConversationItemDone)}
    assert {rt.RealtimeMcpListTools, rt.RealtimeMcpToolCall} <= items
    response = received[-1].response
    call = next(item for item in response.output if isinstance(item, rt.RealtimeMcpToolCall))
    assert call.name == "turn_on" and call.output == "The bedroom lamp is on." and call.error is None
