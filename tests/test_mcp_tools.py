"""Tools on an MCP server, run by Parlour itself, with the real model: a real MCP server made with
the `mcp` package (harness/mcp_server.py) behind a bearer token from the environment, reached from
the chat API with the official `openai` client, from `parlour chat`, from a spoken Realtime turn with
no client tools, and from Home Assistant's Wyoming agent with the `wyoming` client."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import openai
import pytest
from wyoming.asr import Transcript
from wyoming.client import AsyncTcpClient
from wyoming.event import Event
from wyoming.handle import Handled
from wyoming.info import Describe, Info

from harness.mcp_server import HomeMcpServer
from harness.realtime import Client, done, free_port

TOKEN_VARIABLE = "PARLOUR_TEST_HOME_TOKEN"


@pytest.fixture
def home(monkeypatch):
    with HomeMcpServer() as server:
        monkeypatch.setenv(TOKEN_VARIABLE, server.token)
        yield server


@pytest.fixture
def home_server(make_server, home):
    return make_server(mcp_servers=[f"home={home.url}"], mcp_tokens=[f"home={TOKEN_VARIABLE}"])


def test_the_chat_api_turns_on_a_light_through_the_mcp_server_and_says_so(home, home_server):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{home_server.port}/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(model="parlour", max_tokens=40,
                                           messages=[{"role": "user", "content": "Turn on the kitchen light."}])
    assert home.lights == {"kitchen light": True, "hallway light": False, "bedroom lamp": False}
    answer = reply.choices[0].message
    assert answer.tool_calls is None and "kitchen" in answer.content.lower()  # Parlour ran the call itself
    (session,) = home_server.service.store.list()
    stored = [m.message for m in home_server.service.store.messages(session.id)]
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    call = stored[1]["tool_calls"][0]
    assert call["server_label"] == "home" and call["function"]["name"] == "turn_on"
    assert json.loads(call["function"]["arguments"])["name"].lower().endswith("kitchen light")


def test_a_spoken_realtime_turn_with_no_client_tools_acts_and_the_events_are_the_ga_protocols(
        home, home_server, speech):
    client = Client(home_server.url())
    events = client.speak(speech("Turn on the kitchen light."), max_tokens=40)
    assert home.lights["kitchen light"] is True
    kinds = [e["type"] for e in events]
    order = ["response.output_item.added", "response.mcp_call_arguments.delta", "response.mcp_call_arguments.done",
             "response.mcp_call.in_progress", "response.mcp_call.completed", "response.output_item.done"]
    assert [kind for kind in kinds if kind in order][:len(order)] == order  # every event validated by the client
    response = done(events)
    call = response["output"][0]
    assert call["type"] == "mcp_call" and call["server_label"] == "home" and call["name"] == "turn_on"
    assert call["output"] == "The kitchen light is on." and call["error"] is None
    spoken = "".join(e["delta"] for e in events if e["type"] == "response.output_audio_transcript.delta")
    assert response["output"][-1]["type"] == "message" and "kitchen" in spoken.lower()
    assert kinds.index("response.mcp_call.completed") < kinds.index("response.output_audio.delta")
    client.close()


def test_home_assistants_wyoming_agent_controls_the_home_through_the_mcp_server(home, make_server):
    port = free_port()
    make_server(mcp_servers=[f"home={home.url}"], mcp_tokens=[f"home={TOKEN_VARIABLE}"], wyoming_port=port)

    async def ask() -> tuple[Info, Handled]:
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(Describe().event())
            info = Info.from_event(await until(client, Info.is_type))
            await client.write_event(Transcript(text="Turn on the hallway light.",
                                                context={"conversation_id": "hall"}).event())
            return info, Handled.from_event(await until(client, Handled.is_type))

    info, handled = asyncio.run(ask())
    assert info.handle[0].supports_home_control  # Home Assistant lists the agent as one that controls the home
    assert home.lights["hallway light"] is True and "hallway" in handled.text.lower()


async def until(client: AsyncTcpClient, wanted) -> Event:
    while (event := await asyncio.wait_for(client.read_event(), 120)) is not None:
        if wanted(event.type):
            return event
    raise AssertionError("the Wyoming server closed the connection")


def test_parlour_chat_shows_the_call_it_ran_and_the_reply(home, home_server):
    run = subprocess.run([sys.executable, "-m", "voice.cli", "chat", "--port", str(home_server.port)],
                         input="Turn on the bedroom lamp.\n", capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert home.lights["bedroom lamp"] is True
    lines = run.stdout.splitlines()
    called = [line for line in lines if line.startswith("  [home: turn_on {")]
    assert called and called[0].endswith("→ The bedroom lamp is on.]"), lines
    assert any(line.startswith("parlour> ") for line in lines), lines
