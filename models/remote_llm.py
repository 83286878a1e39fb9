"""The language model on an OpenAI-compatible server: llama.cpp's `llama-server`, vLLM, or
llama-cpp-python's `python -m llama_cpp.server`.

`RemoteLanguageModel` offers what the turn engine uses of `LanguageModel` (`stream`, `complete`,
`measure`, `count`, `tools_tokens`, `knows_tools`, `context`), so sessions, fitting and the protocols
do not change. Replies stream from `POST {llm_url}/chat/completions` with the fitted messages as
OpenAI chat messages (tool exchanges and tools included: the server renders them with the model's
own template). Each request asks the server to keep its prompt cached (`cache_prompt`) and, for
llama.cpp, in the same slot (`id_slot`) while the session is active: a session is known by its
prompt's first two messages, which fitting keeps stable.

Counting for fitting is exact where it can be: llama.cpp's own template and tokenizer through its
`/apply-template` and `/tokenize` (found by `connect`, with the context of one slot from `/props`),
else a local GGUF's tokenizer and chat template, loaded vocabulary-only (exact when it is the model
the server runs), else characters / 3. Cancelling a reply
closes its connection, which llama.cpp and vLLM take as the end of that generation.

Every failure (refused, timed out, an HTTP error, a stream cut short) is a `ModelServerError` with
a one-line message.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from http import HTTPStatus
from urllib.parse import urlsplit

from fitting.errors import ParlourError
from fitting.measure import estimate_message, estimate_text
from models.chat_template import CountCache, Message
from models.llm import LanguageModel
from models.reply import ReplyStream


class ModelServerError(ParlourError, RuntimeError):
    """The model server could not be reached or did not answer properly; the message says how."""

    code, status = "model_server_error", HTTPStatus.BAD_GATEWAY


_STUB = {"role": "system", "content": "."}
_STUB_QUESTION = {"role": "user", "content": "."}


class ServerTokenizer:
    """Counts with the server's own chat template and tokenizer: llama.cpp's `/apply-template` and
    `/tokenize`. A message's tokens are what it adds between a stub system message and a stub
    question (the question keeps a last assistant message from being rendered as a reply to
    continue, which llama.cpp does); counts are cached by the message's digest."""

    def __init__(self, model: RemoteLanguageModel, root_path: str):
        self.model, self.root = model, root_path
        self._counts = CountCache()
        self._stub: int | None = None

    def stub_tokens(self) -> int:
        if self._stub is None:
            self._stub = self.prompt_tokens([_STUB, _STUB_QUESTION])
        return self._stub

    def prompt_tokens(self, messages: list[Message], tools: list[dict] | None = None) -> int:
        body: dict = {"messages": [_wire(m) for m in messages]}
        if tools:
            body["tools"] = tools
        prompt = self.model.call(f"{self.root}/apply-template", body)["prompt"]
        return len(self.model.call(f"{self.root}/tokenize", {"content": prompt, "add_special": True,
                                                             "parse_special": True})["tokens"])

    def count_message(self, message: Message) -> int:
        return self._counts.get(message, lambda m: self.prompt_tokens([_STUB, m, _STUB_QUESTION]) - self.stub_tokens())


