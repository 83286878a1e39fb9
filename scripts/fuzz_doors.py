#!/usr/bin/env python3
"""Bad input on the chat APIs and Wyoming, by the thousand, against a real Parlour server.

A server with the default models starts on 127.0.0.1 (ephemeral ports; research off, 2-token
replies). Then, from a seed (harness/doors.py, harness/fuzz.py):
- `--requests N` chat requests, one connection each: mutated `/api/chat` bodies (Home Assistant's
  among them), `/v1/chat/completions` and `/api/show` bodies, and bodies that are not objects;
- `--events N` Wyoming events on one connection: mutated known events, unknown types and lines
  that are not JSON, then `describe` as a barrier, then a fresh connection's `synthesize`.
It prints the statuses and error codes counted, the tracebacks the service logged, and whether
each door still answered a valid request at the end. It exits 1 if any answer was a 5xx, any
traceback was logged or a door stopped answering.

Run: .venv/bin/python scripts/fuzz_doors.py [--seed 1] [--requests 5000] [--events 5000] [--profile NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import logging
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from wyoming.client import AsyncTcpClient
from wyoming.event import async_read_event
from wyoming.info import Info
from wyoming.tts import Synthesize

from harness import doors
from harness.realtime import RunningServer, free_port
from voice.config import Config
from voice.engines import load_llm, load_stt, load_tts


class Tracebacks(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(record)


def fuzz_chat(port: int, count: int, seed: int) -> tuple[collections.Counter, bool]:
    statuses: collections.Counter = collections.Counter()
    for n, (path, body) in enumerate(doors.chat_requests(count, seed), 1):
        status, _ = doors.post(port, path, body)
        statuses[f"{path} {status}"] += 1
        if n % 500 == 0:
            print(f"  {n} requests sent", file=sys.stderr, flush=True)
    valid = json.dumps(doors.SHORT_HOME_ASSISTANT_CHAT | {"stream": False}).encode()
    status, reply = doors.post(port, "/api/chat", valid)
    return statuses, status == 200 and json.loads(reply).get("done") is True


async def fuzz_wyoming(port: int, count: int, seed: int) -> tuple[collections.Counter, bool]:
    codes: collections.Counter = collections.Counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for wire in doors.wyoming_lines(count, seed):
        writer.write(wire)
        await writer.drain()
    writer.write(doors.frame({"type": "describe"}))
    while True:
        event = await asyncio.wait_for(async_read_event(reader), 600)
        if event is None:
            codes["connection closed"] += 1
            break
        if Info.is_type(event.type):
            break
        codes[f"error {event.data.get('code')}" if event.type == "error" else event.type] += 1
    writer.close()
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(Synthesize(text="Hello.").event())
        while (event := await asyncio.wait_for(client.read_event(), 60)).type not in ("audio-stop", "error"):
            pass
    return codes, event.type == "audio-stop"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--profile", default="", help="a language model profile (default: the default); what is "
                        "checked comes before the model, and a valid request's prompt is evaluated whole")
    args = parser.parse_args()
    tracebacks = Tracebacks()
    logging.getLogger().addHandler(tracebacks)
    config = Config(threads=2, research="off", reply_tokens=2, temperature=0.0, llm_model=args.profile)
    wyoming_port = free_port()
    with tempfile.TemporaryDirectory() as data:
        server = RunningServer(replace(config, data_dir=data, wyoming_port=wyoming_port),
                               load_llm(config), load_stt(config), load_tts(config))
        try:
            started = time.perf_counter()
            statuses, chat_ok = fuzz_chat(server.port, args.requests, args.seed)
            chat_seconds = time.perf_counter() - started
            started = time.perf_counter()
            codes, wyoming_ok = asyncio.run(fuzz_wyoming(wyoming_port, args.events, args.seed))
            wyoming_seconds = time.perf_counter() - started
        finally:
            server.stop()
    print(f"chat APIs: {args.requests} requests, seed {args.seed}, {chat_seconds:.0f} s")
    for key, n in sorted(statuses.items()):
        print(f"  {key:<32} {n:>6}")
    print(f"  a valid request afterwards: {'answered' if chat_ok else 'NOT ANSWERED'}")
    print(f"wyoming: {args.events} events, seed {args.seed}, {wyoming_seconds:.0f} s")
    for key, n in sorted(codes.items()):
        print(f"  {key:<32} {n:>6}")
    print(f"  synthesize afterwards: {'answered' if wyoming_ok else 'NOT ANSWERED'}")
    print(f"tracebacks logged: {len(tracebacks.records)}")
    for record in tracebacks.records[:5]:
        print(f"  {record.getMessage()}: {record.exc_info[1]!r}")
    server_errors = sum(n for key, n in statuses.items() if int(key.rsplit(" ", 1)[1]) >= 500)
    internal = codes["error internal_error"] + codes["connection closed"]
    return 1 if server_errors or internal or tracebacks.records or not (chat_ok and wyoming_ok) else 0


if __name__ == "__main__":
    sys.exit(main())
