#!/usr/bin/env python3
"""Does the real Home Assistant control the home through Parlour? Twenty commands, checked in HA.

A real Home Assistant core (harness/home_assistant_core.py: 11 template devices in 7 areas, all
exposed to Assist) gets Parlour through its Ollama integration, added as its UI adds it (the URL,
the model `parlour:latest`, "Assist", every other field as the form fills it). Each command goes
through HA's `conversation/process`, as the Assist dialog sends it, after the home is put in the
state the command needs. A command is right when its device ends in the state asked for and no
other device changed; a state question is right when HA's spoken answer says the true state. Two
of the commands are follow-ups in the conversation before them ("And turn it off again."). Two
plain questions follow, right when the answer holds the fact.

It prints a row per command (right or wrong, seconds in HA, what HA said, and for each request
the tokens the model evaluated and wrote and its milliseconds), then the right count,
the median seconds of the commands after the first, and the first command's seconds (the prompt
evaluated whole). It asserts nothing.

`--via wyoming` takes the other road instead: HA's Model Context Protocol Server integration (the
Assist API) and a long-lived token, made as its pages make them, are Parlour's `mcp_servers` and
`mcp_tokens`; Parlour is added through the Wyoming integration, and each command goes to HA's
Wyoming conversation agent, so Parlour calls HA's tools itself. A wrong command's calls are then
read from Parlour's session.

Run: .venv/bin/python scripts/eval_home_assistant.py [--profile NAME] [--research auto|off]
                                                     [--via ollama|wyoming]
     (installs HA on first use: scripts/install_home_assistant)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.home_assistant_core import HomeAssistantCore, RecordingProxy, free_port, install, speech
from harness.realtime import RunningServer
from voice.config import Config
from voice.engines import load_llm, load_stt, load_tts
from voice.wyoming.assistant import session_for

ON, OFF = "on", "off"
TOKEN_VARIABLE = "PARLOUR_EVAL_HA_TOKEN"  # holds HA's long-lived token for Parlour's `mcp_tokens`


@dataclass(frozen=True)
class Command:
    text: str
    entity: str
    before: str  # the state it is put in first (a light's brightness or a temperature: see `given`)
    after: str | None = None  # the state asked for; None for a state question
    follow_up: bool = False  # said in the conversation of the command before it
    attribute: tuple[str, float, float] | None = None  # (name, low, high) the attribute must end within
    given: dict = field(default_factory=dict)  # service data for `before` (brightness, temperature)


COMMANDS = [
    Command("Turn on the kitchen light.", "light.kitchen_light", OFF, ON),
    Command("And turn it off again.", "light.kitchen_light", ON, OFF, follow_up=True),
    Command("Turn on the living room lamp.", "light.living_room_lamp", OFF, ON),
    Command("Set the bedroom light to 40 percent.", "light.bedroom_light", OFF, ON, attribute=("brightness", 97, 107)),
    Command("Turn off the hallway light.", "light.hallway_light", ON, OFF),
    Command("Switch on the coffee maker.", "switch.coffee_maker", OFF, ON),
    Command("Turn off the office heater.", "switch.office_heater", ON, OFF),
    Command("Lock the front door.", "lock.front_door", "unlocked", "locked"),
    Command("Unlock the front door.", "lock.front_door", "locked", "unlocked"),
    Command("Turn on the bedroom fan.", "fan.bedroom_fan", OFF, ON),
    Command("Open the garage door.", "cover.garage_door", "closed", "open"),
    Command("Close the garage door.", "cover.garage_door", "open", "closed"),
    Command("Set the thermostat to 21 degrees.", "climate.thermostat", "heat", "heat",
            attribute=("temperature", 21, 21), given={"temperature": 18}),
    Command("Dim the living room lamp to 20 percent.", "light.living_room_lamp", ON, ON,
            attribute=("brightness", 46, 56), given={"brightness": 255}),
    Command("Turn on the office heater.", "switch.office_heater", OFF, ON),
    Command("Now switch it off.", "switch.office_heater", ON, OFF, follow_up=True),
    Command("Is the front door locked?", "lock.front_door", "locked"),
    Command("Is the kitchen light on?", "light.kitchen_light", OFF),
    Command("Turn off the bedroom fan.", "fan.bedroom_fan", ON, OFF),
    Command("Turn on the hallway light.", "light.hallway_light", OFF, ON),
]
QUESTIONS = [("What is the capital of France?", ("paris",)), ("How many legs does a spider have?", ("eight", "8"))]


def put(home: HomeAssistantCore, entity: str, state: str, given: dict) -> None:
    """`entity` put in `state` through HA's own services, as a person at the switch would."""
    domain = entity.split(".")[0]
    service = {"locked": "lock", "unlocked": "unlock", "open": "open_cover", "closed": "close_cover",
               ON: "turn_on", OFF: "turn_off", "heat": "set_temperature"}[state]
    data = {"hvac_mode": "heat"} if state == "heat" else {}
    home.call(domain, service, entity_id=entity, **data, **given)