class RemoteLanguageModel:
    """A model on an OpenAI-compatible server (models.model.Model): it cannot shift or warm a cache
    that Parlour does not hold."""

    kv_shift = False
    warms = False
    approximate = 0

    def __init__(self, url: str, api_key: str = "", tokenizer: LanguageModel | None = None,
                 context: int = 8192, slots: int = 1, timeout: float = 120.0):
        parts = urlsplit(url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"llm_url must be an http(s) URL such as http://127.0.0.1:8080/v1, got {url!r}")
        self.url, self._parts, self._host = url.rstrip("/"), parts, parts.hostname
        self.backend = self.url
        self.api_key, self.tokenizer, self.context, self.timeout = api_key, tokenizer, context, timeout
        self.knows_tools = tokenizer.knows_tools if tokenizer else True
        self.name = f"{parts.netloc} ({tokenizer.path.name if tokenizer else 'remote model'})"
        self.measured_by = f"the tokenizer of {tokenizer.path.name}" if tokenizer else "characters / 3"
        self.prompt_overhead = tokenizer.prompt_overhead if tokenizer else 1
        self.server_tokenizer: ServerTokenizer | None = None  # set by connect() for llama.cpp
        self._slots: OrderedDict[str, int] = OrderedDict()  # prompt prefix -> llama.cpp slot, least recent first
        self._in_use: set[int] = set()
        self._slot_count = slots
        self._slot_lock = threading.Lock()

    def connect(self) -> None:
        """Ask the server what it is. llama.cpp's `/props` gives the context of one slot and the
        endpoints to count with its own template and tokenizer, which then come first."""
        root = self._parts.path.removesuffix("/v1")
        try:
            props = self.call(f"{root}/props", None, timeout=10)
        except ModelServerError:
            return
        settings = props.get("default_generation_settings") or {}
        if isinstance(settings.get("n_ctx"), int) and settings["n_ctx"] > 0:
            self.context = settings["n_ctx"]
        self.server_tokenizer = ServerTokenizer(self, root)
        self.measured_by = "the server's own template and tokenizer (llama.cpp's /apply-template and /tokenize)"

    def call(self, path: str, body: dict | None, timeout: float = 30.0) -> dict:
        """One JSON request to the server (GET without a body); failures are `ModelServerError`s."""
        connection = self._connection(timeout)
        try:
            connection.request("POST" if body is not None else "GET", path,
                               json.dumps(body).encode() if body is not None else None, self._headers())
            response = connection.getresponse()
            if response.status >= 400:
                raise ModelServerError(f"the model server answered HTTP {response.status} to {path}: "
                                       f"{_error_text(response)}")
            return json.loads(response.read())
        except (OSError, http.client.HTTPException, json.JSONDecodeError) as error:
            raise ModelServerError(f"the model server at {self.url} does not answer {path}: {error}") from None
        finally:
            connection.close()

    # Counting: the server's tokenizer, else a local GGUF's, else an estimate ------------------
    def count_message(self, message: Message) -> int:
        if self.server_tokenizer:
            return self.server_tokenizer.count_message(message)
        if self.tokenizer:
            return self.tokenizer.count_message(message)
        return estimate_message(message)

    def measure(self, messages: list[Message]) -> int:
        if self.server_tokenizer and messages and messages[0].get("role") == "system":
            # The first message with the template's framing, then what each other message adds.
            return self.server_tokenizer.prompt_tokens(messages[:1]) + sum(
                self.count_message(m) for m in messages[1:])
        return self.prompt_overhead + sum(self.count_message(m) for m in messages)

    def count(self, messages: list[Message], tools: list[dict] | None = None) -> int:
        if self.server_tokenizer:
            return self.server_tokenizer.prompt_tokens(messages, tools)
        if self.tokenizer:
            return self.tokenizer.count(messages, tools)
        return self.measure(messages) + self.tools_tokens(tools)

    def tools_tokens(self, tools: list[dict] | None) -> int:
        if not tools:
            return 0
        if self.server_tokenizer:
            return (self.server_tokenizer.prompt_tokens([_STUB, _STUB_QUESTION], tools)
                    - self.server_tokenizer.stub_tokens())
        if self.tokenizer:
            return self.tokenizer.tools_tokens(tools)
        return estimate_text(json.dumps(tools))

    # The server -------------------------------------------------------------------------------
    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        kind = http.client.HTTPSConnection if self._parts.scheme == "https" else http.client.HTTPConnection
        return kind(self._host, self._parts.port, timeout=timeout)

    def _headers(self) -> dict:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def health(self) -> dict:
        return {"backend": self.url, "model_server": self.ping(), "measured_by": self.measured_by}

    def ping(self, timeout: float = 3.0) -> str:
        """"answers", or why not, from `GET {llm_url}/models`."""
        connection = self._connection(timeout)
        try:
            connection.request("GET", f"{self._parts.path}/models", headers=self._headers())
            response = connection.getresponse()
            response.read()
            return "answers" if response.status < 400 else f"answers HTTP {response.status}"
        except (OSError, http.client.HTTPException) as error:
            return f"does not answer: {error or type(error).__name__}"
        finally:
            connection.close()

    def _slot(self, messages: list[Message]) -> int:
        """The slot this session's prompt was last in if it is free, else the least recently used free one."""
        key = hashlib.blake2b(json.dumps(messages[:2], sort_keys=True).encode(), digest_size=16).hexdigest()
        with self._slot_lock:
            slot = self._slots.get(key)
            if slot is None or slot in self._in_use:
                used = [s for s in self._slots.values() if s not in self._in_use]
                free = [s for s in range(self._slot_count) if s not in self._in_use and s not in self._slots.values()]
                slot = free[0] if free else used[0] if used else 0
                for other in [k for k, s in self._slots.items() if s == slot]:
                    del self._slots[other]
            self._slots[key] = slot
            self._slots.move_to_end(key)
            self._in_use.add(slot)
            return slot

    def stream(self, messages: list[Message], max_tokens: int = 256, temperature: float = 0.2,
               tools: list[dict] | None = None, open_with_call: bool = True, not_like: str = "",
               must_call: bool | str = False, apart: str | None = None) -> ReplyStream:
        """The reply, streamed from the server as it is iterated. `open_with_call` and `not_like` are
        the local model's first-token bans, and `apart` its evidence evaluated apart; a server offers
        no such control, so they are not sent
        (the turn engine still keeps a second attempt's calls out of the reply). `must_call` asks
        for a call with `tool_choice: "required"`, or, as a tool's name, for that tool's call."""
        body: dict = {"model": "parlour", "messages": [_wire(m) for m in messages], "max_tokens": max_tokens,
                      "temperature": temperature, "stream": True, "stream_options": {"include_usage": True},
                      "cache_prompt": True}
        if tools:
            body["tools"] = tools
            if isinstance(must_call, str):
                body["tool_choice"] = {"type": "function", "function": {"name": must_call}}
            elif must_call:
                body["tool_choice"] = "required"
        reply = ReplyStream()
        reply.stats.prompt_tokens = self.count(messages, tools)
        slot = self._slot(messages)
        body["id_slot"] = slot
        connection = self._connection(self.timeout)
        return reply.start(self._generate(connection, body, reply, slot), on_cancel=lambda: _abort(connection))

    def complete(self, messages: list[Message], max_tokens: int = 256, temperature: float = 0.2) -> str:
        return self.stream(messages, max_tokens, temperature).text()

    # The server's cache is not Parlour's to fill or trim (`warms` is false): nothing to do.
    def prefill(self, messages: list[Message], tools: list[dict] | None = None,
                stop: Callable[[], bool] = lambda: False, batch: int = 64, exact: bool = False,
                progress: Callable[[int], None] = lambda evaluated: None, apart: str | None = None) -> int:
        return 0

    def discard(self, messages: list[Message], tools: list[dict] | None = None, held: int | None = None) -> None:
        return None

    def _generate(self, connection: http.client.HTTPConnection, body: dict, reply: ReplyStream,
                  slot: int) -> Iterator[str]:
        stats = reply.stats
        stats.finish_reason = "length"
        calls: dict[int, dict] = {}
        try:
            try:
                connection.request("POST", f"{self._parts.path}/chat/completions", json.dumps(body).encode(),
                                   self._headers())
                response = connection.getresponse()
            except (OSError, http.client.HTTPException) as error:
                raise ModelServerError(f"the model server at {self.url} does not answer: {error}") from None
            if response.status >= 400:
                raise ModelServerError(f"the model server answered HTTP {response.status}: {_error_text(response)}")
            for data in _events(response, reply):
                if data.get("error"):
                    raise ModelServerError(f"the model server failed: {_message(data['error'])}")
                _usage(data, stats)
                for choice in data.get("choices") or []:
                    delta = choice.get("delta") or {}
                    for call in delta.get("tool_calls") or []:
                        _add_call(calls, call)
                    if choice.get("finish_reason"):
                        stats.finish_reason = "stop" if choice["finish_reason"] in ("stop", "tool_calls") else \
                            choice["finish_reason"]
                    if piece := delta.get("content"):
                        stats.completion_tokens += 1  # pieces until the server's usage says otherwise
                        yield piece
            if reply.cancelled:
                stats.finish_reason = "cancelled"
            for call in calls.values():  # structured calls, written as the one parser reads them
                yield "<tool_call>\n" + json.dumps({"name": call["name"], "arguments": _arguments(call)}) + \
                    "\n</tool_call>"
        except (OSError, http.client.HTTPException) as error:
            if not reply.cancelled:
                raise ModelServerError(f"the model server's stream broke off: {error or type(error).__name__}") \
                    from None
            stats.finish_reason = "cancelled"
        finally:
            connection.close()
            with self._slot_lock:
                self._in_use.discard(slot)
            stats.evaluated_tokens = stats.prompt_tokens - stats.cached_tokens


