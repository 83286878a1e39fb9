"""The `parlour` command line.

Every command takes the configuration flags (`--config`, `--llm-model`, `--context`, ...); see
`voice.config` for how they combine with the file and the environment. Errors a user can fix print
one line, `parlour: error: ...`, and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from fitting.errors import ParlourError
from models.audio import RATE, AudioError, read_wav, write_wav
from models.chat_template import tool_call_text
from voice.clients.chat import ChatError
from voice.config import CHOICES, KEYS, help_text, load_config
from voice.replay import load_messages
from voice.store.sessions import UnknownSession


def _config_flags() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("configuration (flags override PARLOUR_* variables, which override the file)")
    # SUPPRESS: a nested command's parser must not reset a flag the outer one already read.
    group.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help="TOML configuration file")
    for key, kind in KEYS.items():
        group.add_argument(
            "--" + key.replace("_", "-"), dest=key, metavar=key.split("_")[-1].upper(),
            type={"int": int, "float": float}.get(kind, str), help=help_text(key),
            choices=CHOICES.get(key), default=argparse.SUPPRESS,
        )
    return parent


def build_parser() -> argparse.ArgumentParser:
    flags = _config_flags()
    parser = argparse.ArgumentParser(prog="parlour", description="A local, private voice assistant.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    commands.add_parser("models", parents=[flags],
                        help="list the language model profiles, then load each engine in use and show its size and "
                             "load time")
    commands.add_parser("config", parents=[flags],
                        help="show the effective configuration and where each value came from")

    say = commands.add_parser("say", parents=[flags], help="speak TEXT into a WAV file with Piper")
    say.add_argument("text", metavar="TEXT")
    say.add_argument("-o", "--output", required=True, metavar="FILE.wav")
    say.add_argument("--rate", type=int, default=RATE, help=f"sample rate of the file (default: {RATE})")
    say.add_argument("--speed", type=float, default=1.0, help="speaking speed, 1.0 is the voice's own")

    transcribe = commands.add_parser("transcribe", parents=[flags], help="print what is said in a WAV file")
    transcribe.add_argument("wav", metavar="FILE.wav")

    replay = commands.add_parser(
        "replay", parents=[flags], help="fit a stored conversation (a JSON file or a session id) and show what is kept"
    )
    replay.add_argument("file", metavar="FILE.json|SESSION")
    replay.add_argument("--reserve", type=int, default=1024, help="tokens kept free for the reply (default: 1024)")
    replay.add_argument("--estimate", action="store_true", help="count characters/3 instead of loading the model")
    replay.add_argument("--no-summarize", action="store_true", help="drop old exchanges instead of summarizing them")
    replay.add_argument("--json", action="store_true", help="print one JSON object: prompt_tokens, messages, steps")

    commands.add_parser("serve", parents=[flags],
                        help="serve voice and text on ws://HOST:PORT/v1/realtime and the chat APIs on http://HOST:PORT")

    chat = commands.add_parser("chat", parents=[flags], help="chat with a running server in the terminal")
    chat.add_argument("--session", metavar="ID", help="resume a stored session")
    chat.add_argument("--api-key", metavar="KEY", help="the key to present (default: PARLOUR_API_KEY)")

    talk = commands.add_parser(
        "talk", parents=[flags], help="push-to-talk with the microphone: Enter or space starts, again sends",
        description="Push-to-talk: press Enter or space to start talking and press it again to send "
        "(a terminal cannot see a key being released). Pressing the key or speaking up during the reply "
        "interrupts it. q quits.")
    talk.add_argument("--session", metavar="ID", help="resume a stored session")
    talk.add_argument("--api-key", metavar="KEY", help="the key to present (default: PARLOUR_API_KEY)")
    talk.add_argument("--device", metavar="DEVICE", help="input and output device, by number or name")
    talk.add_argument("--list-devices", action="store_true", help="list the audio devices and exit")
    talk.add_argument("--input", metavar="FILE.wav", help="send this recording as one question (no audio device)")
    talk.add_argument("--output", metavar="FILE.wav", help="with --input: write the spoken reply here")

    index = commands.add_parser("index", parents=[flags],
                                help="add a folder of text, Markdown and HTML files to the knowledge base")
    index.add_argument("folder", metavar="DIR")

    sessions = commands.add_parser("sessions", parents=[flags],
                                   help="list, show, export, import or delete stored sessions")
    actions = sessions.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("list", parents=[flags], help="sessions, newest first")
    for name, text in (("show", "print a session's messages"), ("delete", "delete a session"),
                       ("export", "print a session as a JSON list of chat messages (what replay reads)")):
        action = actions.add_parser(name, parents=[flags], help=text)
        action.add_argument("session", metavar="ID")
    action = actions.add_parser("import", parents=[flags], help="store a JSON list of chat messages as a new session")
    action.add_argument("file", metavar="FILE.json")
    return parser


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def cmd_models(config, args) -> None:
    from models.engine import cpu_features
    from models.llm import LanguageModel
    from models.weights import PROFILES, llm_profile
    from voice.engines import ENGINES, describe, load_remote_llm, timed_load

    in_use = llm_profile(config.llm_model)
    print("language model profiles (llm_model):")
    for profile in PROFILES.values():
        mark = "*" if profile is in_use else " "
        state = "installed" if profile.installed() else f"not installed: {profile.install_hint}"
        print(f" {mark} {profile.name:<20} {profile.size / 1e6:>7.1f}MB  {profile.description}; {state}")
    print("in use:")
    for engine in ENGINES:
        if engine == "llm" and config.llm_url:
            remote = load_remote_llm(config)
            print(f"  llm  on the server at {remote.url} ({remote.ping()}); "
                  f"prompts measured with {remote.measured_by}")
            continue
        path, loaded, seconds = timed_load(engine, config)
        print(f"  {engine:<4} {_size(path) / 1e6:>7.1f}MB {seconds:>6.2f}s  {describe(engine, config)}  {path}")
        if isinstance(loaded, LanguageModel):
            print(f"       llama.cpp uses {' '.join(cpu_features())}; {loaded.engine.describe()}")


def cmd_config(config, args) -> None:
    for key in KEYS:
        value = getattr(config, key)
        secret = key in ("api_keys", "llm_api_key") and value
        shown = f"<{len(value) if key == 'api_keys' else 1} key(s)>" if secret else repr(value)  # never print secrets
        print(f"{key:<{max(map(len, KEYS))}} = {shown:<50} ({config.sources[key]})")


def cmd_say(config, args) -> None:
    from voice.engines import load_tts

    if not args.text.strip():
        raise AudioError("nothing to say: TEXT is empty")
    if args.rate < 8_000 or args.rate > 192_000:
        raise AudioError(f"--rate must be between 8000 and 192000, got {args.rate}")
    if args.speed <= 0:
        raise AudioError(f"--speed must be positive, got {args.speed}")
    pcm = b"".join(load_tts(config).synthesize(args.text, rate=args.rate, speed=args.speed))
    write_wav(args.output, pcm, args.rate)
    print(f"{args.output}: {len(pcm) / 2 / args.rate:.2f} s at {args.rate} Hz")


def cmd_transcribe(config, args) -> None:
    from voice.engines import load_stt

    samples, rate = read_wav(args.wav)
    print(load_stt(config).transcribe(samples, sample_rate=rate).text)


def cmd_replay(config, args) -> None:
    from voice.replay import replay, report

    if Path(args.file).exists() or args.file.endswith(".json"):
        messages = load_messages(args.file)
    else:
        messages = _store(config).transcript(_session(config, args.file))
    llm = None
    if not args.estimate:
        from voice.engines import load_llm

        llm = load_llm(config)
    result = replay(messages, config.context, args.reserve, llm, summarize=not args.no_summarize)
    if args.json:
        print(json.dumps(result.to_json(), ensure_ascii=False))
    else:
        print(report(messages, result, "characters / 3" if llm is None else llm.measured_by))


def _store(config):
    from voice.store.sessions import SessionStore

    return SessionStore(config.database)


def _session(config, session_id: str) -> str:
    if not _store(config).exists(session_id):
        raise UnknownSession(session_id)
    return session_id


def cmd_serve(config, args) -> None:
    import asyncio

    from voice.engines import engine_settings
    from voice.server import Service
    from voice.watch import serve_watched

    # The service runs in a watched child process: a crash in native code is one line, not silence.
    serve_watched(Path(config.data_dir).expanduser() / "crash.log", engine_settings(config).describe())
    service = Service.load(config)
    if config.llm_url:
        print(f"the language model is on the server at {config.llm_url} ({service.llm.ping()}); "
              f"prompts are measured with {service.llm.measured_by}", file=sys.stderr, flush=True)
    if config.host not in ("127.0.0.1", "localhost", "::1") and not config.api_keys:
        print(f"parlour: warning: listening on {config.host} without API keys: anyone who can reach it may use it",
              file=sys.stderr)
    wyoming = f" and tcp://{config.host}:{config.wyoming_port} (Wyoming)" if config.wyoming_port else ""

    def ready(port: int) -> None:  # the bound port: --port 0 picks a free one
        print(f"Parlour is listening on ws://{config.host}:{port}/v1/realtime, the chat APIs on "
              f"http://{config.host}:{port} (/api/chat, /v1/chat/completions){wyoming}", flush=True)

    asyncio.run(service.serve(ready=ready))


def cmd_chat(config, args) -> None:
    import asyncio
    import os

    from voice.clients.chat import chat, realtime_url

    key = args.api_key or os.environ.get("PARLOUR_API_KEY")
    asyncio.run(chat(realtime_url(config.host, config.port, args.session), key))


def cmd_talk(config, args) -> None:
    import asyncio
    import os

    from voice.clients.chat import realtime_url
    from voice.clients.talk import list_devices, one_turn, talk

    if args.list_devices:
        print(list_devices())
        return
    if bool(args.input) != bool(args.output):
        raise ChatError("--input and --output go together")
    key = args.api_key or os.environ.get("PARLOUR_API_KEY")
    url = realtime_url(config.host, config.port, args.session)
    if args.input:
        asyncio.run(one_turn(url, key, args.input, args.output))
    else:
        device = int(args.device) if args.device and args.device.isdigit() else args.device
        asyncio.run(talk(url, key, device))


def cmd_index(config, args) -> None:
    from voice.knowledge.base import KnowledgeBase

    knowledge = KnowledgeBase(config.knowledge_path)
    width = 30

    def progress(done: int, total: int, path: str) -> None:
        filled = width * done // max(1, total)
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} files", end="", file=sys.stderr, flush=True)

    report = knowledge.index(args.folder, progress)
    print(file=sys.stderr)
    files, chunks = knowledge.size()
    print(f"{report.added} added, {report.updated} updated, {report.unchanged} unchanged, {report.removed} removed; "
          f"{files} files in {chunks} chunks at {knowledge.path}")


def cmd_sessions(config, args) -> None:
    store = _store(config)
    if args.action == "list":
        for info in store.list():
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.updated))
            print(f"{info.id}  {when}  {info.messages:>4} messages  {info.title}")
    elif args.action == "show":
        for stored in store.messages(_session(config, args.session), deleted=True):
            message = stored.message
            text = message.get("content") or " ".join(tool_call_text(c) for c in message.get("tool_calls") or [])
            status = "" if stored.status == "complete" else f" ({stored.status})"
            print(f"{message['role']}{status}: {text}")
    elif args.action == "export":
        print(json.dumps(store.transcript(_session(config, args.session)), ensure_ascii=False, indent=1))
    elif args.action == "import":
        session_id = store.import_messages(load_messages(args.file), default_instructions=config.instructions)
        print(session_id)
    elif args.action == "delete":
        store.delete(_session(config, args.session))
        print(f"deleted {args.session}")


COMMANDS = {
    "models": cmd_models, "config": cmd_config, "say": cmd_say, "transcribe": cmd_transcribe,
    "replay": cmd_replay, "serve": cmd_serve, "chat": cmd_chat, "talk": cmd_talk, "index": cmd_index,
    "sessions": cmd_sessions,
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = load_config({key: getattr(args, key, None) for key in KEYS}, config_file=getattr(args, "config", None))
        COMMANDS[args.command](config, args)
    except (ParlourError, ChatError, OSError) as error:  # the service's errors, the client's, the system's
        print(f"parlour: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