def states(home: HomeAssistantCore, entities: list[str]) -> dict[str, tuple]:
    def seen(entity: str) -> tuple:
        state = home.state(entity)
        attributes = state["attributes"]
        return state["state"], attributes.get("brightness"), attributes.get("temperature"), attributes.get("percentage")
    return {entity: seen(entity) for entity in entities}


def says(answer: str, state: str) -> bool:
    """A spoken answer states `state` (locked, off, ...) and not its opposite."""
    said = f" {answer.lower()} "
    opposite = {"locked": ("unlocked", "not locked"), OFF: (" on.", " on ", "is on"), ON: ("off", "not on")}[state]
    return state in said and not any(word in said for word in opposite)


def called(body: dict) -> str:
    """The calls and results of the last command in HA's request, in a line."""
    after = body["messages"][max(i for i, m in enumerate(body["messages"]) if m["role"] == "user") + 1:]
    return " | ".join(json.dumps(m.get("tool_calls") or m.get("content"))[:200] for m in after) or "(none)"


def called_in_session(server: RunningServer, conversation_id: str) -> str:
    """The calls and results of the last command in the Parlour session HA's Wyoming agent used."""
    messages = [stored.message for stored in server.service.store.messages(session_for(conversation_id))]
    after = messages[max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1) + 1:]
    return " | ".join(json.dumps(m.get("tool_calls") or m.get("content"))[:200] for m in after[:-1]) or "(none)"


def replies(server: RunningServer, earlier: list) -> str:
    """What the model did for each request since the turns `earlier`: tokens of the prompt it
    evaluated (of all), tokens it wrote, and milliseconds to the first text and to the end."""
    turns = [f for f in server.service.engine.recent if not any(f is e for e in earlier)]
    return " | ".join(f"{f.evaluated_tokens}/{f.prompt_tokens} in, {f.completion_tokens} out"
                      f"{', a call' if f.tool_calls else ''}, {f.ttft_ms}/{f.total_ms} ms" for f in turns)