def _wire(message: Message) -> Message:
    """A message as OpenAI's API has it: content a string, tool-call arguments a JSON string."""
    wired = {**message, "content": message.get("content") or ""}
    if message.get("tool_calls"):
        wired["tool_calls"] = [
            {**call, "function": {**call["function"], "arguments": call["function"]["arguments"]
                                  if isinstance(call["function"].get("arguments"), str)
                                  else json.dumps(call["function"].get("arguments") or {})}}
            for call in message["tool_calls"]]
    return wired


def _abort(connection: http.client.HTTPConnection) -> None:
    """Close a streaming connection from another thread: the blocked read returns at once."""
    sock = connection.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _events(response: http.client.HTTPResponse, reply: ReplyStream) -> Iterator[dict]:
    """The JSON of each server-sent event until `[DONE]`, the end of the stream, or a cancel."""
    finished = False
    while not reply.cancelled:
        line = response.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            finished = True
            break
        try:
            yield json.loads(data)
        except json.JSONDecodeError:
            raise ModelServerError(f"the model server sent an event that is not JSON: {data[:80]!r}") from None
    if not finished and not reply.cancelled:
        raise ModelServerError("the model server's stream ended before [DONE]")


def _usage(data: dict, stats) -> None:
    """Token figures the server reports: OpenAI's `usage` (vLLM, llama.cpp) or llama.cpp's `timings`."""
    usage = data.get("usage") or {}
    if usage.get("prompt_tokens"):
        stats.prompt_tokens = usage["prompt_tokens"]
    if usage.get("completion_tokens"):
        stats.completion_tokens = usage["completion_tokens"]
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    timings = data.get("timings") or {}
    if cached is None and "cache_n" in timings:
        cached = timings["cache_n"]
    if cached is not None:
        stats.cached_tokens = cached


def _add_call(calls: dict[int, dict], delta: dict) -> None:
    call = calls.setdefault(delta.get("index", len(calls)), {"name": "", "arguments": ""})
    function = delta.get("function") or {}
    call["name"] += function.get("name") or ""
    arguments = function.get("arguments")
    call["arguments"] += arguments if isinstance(arguments, str) else json.dumps(arguments) if arguments else ""


def _arguments(call: dict) -> object:
    try:
        return json.loads(call["arguments"] or "{}")
    except json.JSONDecodeError:
        return call["arguments"]


def _message(error: object) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


def _error_text(response: http.client.HTTPResponse) -> str:
    body = response.read(4096).decode("utf-8", "replace")
    try:
        return " ".join(_message(json.loads(body).get("error") or json.loads(body).get("detail") or body).split())
    except (json.JSONDecodeError, AttributeError):
        return " ".join(body.split())[:300] or response.reason
