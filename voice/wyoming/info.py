"""Wyoming's `describe`: honest names of the three programs Parlour serves and the models behind them."""

from __future__ import annotations

import functools
from importlib.metadata import version

from wyoming.info import AsrModel, AsrProgram, Attribution, HandleModel, HandleProgram, Info, TtsProgram, TtsVoice

from voice.turns.service import Service


@functools.cache
def _version(package: str) -> str:
    """Read from the installed package's metadata once: a file read is no work for the event loop."""
    return version(package)


def describe(service: Service) -> Info:
    """Honest names of the three programs and the models behind them."""
    ours = _version("parlour")
    parlour = Attribution(name="Parlour", url=f"http://{service.config.host}:{service.port}/")  # its own page
    whisper = AsrModel(name=service.stt.path.name, description="faster-whisper (CTranslate2, int8)",
                       attribution=Attribution("OpenAI Whisper via faster-whisper", "https://github.com/SYSTRAN/faster-whisper"),
                       installed=True, version=_version("faster-whisper"), languages=[service.stt.language])
    voice = TtsVoice(name=service.tts.name, description=f"Piper voice {service.tts.name}",
                     attribution=Attribution("Piper", "https://github.com/OHF-Voice/piper1-gpl"),
                     installed=True, version=_version("piper-tts"), languages=[service.tts.name.split("-")[0]])
    assistant = HandleModel(name=service.llm.name, description="the language model, with memory",
                            attribution=parlour, installed=True, version=ours, languages=["en"])
    return Info(
        asr=[AsrProgram(name="parlour-asr", description="Parlour speech-to-text", attribution=parlour,
                        installed=True, version=ours, models=[whisper], supports_transcript_streaming=True)],
        tts=[TtsProgram(name="parlour-tts", description="Parlour speech", attribution=parlour, installed=True,
                        version=ours, voices=[voice], supports_synthesize_streaming=True)],
        handle=[HandleProgram(name="parlour", description="Parlour, a local assistant that remembers",
                              attribution=parlour, installed=True, version=ours, models=[assistant],
                              supports_handled_streaming=True,
                              # With an MCP server's tools (Home Assistant's own), a transcript is acted on.
                              supports_home_control=service.engine.runs_tools)],
    )
