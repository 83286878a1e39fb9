"""`parlour replay`: a stored conversation through the fitting, showing what is kept and removed.

This is how the decision record verified itself: the next model turn's input (a JSON list of
OpenAI-shaped messages) is fitted to the context minus the reply reserve, measured with the
model's own tokenizer (or the characters/3 estimate with `--estimate`).
"""

from __future__ import annotations

import json
from http import HTTPStatus
from pathlib import Path

from fitting import FitResult, estimate, fit
from fitting.errors import ParlourError
from fitting.summary import summary_room
from models.chat_template import tool_call_text


class ReplayError(ParlourError, ValueError):
    """A replay file that is not a list of chat messages (told by `parlour replay` only)."""

    code, status = "invalid_replay", HTTPStatus.BAD_REQUEST


def load_messages(path: str | Path) -> list[dict]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReplayError(f"{path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ReplayError(f"{path} is not JSON: {error}") from None
    if isinstance(data, dict) and isinstance(data.get("messages"), list):
        data = data["messages"]
    if not isinstance(data, list) or not all(isinstance(m, dict) and "role" in m for m in data):
        raise ReplayError(f"{path}: expected a JSON list of chat messages, each with a role")
    return data


def replay(messages: list[dict], context: int, reserve: int, llm=None, summarize: bool = True) -> FitResult:
    """Fit `messages` with the fitting core, as one turn with nothing carried over: the service
    also keeps the previous turn's removals, a stored summary and a low-water mark, which a
    conversation read from a file does not have. With `llm`, measure and summarize with the model."""
    budget = context - reserve
    if budget <= 0:
        raise ReplayError(f"the reserve ({reserve}) leaves no room in a {context}-token context")
    if llm is None:
        return fit(messages, budget, estimate)
    room = summary_room(budget)  # a summary's notes, and a section worker's, are this long at most
    generate = (lambda prompt: llm.complete(prompt, max_tokens=room)) if summarize else None
    return fit(messages, budget, llm.measure, generate)


def _preview(message: dict, width: int = 60) -> str:
    text = message.get("content") or ""
    if message.get("tool_calls"):
        text = " ".join(tool_call_text(c) for c in message["tool_calls"]) + (f" {text}" if text else "")
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def report(messages: list[dict], result: FitResult, measured_with: str) -> str:
    """A table of every input message, kept or removed, with its tokens and the stage that took it."""
    stage_of = {i: step.stage for step in result.steps for i in step.removed}
    lines = [f"budget {result.budget} tokens, measured with {measured_with}", ""]
    lines.append(f"{'':8} {'#':>4}  {'role':<9} {'tokens':>6}  text")
    for index, message in enumerate(messages):
        stage = stage_of.get(index)
        status = "kept" if stage in (None, "condense", "cut") else "removed"
        tokens = result.message_tokens.get(index, "")
        note = f"  [{stage}]" if stage else ""
        lines.append(f"{status:<8} {index:>4}  {message.get('role', ''):<9} {tokens:>6}  {_preview(message)}{note}")
    kept = len(messages) - sum(1 for i in range(len(messages)) if i in result.removed)
    lines += ["", f"prompt: {result.prompt_tokens} tokens; kept {kept} of {len(messages)} messages"]
    for step in result.steps:
        removed = f" removed {step.removed}" if step.removed else ""
        detail = f" ({step.detail})" if step.detail else ""
        lines.append(f"  {step.stage}:{removed} -> {step.prompt_tokens} tokens{detail}")
    if result.summary:
        lines.append(f"summary of {result.summary.start}..{result.summary.end - 1}: {result.summary.text}")
    return "\n".join(lines)
