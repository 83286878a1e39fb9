"""One chat request, whichever API it came by: find its session, answer it with the turn engine.

`ChatRequest` is the request in the OpenAI chat shape (both APIs are parsed into it), `answer`
runs it: the conversation's session is found or made (voice.chat.thread), the turn engine
researches, fits and streams the reply as for any other front end, and the history the client is
left with is remembered. The events are the engine's own (voice.turns.events), less research,
which stays inside Parlour: `Delta`, `Calls` (the client's functions to run) and `Done`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus

import pydantic

from fitting.errors import ParlourError
from voice.chat.thread import open_thread, remember
from voice.turns.events import ApprovalAsked, Calls, Delta, Done, Researched, ToolsRan, TurnRequest
from voice.turns.service import Service
from voice.validation import explain

# A turn's events as the chat APIs send them: `answer` keeps research to itself.
ChatEvent = Delta | Calls | Done


class BadRequest(ParlourError, ValueError):
    """A request the API answers with its own error shape: 400 unless `status` says otherwise
    (404 for a model this service does not serve). `param` is the field at fault, if one is."""

    code, status = "invalid_request", HTTPStatus.BAD_REQUEST

    def __init__(self, message: str, param: str | None = None, status: HTTPStatus | None = None):
        super().__init__(message, status=status)
        self.param = param


def validated(model: type[pydantic.BaseModel] | pydantic.TypeAdapter, body: object, at: str = ""):
    """`body` (the field `at`, when it is part of a request) checked against `model`, a client
    package's own type, or `BadRequest` naming the field at fault. Integers take whole floats
    (`8192.0`), as Ollama's and OpenAI's servers do."""
    try:
        if isinstance(model, pydantic.TypeAdapter):
            return _read(model.validate_python(body), at)
        return model.model_validate(body)
    except pydantic.ValidationError as error:
        raise _bad(error, at) from None


def _read(value: object, at: str) -> object:
    """pydantic checks an `Iterable` field (the `openai` package's typed dicts have many) only as
    it is read: read each now, so that a bad item is a `BadRequest` here and not a bug later."""
    if isinstance(value, dict):
        return {key: _read(inner, f"{at}.{key}".lstrip(".")) for key, inner in value.items()}
    if not isinstance(value, Iterator):
        return value
    items: list = []
    try:
        for item in value:
            items.append(_read(item, f"{at}.{len(items)}".lstrip(".")))
    except pydantic.ValidationError as error:
        raise _bad(error, at) from None
    return items


def _bad(error: pydantic.ValidationError, at: str) -> BadRequest:
    problem = explain(error, at or "body")
    param = f"{at}.{problem.param}" if at and problem.param != at else problem.param
    return BadRequest(f"{param}: {problem.message}", param)


@dataclass
class ChatRequest:
    model: str
    messages: list[dict]  # OpenAI chat messages; tool calls' arguments as JSON text
    tools: list[dict] = field(default_factory=list)  # OpenAI function tool specs
    tool_choice: str | dict | None = None
    stream: bool = True
    max_tokens: int | None = None
    temperature: float | None = None
    device: str | None = None  # who is speaking, when the request says (voice.chat.thread)
    include_usage: bool = False  # OpenAI's stream_options.include_usage
    context: int | None = None  # Ollama's num_ctx: a smaller context than the service's is used
    # Earlier exchanges that called the client's functions stay in the prompt. Home Assistant's
    # calls act on the home and its tools read the state live, so its earlier commands go (voice/turns/engine.py).
    earlier_calls: bool = True


async def answer(service: Service, owner: str, request: ChatRequest) -> AsyncGenerator[ChatEvent, None]:
    """The reply's events. Closing the iterator early cancels the reply; what was sent is kept."""
    session_id = await asyncio.to_thread(open_thread, service.store, owner, request.messages,
                                         service.config.instructions, request.device)
    turn = TurnRequest(session_id, instructions=await asyncio.to_thread(service.store.instructions, session_id),
                       max_tokens=request.max_tokens, tools=request.tools, tool_choice=request.tool_choice,
                       temperature=request.temperature, earlier_calls=request.earlier_calls,
                       context=request.context)
    text: list[str] = []
    calls: list[dict] = []
    try:
        async for event in service.engine.respond(turn):
            match event:
                case Researched() | ToolsRan():  # the service's own work: the reply tells what it found
                    continue
                case ApprovalAsked():  # only a Realtime client's own MCP tools wait for approval
                    continue
                case Delta(piece):
                    text.append(piece)
                case Calls(called):
                    calls += called
                case Done():
                    reply = {"role": "assistant", "content": "".join(text), "tool_calls": calls}
                    await asyncio.to_thread(remember, service.store, owner, session_id,
                                            request.messages + [reply], request.device)
            yield event
    finally:
        turn.cancel.set()  # a no-op after `Done`; before it, the client left and the reply stops
