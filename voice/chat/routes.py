"""The chat APIs' HTTP routes: Ollama's under `/api/`, OpenAI's under `/v1/`. Both parse into one
`ChatRequest` and are answered by `voice.chat.turn.answer`; only the shapes differ.

Every route needs a valid API key when keys are configured (`Authorization: Bearer KEY`), as the
websocket does. The model is named `parlour` (Ollama: `parlour:latest`), whichever profile serves,
so a client's setting survives a change of profile; `/api/show` says which model it is.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from http import HTTPStatus
from pathlib import Path

from fitting.errors import ParlourError
from voice import http_api
from voice.chat import ollama, openai_chat
from voice.chat.turn import BadRequest, ChatEvent, ChatRequest, answer
from voice.turns.events import Calls, Delta, Done
from voice.turns.figures import TurnFigures
from voice.turns.service import Service

MODEL = "parlour"
OLLAMA_MODEL = f"{MODEL}:latest"
PATHS = ("/api/version", "/api/tags", "/api/ps", "/api/show", "/api/chat", "/api/pull",
         "/v1/models", "/v1/chat/completions")
_METHODS = {"/api/version": "GET", "/api/tags": "GET", "/api/ps": "GET", "/v1/models": "GET"}


def failed_reply(problem: ParlourError, is_ollama: bool) -> http_api.Reply:
    """A chat request that failed before its reply began: the status the problem carries, the
    message in the API's error shape."""
    message = str(problem).strip("'\"")
    return http_api.json_reply(problem.status, ollama.error(message) if is_ollama else openai_chat.error(
        message, "server_error" if problem.status >= 500 else "invalid_request_error"))


def _unknown_model(name: object, served: str) -> BadRequest:
    return BadRequest(f"model '{name}' not found: this service serves {served}, and downloads nothing",
                      "model", HTTPStatus.NOT_FOUND)


def _served(name: str) -> bool:
    return name in (MODEL, OLLAMA_MODEL)


async def serve(service: Service, request: http_api.Request) -> http_api.Reply:
    is_ollama = request.path.startswith("/api/")

    def refuse(status: HTTPStatus, message: str, param: str | None = None) -> http_api.Reply:
        return http_api.json_reply(status, ollama.error(message) if is_ollama else openai_chat.error(
            message, "authentication_error" if status == HTTPStatus.UNAUTHORIZED else "invalid_request_error",
            param=param))

    owner = service.owner_of_key(http_api.presented_key(request.header("authorization") or ""))
    if owner is None:
        return refuse(HTTPStatus.UNAUTHORIZED, "a valid API key is required")
    method = _METHODS.get(request.path, "POST")
    if request.method != method:
        return refuse(HTTPStatus.METHOD_NOT_ALLOWED, f"{request.path} takes {method}")
    try:
        body = _body(request) if method == "POST" else None
        if request.path == "/api/version":
            from importlib.metadata import version

            return http_api.json_reply(HTTPStatus.OK, {"version": version("parlour")})
        if request.path in ("/api/tags", "/api/ps"):
            return http_api.json_reply(HTTPStatus.OK, {"models": [_tag(service)]})
        if request.path == "/v1/models":
            return http_api.json_reply(HTTPStatus.OK, {"object": "list", "data": [
                {"id": MODEL, "object": "model", "created": int(service.started), "owned_by": "parlour"}]})
        if request.path in ("/api/show", "/api/pull"):
            if not isinstance(body, dict):
                raise BadRequest("the body must be an object naming a model", "body")
            name = body.get("model") or body.get("name")
            if not isinstance(name, str) or not _served(name):
                raise _unknown_model(name, OLLAMA_MODEL)
            if request.path == "/api/show":
                return http_api.json_reply(HTTPStatus.OK, _show(service))
            if body.get("stream", True) is False:
                return http_api.json_reply(HTTPStatus.OK, {"status": "success"})
            return http_api.Reply(HTTPStatus.OK, content_type="application/x-ndjson",
                                  stream=_lines([{"status": "success"}]))
        if request.path == "/api/chat":
            return await _chat(service, owner, ollama.chat_request(body), True)
        return await _chat(service, owner, openai_chat.chat_request(body), False)
    except BadRequest as problem:
        return refuse(problem.status, str(problem), problem.param)


def _body(request: http_api.Request) -> object:
    try:
        return request.json()
    except ValueError as problem:
        raise BadRequest(str(problem), "body") from None


async def _lines(items: list[dict]) -> AsyncGenerator[bytes, None]:
    for item in items:
        yield ollama.line(item)


