"""Parlour behind the real Home Assistant core (2026.11), set up as its UI sets it up.

HA is installed once into a cache outside the repository by scripts/install_home_assistant and
started once for this module (harness/home_assistant_core.py); each test adds Parlour to it through
an integration's config flow and checks the home's entities afterwards. These tests skip, with the
installer's one line, only where HA cannot be installed."""

from __future__ import annotations

import pytest

from harness.home_assistant_core import (
    HomeAssistantCore,
    HomeAssistantUnavailable,
    RecordingProxy,
    free_port,
    install,
    speech,
)
from harness.realtime import Client, done


@pytest.fixture(scope="module")
def home_assistant(tmp_path_factory):
    try:
        hass = install()
    except HomeAssistantUnavailable as error:
        pytest.skip(str(error))
    core = HomeAssistantCore(tmp_path_factory.mktemp("home-assistant"), hass=hass).start()
    yield core
    core.stop()


def test_the_ollama_integration_turns_on_the_kitchen_light(home_assistant, make_server):
    """HA's Ollama integration, added with Parlour's URL and "Assist" (every other field as the form
    fills it), lists the model, sends HA's own request and acts on Parlour's tool call."""
    server = make_server()
    proxy = RecordingProxy(server.port)  # to see the exact requests HA sends
    try:
        agent = home_assistant.add_ollama(proxy.url)
        home_assistant.call("light", "turn_off", entity_id="light.kitchen_light")

        answer = home_assistant.converse("Turn on the kitchen light", agent)

        bodies = proxy.chat_bodies()
        assert bodies, f"HA sent no /api/chat: {[r[:2] for r in proxy.requests()]}"
        assert bodies[0]["model"] == "parlour:latest"
        assert "intent__HassTurnOn" in [tool["function"]["name"] for tool in bodies[0]["tools"]]
        assert answer["response"]["response_type"] == "action_done", speech(answer)
        assert home_assistant.state("light.kitchen_light")["state"] == "on", speech(answer)
    finally:
        proxy.close()


def test_the_wyoming_integration_finds_parlours_programs(home_assistant, make_server):
    """HA's Wyoming integration, added with the host and port, finds speech to text, text to speech
    and the conversation agent, and an Assist pipeline with that agent gets a reply."""
    server = make_server(wyoming_port=free_port())
    home_assistant.add_wyoming("127.0.0.1", server.config.wyoming_port)
    entities = [entry["entity_id"] for entry in home_assistant.ws("config/entity_registry/list")
                if entry["platform"] == "wyoming"]
    assert {entity.split(".")[0] for entity in entities} >= {"stt", "tts", "conversation"}, entities

    agent = next(entity for entity in entities if entity.startswith("conversation."))
    pipeline = home_assistant.add_pipeline("Parlour over Wyoming", agent)
    events = home_assistant.run_pipeline("What is the capital of France?", pipeline)

    assert events[-1]["type"] == "run-end", events
    intent_end = next(event for event in events if event["type"] == "intent-end")
    assert "Paris" in intent_end["data"]["intent_output"]["response"]["speech"]["plain"]["speech"]




def test_parlour_over_wyoming_and_spoken_realtime_turns_on_lights_with_home_assistants_mcp_tools(
        home_assistant, make_server, monkeypatch, request):
    """HA's Model Context Protocol Server (the Assist API) and a long-lived token, made as its pages
    make them; Parlour started with HA's `/api/mcp` as its MCP server, then added to HA over Wyoming.
    A command through HA's Wyoming conversation agent, then one spoken to Parlour over Realtime with
    no client tools: Parlour calls HA's tool itself both times."""
    home_assistant.add_mcp_server()
    monkeypatch.setenv("PARLOUR_TEST_HA_TOKEN", home_assistant.long_lived_token("Parlour"))
    server = make_server(wyoming_port=free_port(), mcp_servers=[f"home={home_assistant.mcp_url}"],
                         mcp_tokens=["home=PARLOUR_TEST_HA_TOKEN"])
    assert server.service.engine.runs_tools, "HA's MCP server offered Parlour no tools"
    entry = home_assistant.add_wyoming("127.0.0.1", server.config.wyoming_port)
    agent = home_assistant.agent("wyoming", entry["entry_id"])
    # Wyoming's `supports_home_control`: HA marks the agent as one that controls the home.
    control = 1  # ConversationEntityFeature.CONTROL
    assert home_assistant.state(agent)["attributes"].get("supported_features", 0) & control
    home_assistant.call("light", "turn_off", entity_id="light.kitchen_light")

    answer = home_assistant.converse("Turn on the kitchen light.", agent)

    assert answer["response"]["response_type"] != "error", speech(answer)
    assert speech(answer).strip(), answer
    assert home_assistant.state("light.kitchen_light")["state"] == "on", speech(answer)

    # Spoken to Parlour itself over Realtime, with no client tools: Parlour calls HA's tool.
    home_assistant.call("light", "turn_off", entity_id="light.hallway_light")
    spoken = request.getfixturevalue("speech")  # Piper's rendering; `speech` here reads HA's answers
    client = Client(server.url())
    events = client.speak(spoken("Turn on the hallway light."), max_tokens=40)
    client.close()
    (call,) = [item for item in done(events)["output"] if item["type"] == "mcp_call"]
    assert call["server_label"] == "home" and call["error"] is None, call
    assert home_assistant.state("light.hallway_light")["state"] == "on", call
