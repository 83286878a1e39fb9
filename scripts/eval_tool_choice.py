#!/usr/bin/env python3
"""Does a Realtime client's tool get called when, and only when, the question needs it?

The OpenAI Agents SDK's `RealtimeRunner` (a real client of `/v1/realtime`) talks to a server
started here, with an agent that has two function tools: `get_weather(city)` and
`set_timer(minutes)`. Each question is asked in a fresh session, by text:
- questions a tool answers: right when the right tool is called with the right argument, and the
  answer after the result says the result's fact (it was used, not ignored);
- questions no tool answers ("What is the capital of France?"): right when nothing is called and
  the answer holds the fact.

It prints a row per question (right or wrong, the calls, the answer), then the counts: calls where
none was needed, the right call where one was, results used. It asserts nothing.

Run: .venv/bin/python scripts/eval_tool_choice.py [--profile NAME] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.realtime import RunningServer
from voice.config import Config
from voice.engines import load_llm, load_stt, load_tts

WEATHER = {"oslo": "4 degrees and snowing", "madrid": "31 degrees and sunny", "cairo": "38 degrees and dusty",
           "dublin": "12 degrees and raining"}


@dataclass(frozen=True)
class Question:
    text: str
    facts: tuple[str, ...]  # one of these in the answer
    tool: str | None = None  # the call it needs
    argument: str | None = None  # that call's argument, as text


QUESTIONS = [
    Question("What is the weather in Oslo?", ("snow", "4 degrees"), "get_weather", "oslo"),
    Question("Is it sunny in Madrid right now?", ("sunny", "31"), "get_weather", "madrid"),
    Question("How hot is it in Cairo today?", ("38", "dusty"), "get_weather", "cairo"),
    Question("Do I need an umbrella in Dublin?", ("rain", "umbrella"), "get_weather", "dublin"),
    Question("Set a timer for ten minutes.", ("timer", "10", "ten"), "set_timer", "10"),
    Question("What is the capital of France?", ("paris",)),
    Question("How many legs does a spider have?", ("eight", "8")),
    Question("What is two plus two?", ("four", "4")),
    Question("Who wrote Romeo and Juliet?", ("shakespeare",)),
    Question("What colour is a ripe banana?", ("yellow",)),
]


def agent():
    from agents import function_tool
    from agents.realtime import RealtimeAgent

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        return WEATHER.get(city.strip().lower(), "no weather station there")

    @function_tool
    def set_timer(minutes: int) -> str:
        """Start a countdown timer of so many minutes."""
        return f"A timer of {minutes} minutes is running."

    return RealtimeAgent(name="Assistant", instructions="Answer in one short sentence.",
                         tools=[get_weather, set_timer])


async def ask(server: RunningServer, text: str) -> tuple[list[tuple[str, str]], str]:
    """The calls (tool, arguments) and the answer of one question in a fresh session, read from the
    server's store once the session's last message is an answer in words."""
    from agents.realtime import RealtimeRunner

    def answered() -> tuple[list[tuple[str, str]], str] | None:
        store = server.service.store
        sessions = [info for info in store.list() if info.title == text]
        messages = [m.message for m in store.messages(sessions[0].id) if m.status != "in_progress"] if sessions else []
        if not messages or messages[-1]["role"] != "assistant" or messages[-1].get("tool_calls"):
            return None
        calls = [(call["function"]["name"], call["function"]["arguments"])
                 for m in messages for call in m.get("tool_calls") or []]
        return calls, messages[-1].get("content") or ""

    runner = RealtimeRunner(agent(), config={"model_settings": {"output_modalities": ["text"]}})
    session = await runner.run(model_config={"url": f"ws://127.0.0.1:{server.port}/v1/realtime", "api_key": "unused"})
    errors: list = []

    async def run_session() -> None:  # the SDK runs the tools as its events are read
        async for event in session:
            if event.type == "error":
                errors.append(event.error)

    async with session:
        await session.send_message(text)
        running = asyncio.create_task(run_session())
        while (found := answered()) is None and not errors and not running.done():
            await asyncio.sleep(0.2)
        running.cancel()
    return found or ([], f"(error: {errors or 'the session ended'})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=None, help="a language model profile (default: the default)")
    parser.add_argument("--rounds", type=int, default=1, help="times each question is asked")
    args = parser.parse_args()
    config = Config(threads=2, **({"llm_model": args.profile} if args.profile else {}))
    unneeded = needed_right = used = 0
    with tempfile.TemporaryDirectory() as work:
        config = replace(config, data_dir=str(Path(work) / "data"))
        server = RunningServer(config, load_llm(config), load_stt(config), load_tts(config))
        try:
            for _ in range(args.rounds):
                for question in QUESTIONS:
                    calls, answer = asyncio.run(asyncio.wait_for(ask(server, question.text), 300))
                    said = any(fact in answer.lower() for fact in question.facts)
                    if question.tool is None:
                        unneeded += bool(calls)
                        ok = not calls and said
                    else:
                        called = [(name, arguments) for name, arguments in calls if name == question.tool]
                        right = len(calls) == 1 and any(question.argument in arguments.lower()
                                                        for _, arguments in called)
                        needed_right += right
                        used += right and said
                        ok = right and said
                    print(f"{'right' if ok else 'WRONG':<6} {question.text:<36} calls: {calls or '-'}  {answer[:80]!r}",
                          flush=True)
        finally:
            server.stop()
    needing = sum(q.tool is not None for q in QUESTIONS) * args.rounds
    print(f"calls where none was needed: {unneeded} of {len(QUESTIONS) * args.rounds - needing}; "
          f"the right call where one was: {needed_right} of {needing}; its result used: {used} of {needed_right}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
