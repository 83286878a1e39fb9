#!/usr/bin/env python3
"""Can the model control a home through Parlour? Twenty Home Assistant commands over the Ollama API.

Each command goes to a real Parlour server through the `ollama` package's AsyncClient, as Home
Assistant's Ollama integration sends it: HA's Assist tools (tests/home_assistant.py), a system
prompt with the time, the instructions and 16 exposed entities, `options.num_ctx` and `keep_alive`.
A command is right when the reply's first tool calls include the expected tool with the expected
arguments (compared without case; a state question is right with GetLiveContext) and no argument
that HA's intent matching would refuse (another area than the entity's, a floor, another domain).
When the reply calls a tool, its result goes back as HA sends it and the spoken reply is read.

Two ways, since that is where small models differ:
- fresh: each command is a new conversation with no history (with `--device-memory`, Parlour's
  device memory replays the earlier ones all the same);
- continued: the commands follow one another in one conversation, as HA sends them within its
  5-minute conversation window: the history holds the earlier commands, their calls and replies.

It prints per command: the calls, right or wrong, seconds to the reply's end and the prompt tokens
evaluated; then for each way the right count and the median seconds.

Run: .venv/bin/python scripts/eval_home.py [--profile qwen2.5-coder-0.5b] [--only fresh|continued]
     [--llm-url http://127.0.0.1:8080/v1]   (a remote model: llama.cpp's server or vLLM)
It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ollama

from harness import home_assistant as ha
from harness.realtime import RunningServer
from voice.config import Config
from voice.engines import load_llm, load_stt, load_tts

# (command, tool, arguments it must have; a value "" means the argument must be there, any value)
COMMANDS = [
    ("Turn on the kitchen light.", "HassTurnOn", {"name": "kitchen light"}),
    ("Turn off the porch light.", "HassTurnOff", {"name": "porch light"}),
    ("Set the bedroom light to 40 percent.", "HassLightSet", {"name": "bedroom light", "brightness": 40}),
    ("Is the front door locked?", "GetLiveContext", {}),
    ("Lock the front door.", "HassTurnOn", {"name": "front door"}),
    ("Turn on the living room lamp.", "HassTurnOn", {"name": "living room lamp"}),
    ("Switch off the office heater.", "HassTurnOff", {"name": "office heater"}),
    ("Set the thermostat to 21 degrees.", "HassClimateSetTemperature", {"temperature": 21}),
    ("Dim the office desk light to 10 percent.", "HassLightSet", {"name": "office desk light", "brightness": 10}),
    ("Turn on the bathroom fan.", "HassTurnOn", {"name": "bathroom fan"}),
    ("Pause the TV.", "HassMediaPause", {"name": "tv"}),
    ("Add milk to the shopping list.", "HassListAddItem", {"item": "milk"}),
    ("Open the garage door.", "HassTurnOn", {"name": "garage door"}),
    ("Turn off the hallway light.", "HassTurnOff", {"name": "hallway light"}),
    ("Turn on the garden sprinkler.", "HassTurnOn", {"name": "garden sprinkler"}),
    ("Turn the bedside lamp off.", "HassTurnOff", {"name": "bedside lamp"}),
    ("Make the living room lamp red.", "HassLightSet", {"name": "living room lamp", "color": "red"}),
    ("Is the kitchen ceiling fan on?", "GetLiveContext", {}),
    ("Unlock the front door.", "HassTurnOff", {"name": "front door"}),
    ("Turn off all the lights in the kitchen.", "HassTurnOff", {"area": "kitchen"}),
]


def right(calls: list, tool: str, wanted: dict) -> bool:
    """The expected tool with the expected arguments, and nothing HA's intent matching would refuse:
    an entity's area must be its own, a domain must include its own, and this home has no floors."""
    areas = {names.lower(): (domain, (where or "").lower()) for names, domain, where in ha.ENTITIES}
    for call in calls:
        if call.function.name != tool:
            continue
        given = {k: v.lower() if isinstance(v, str) else v for k, v in dict(call.function.arguments).items()
                 if v not in (None, "")}  # HA drops empty arguments before matching
        if not all(k in given and (v == "" or str(given[k]) == str(v)) for k, v in wanted.items()):
            continue
        domain, area = areas.get(given.get("name", ""), (None, None))
        if "floor" in given or (domain and "area" in given and given["area"] != area):
            continue
        if domain and "domain" in given and domain not in [str(d).lower() for d in given["domain"]]:
            continue
        return True
    return False


