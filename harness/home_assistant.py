"""What Home Assistant's Ollama integration sends: its Assist tools (as `probatio.to_openapi` renders
HA's intent schemas) and a system prompt built as HA's `AssistAPI` builds it (the time first, the
instructions, then the exposed entities as YAML). Shared by the chat API tests and
scripts/eval_home.py."""

from __future__ import annotations

import json
from datetime import datetime

_TARGET = {
    "name": {"type": "string"},
    "area": {"type": "string"},
    "floor": {"type": "string"},
    "domain": {"type": "array", "items": {"type": "string"}},
    "device_class": {"type": "array", "items": {"type": "string"}},
}


def _tool(tool: str, description: str, **properties) -> dict:
    return {"type": "function", "function": {"name": tool, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": []}}}


TOOLS = [
    _tool("HassTurnOn", "Turns on/opens/presses a device or entity. For locks, this performs a 'lock' action. "
          "Use for requests like 'turn on', 'activate', 'enable', or 'lock'.", **_TARGET),
    _tool("HassTurnOff", "Turns off/closes a device or entity. For locks, this performs an 'unlock' action. "
          "Use for requests like 'turn off', 'deactivate', 'disable', or 'unlock'.", **_TARGET),
    _tool("HassLightSet", "Sets the brightness percentage or color of a light",
          name={"type": "string"}, area={"type": "string"}, floor={"type": "string"},
          domain={"type": "array", "items": {"type": "string"}},
          color={"type": "string"}, temperature={"type": "integer"},
          brightness={"type": "integer", "minimum": 0, "maximum": 100,
                      "description": "The brightness percentage of the light between 0 and 100, "
                                     "where 0 is off and 100 is fully lit"}),
    _tool("HassClimateSetTemperature", "Sets the desired indoor temperature",
          temperature={"type": "number"}, area={"type": "string"}, name={"type": "string"},
          floor={"type": "string"}),
    _tool("HassMediaPause", "Pauses a media player", name={"type": "string"}, area={"type": "string"}),
    _tool("HassListAddItem", "Add item to a todo list", item={"type": "string"}, name={"type": "string"}),
    _tool("GetLiveContext", "Provides real-time information about the CURRENT state, value, or mode of devices, "
          "sensors, entities, or areas. Use this tool for: 1. Answering questions about current conditions "
          "(e.g., 'Is the light on?'). 2. As the first step in conditional actions (e.g., 'If the weather is "
          "rainy, turn off sprinklers' requires checking the weather first)."),
]

ENTITIES = [  # (names, domain, area)
    ("Kitchen Light", "light", "Kitchen"), ("Kitchen Ceiling Fan", "fan", "Kitchen"),
    ("Living Room Lamp", "light", "Living Room"), ("TV", "media_player", "Living Room"),
    ("Bedroom Light", "light", "Bedroom"), ("Bedside Lamp", "light", "Bedroom"),
    ("Front Door", "lock", "Hallway"), ("Hallway Light", "light", "Hallway"),
    ("Thermostat", "climate", "Living Room"), ("Garage Door", "cover", "Garage"),
    ("Porch Light", "light", "Outside"), ("Garden Sprinkler", "switch", "Outside"),
    ("Office Desk Light", "light", "Office"), ("Office Heater", "switch", "Office"),
    ("Bathroom Fan", "fan", "Bathroom"), ("Shopping List", "todo", None),
]


def system_prompt(now: datetime | None = None, area: str = "Kitchen") -> str:
    now = now or datetime.now()
    yaml = "\n".join(f"- names: {names}\n  domain: {domain}" + (f"\n  areas: {where}" if where else "")
                     for names, domain, where in ENTITIES)
    return (f"Current time is {now:%H:%M:%S}. Today's date is {now:%Y-%m-%d}.\n"
            "You are a voice assistant for Home Assistant.\nAnswer questions about the world truthfully.\n"
            "Answer in plain text. Keep it simple and to the point.\n"
            "When controlling Home Assistant always call the intent tools. Use HassTurnOn to lock and "
            "HassTurnOff to unlock a lock. When controlling a device, prefer passing just name and domain. "
            "When controlling an area, prefer passing just area name and domain.\n"
            f"You are in area {area} and all generic commands like 'turn on the lights' should target this area.\n"
            "Static Context: An overview of the areas and the devices in this smart home:\n" + yaml)


def tool_result(name: str, arguments: dict) -> str:
    """The content of HA's tool message after an intent ran: `{"data": ..., "error": null}`."""
    target = arguments.get("name") or arguments.get("area") or "the device"
    data = {"speech": {}, "response_type": "action_done", "data": {
        "targets": [], "success": [{"name": target, "type": "entity", "id": ""}], "failed": []}}
    return json.dumps({"data": data, "error": None})