def right(command: Command, before: dict, after: dict, answer: str, response_type: str) -> bool:
    if command.after is None:
        return says(answer, command.before)
    state, brightness, temperature, _ = after[command.entity]
    if state != command.after or response_type == "error":
        return False
    if command.attribute:
        name, low, high = command.attribute
        value = {"brightness": brightness, "temperature": temperature}[name]
        if value is None or not low <= value <= high:
            return False
    return not [entity for entity in after if entity != command.entity and after[entity] != before[entity]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=None, help="a language model profile (default: the default)")
    parser.add_argument("--research", default="auto")
    parser.add_argument("--via", choices=("ollama", "wyoming"), default="ollama",
                        help="HA's Ollama integration with its own tools (default), or its Wyoming agent "
                             "with HA's MCP server as Parlour's tools")
    args = parser.parse_args()
    hass = install()
    config = Config(threads=2, research=args.research, **({"llm_model": args.profile} if args.profile else {}))
    with tempfile.TemporaryDirectory() as work:
        config = replace(config, data_dir=str(Path(work) / "data"))
        stt, tts = load_stt(config), load_tts(config)
        # HA first: Parlour lists its MCP server's tools when it starts.
        home = HomeAssistantCore(Path(work) / "home-assistant", hass=hass).start()
        server: RunningServer | None = None
        proxy: RecordingProxy | None = None
        try:
            if args.via == "wyoming":
                home.add_mcp_server()
                os.environ[TOKEN_VARIABLE] = home.long_lived_token("Parlour")
                config = replace(config, wyoming_port=free_port(), mcp_servers=[f"home={home.mcp_url}"],
                                 mcp_tokens=[f"home={TOKEN_VARIABLE}"])
            server = RunningServer(config, load_llm(config), stt, tts)
            if args.via == "wyoming":
                agent = home.agent("wyoming", home.add_wyoming("127.0.0.1", config.wyoming_port)["entry_id"])
            else:
                proxy = RecordingProxy(server.port)  # HA's requests, to show the calls of a wrong command
                agent = home.add_ollama(proxy.url)
            entities = [device.entity_id for device in home.home if device.domain != "sensor"]
            rows, conversation = [], None
            for command in COMMANDS:
                if not command.follow_up:
                    conversation = None
                # A follow-up whose command went wrong starts as if it had gone right: it is judged on "it".
                if not command.follow_up or home.state(command.entity)["state"] != command.before:
                    put(home, command.entity, command.before, command.given)
                before = states(home, entities)
                started, earlier = time.perf_counter(), list(server.service.engine.recent)
                answer = home.converse(command.text, agent, conversation)
                seconds = time.perf_counter() - started
                conversation = answer.get("conversation_id")
                time.sleep(0.3)  # template entities follow their helpers on the next state change
                after = states(home, entities)
                ok = right(command, before, after, speech(answer), answer["response"]["response_type"])
                rows.append((command.text, ok, seconds, speech(answer)))
                print(f"{'right' if ok else 'WRONG':<6} {seconds:5.1f} s  {command.text:<42} {speech(answer)[:90]!r}",
                      flush=True)
                print(f"{'':15}model: {replies(server, earlier)}", flush=True)
                if not ok:
                    calls = called(proxy.chat_bodies()[-1]) if proxy else \
                        called_in_session(server, answer["conversation_id"])
                    print(f"{'':15}calls: {calls}", flush=True)
            answered = []
            for question, facts in QUESTIONS:
                started = time.perf_counter()
                said = speech(home.converse(question, agent))
                ok = any(fact in said.lower() for fact in facts)
                answered.append(ok)
                print(f"{'right' if ok else 'WRONG':<6} {time.perf_counter() - started:5.1f} s  {question:<42} "
                      f"{said[:90]!r}", flush=True)
            # A restart of Parlour, with a model loaded afresh: the device's first command after it.
            server.stop()
            server = RunningServer(config, load_llm(config), stt, tts)  # Wyoming: on the same port
            if proxy:
                proxy.target_port = server.port
            put(home, "light.kitchen_light", OFF, {})
            started = time.perf_counter()
            answer = home.converse("Turn on the kitchen light.", agent)
            restarted = time.perf_counter() - started
            print(f"{'right' if home.state('light.kitchen_light')['state'] == ON else 'WRONG':<6} {restarted:5.1f} s  "
                  f"{'(after a restart) Turn on the kitchen light.':<42} {speech(answer)[:90]!r}", flush=True)
        finally:
            home.stop()
            if proxy:
                proxy.close()
            if server and server.running:
                server.stop()
    seconds = [s for _, _, s, _ in rows]
    print(f"commands right: {sum(ok for _, ok, _, _ in rows)}/{len(rows)}; plain questions right: "
          f"{sum(answered)}/{len(answered)}")
    print(f"seconds a command: median {statistics.median(seconds[1:]):.1f} after the first, "
          f"first {seconds[0]:.1f}, first after a restart of Parlour {restarted:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