async def command(client: ollama.AsyncClient, history: list[dict], text: str) -> tuple[list, str, float, int]:
    """One command as HA sends it, its tool results answered as HA answers them."""
    messages = history + [{"role": "user", "content": text}]
    started = time.perf_counter()
    first_calls, spoken, evaluated = None, "", 0
    for _round in range(3):
        reply = await client.chat(model="parlour:latest", messages=[{"role": "system", "content": ha.system_prompt()},
                                                                    *messages],
                                  tools=ha.TOOLS, options={"num_ctx": 8192}, keep_alive="300s")
        evaluated += reply.prompt_eval_count or 0
        calls = list(reply.message.tool_calls or [])
        first_calls = calls if first_calls is None else first_calls
        if not calls:
            spoken = reply.message.content or ""
            messages.append({"role": "assistant", "content": spoken})
            break
        messages.append({"role": "assistant", "content": reply.message.content or "", "tool_calls": [
            {"function": {"name": c.function.name, "arguments": dict(c.function.arguments)}} for c in calls]})
        messages += [{"role": "tool", "content": ha.tool_result(c.function.name, dict(c.function.arguments))}
                     for c in calls]
    history[:] = messages
    return first_calls or [], spoken, time.perf_counter() - started, evaluated


async def run(server: RunningServer, way: str) -> tuple[int, list[float]]:
    client = ollama.AsyncClient(host=f"http://127.0.0.1:{server.port}")
    wins, seconds = 0, []
    print(f"\n{way}: {'each command a new conversation' if way == 'fresh' else 'one conversation'}")
    history: list[dict] = []
    for number, (text, tool, wanted) in enumerate(COMMANDS, 1):
        if way == "fresh":
            history = []
        calls, spoken, took, evaluated = await command(client, history, text)
        ok = right(calls, tool, wanted)
        wins += ok
        seconds.append(took)
        shown = ", ".join(f"{c.function.name}({json.dumps(dict(c.function.arguments))})" for c in calls) or "no call"
        print(f"{number:2d} {'right' if ok else 'WRONG'} {took:5.1f}s eval {evaluated:5d}  {text}\n"
              f"     calls: {shown}\n     said: {spoken[:100]!r}")
    return wins, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="", help="language model profile (default: the default profile)")
    parser.add_argument("--device-memory", action="store_true", help="serve with device_memory on")
    parser.add_argument("--llm-url", default="", help="an OpenAI-compatible model server instead of the local model")
    parser.add_argument("--only", choices=("fresh", "continued"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="parlour-home-"))
    config = Config(data_dir=str(work / "data"), llm_model=args.profile, llm_url=args.llm_url,
                    reply_tokens=96, temperature=0.0, threads=2,
                    device_memory=args.device_memory)
    llm = load_llm(config)
    server = RunningServer(config, llm, load_stt(config), load_tts(config))
    print(f"model: {llm.name}; {len(COMMANDS)} commands, {len(ha.ENTITIES)} entities, {len(ha.TOOLS)} tools")
    results = {}
    try:
        for way in ("fresh", "continued"):
            if args.only in (None, way):
                results[way] = asyncio.run(run(server, way))
    finally:
        server.stop()
    print()
    for way, (wins, seconds) in results.items():
        print(f"{way:10s} right {wins}/{len(COMMANDS)}  median {statistics.median(seconds):.1f} s to the reply's end")


if __name__ == "__main__":
    main()