def _details(service: Service) -> dict:
    return {"format": "gguf", "family": Path(service.llm.name).stem.split("-")[0],
            "parameter_size": "", "quantization_level": ""}


def _tag(service: Service) -> dict:
    path = getattr(service.llm, "path", None)
    return {"name": OLLAMA_MODEL, "model": OLLAMA_MODEL, "modified_at": ollama.now(),
            "size": path.stat().st_size if path else 0, "digest": "", "details": _details(service)}


def _show(service: Service) -> dict:
    context = service.engine.context
    return {"modelfile": "", "parameters": f"num_ctx {context}", "template": "", "details": _details(service),
            "model_info": {"general.name": service.llm.name, "parlour.context_length": context,
                           "parlour.backend": "local" if service.llm.backend == "local" else "remote"},
            "capabilities": ["completion", "tools"], "modified_at": ollama.now()}


async def _chat(service: Service, owner: str, chat: ChatRequest, is_ollama: bool) -> http_api.Reply:
    if not service.config.device_memory:
        chat.device = None
    if not _served(chat.model):
        raise _unknown_model(chat.model, OLLAMA_MODEL if is_ollama else MODEL)
    started = time.perf_counter()
    if is_ollama and not any(m["role"] in ("user", "tool") for m in chat.messages):
        # Ollama loads a model when asked to chat with no messages: this one is always loaded.
        return http_api.json_reply(HTTPStatus.OK, {**ollama.final(OLLAMA_MODEL, TurnFigures(), started),
                                                   "done_reason": "load"})
    events = answer(service, owner, chat)
    try:
        first = await anext(events)  # a request that fails before it starts gets its status
    except ParlourError as problem:
        return failed_reply(problem, is_ollama)
    if not chat.stream:
        return await _whole(first, events, started, is_ollama)
    render = _ollama_stream if is_ollama else _openai_stream
    return http_api.Reply(HTTPStatus.OK, content_type="application/x-ndjson" if is_ollama else "text/event-stream",
                          stream=render(first, events, chat, started))


async def _whole(first: ChatEvent, events: AsyncGenerator[ChatEvent, None], started: float,
                 is_ollama: bool) -> http_api.Reply:
    """A reply not streamed: all of it, then one JSON body (an error met on the way is its status)."""
    text, calls = [], []
    try:
        async for event in _all(first, events):
            match event:
                case Delta(piece):
                    text.append(piece)
                case Calls(called):
                    calls += called
                case Done():
                    figures = event.figures
    except ParlourError as problem:
        return http_api.json_reply(problem.status, ollama.error(str(problem)) if is_ollama
                                   else openai_chat.error(str(problem), "server_error"))
    finally:
        await events.aclose()
    if is_ollama:
        return http_api.json_reply(HTTPStatus.OK, ollama.final(OLLAMA_MODEL, figures, started, "".join(text), calls))
    return http_api.json_reply(HTTPStatus.OK, openai_chat.Completion(MODEL).whole("".join(text), calls, figures))


async def _all(first: ChatEvent, events: AsyncIterator[ChatEvent]) -> AsyncIterator[ChatEvent]:
    yield first
    async for event in events:
        yield event


async def _ollama_stream(first: ChatEvent, events: AsyncGenerator[ChatEvent, None], chat: ChatRequest,
                         started: float) -> AsyncGenerator[bytes, None]:
    try:
        async for event in _all(first, events):
            yield ollama.line(ollama.final(OLLAMA_MODEL, event.figures, started) if isinstance(event, Done)
                              else ollama.piece(OLLAMA_MODEL, event))
    except ParlourError as problem:  # the stream has begun: the error is its last line
        yield ollama.line(ollama.error(str(problem)))
    finally:
        await events.aclose()


async def _openai_stream(first: ChatEvent, events: AsyncGenerator[ChatEvent, None], chat: ChatRequest,
                         started: float) -> AsyncGenerator[bytes, None]:
    completion = openai_chat.Completion(MODEL)
    yield openai_chat.event(completion.opening())
    try:
        async for event in _all(first, events):
            if isinstance(event, Done):
                yield openai_chat.event(completion.closing(event.figures))
                if chat.include_usage:
                    yield openai_chat.event(completion.usage_chunk(event.figures))
            else:
                yield openai_chat.event(completion.piece(event))
    except ParlourError as problem:
        yield openai_chat.event(openai_chat.error(str(problem), "server_error"))
    finally:
        await events.aclose()
    yield openai_chat.event("[DONE]")
