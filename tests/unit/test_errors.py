"""Errors that carry their code (fitting/errors.py): every kind a client is told states its Realtime
code and HTTP status, and the front ends tell a kind with what it carries, through the functions
they answer with."""

from __future__ import annotations

import importlib
import json
import pkgutil
from http import HTTPStatus

import pytest

import fitting
import models
import voice
from fitting import FitError
from fitting.errors import ParlourError
from models.remote_llm import ModelServerError
from models.reply import ContextOverflow
from voice import http_api
from voice.chat import routes
from voice.chat.turn import BadRequest
from voice.realtime.client_events import BadEvent
from voice.realtime.connection import response_failure
from voice.store.sessions import UnknownSession
from voice.turns.engine import ServerBusy


def _kinds() -> list[type[ParlourError]]:
    """Every ParlourError kind in fitting/, models/ and voice/ (each module imported, so none is missed)."""
    for package in (fitting, models, voice):
        for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            importlib.import_module(module.name)
    kinds, unseen = [], [ParlourError]
    while unseen:
        for kind in unseen.pop().__subclasses__():
            kinds.append(kind)
            unseen.append(kind)
    return kinds


@pytest.mark.parametrize("kind", _kinds(), ids=lambda kind: f"{kind.__module__}.{kind.__qualname__}")
def test_every_kind_states_its_code_and_status(kind: type[ParlourError]) -> None:
    assert isinstance(kind.code, str) and kind.code
    assert isinstance(kind.status, HTTPStatus) and 400 <= kind.status <= 599


def test_kinds_stay_the_standard_errors_callers_catch() -> None:
    assert issubclass(UnknownSession, KeyError) and issubclass(ModelServerError, RuntimeError)
    assert all(issubclass(kind, ValueError) for kind in (FitError, ContextOverflow, BadRequest, BadEvent))
    assert str(UnknownSession("sess_x")) == "no such session: sess_x"  # not KeyError's quoted id


def test_an_instance_overrides_its_kinds_code_or_status() -> None:
    assert BadRequest("model 'x' not found", "model", HTTPStatus.NOT_FOUND).status == HTTPStatus.NOT_FOUND
    assert BadRequest("x").status == BadRequest.status == HTTPStatus.BAD_REQUEST
    assert BadEvent("not JSON", "invalid_json").code == "invalid_json" and BadEvent("x").code == "invalid_request"


# What may end a turn, each with its Realtime code and HTTP status (the chat APIs once answered a
# model's context overflow with 500).
TURN_PROBLEMS = [(ServerBusy, "server_busy", 503), (FitError, "cannot_respond", 400),
                 (ContextOverflow, "cannot_respond", 400), (ModelServerError, "model_server_error", 502)]


@pytest.mark.parametrize(("kind", "code", "status"), TURN_PROBLEMS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_a_problem_that_ends_a_turn_is_told_by_each_front_end(kind, code: str, status: int) -> None:
    problem = kind("the reason")
    message, told = response_failure(problem)  # Realtime: the failed response's error
    assert told == code and message.endswith("the reason")
    assert message.startswith("the server is busy: ") == (kind is ServerBusy)
    openai = routes.failed_reply(problem, is_ollama=False)  # the chat APIs, before the reply begins
    assert openai.status == status
    assert json.loads(openai.body)["error"] == {"message": "the reason", "param": None, "code": None,
                                                "type": "server_error" if status >= 500 else "invalid_request_error"}
    ollama = routes.failed_reply(problem, is_ollama=True)
    assert (ollama.status, json.loads(ollama.body)) == (status, {"error": "the reason"})


def test_the_http_door_tells_a_kind_with_its_status() -> None:
    missing = http_api.problem_reply(UnknownSession("sess_x"))
    assert (missing.status, json.loads(missing.body)) == (404, {"error": "no such session: sess_x"})
    too_large = http_api.BodyTooLarge("the body is over 10 bytes")
    reply = http_api.status_reply(too_large.status, too_large)
    assert (reply.status, reply.body) == (413, b"413 Request Entity Too Large: the body is over 10 bytes\n")
