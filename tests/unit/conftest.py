"""The unit tier: everything under tests/unit is marked `unit`, and no test here may load a model.

The fixtures of tests/conftest.py are made when a test asks for them, so importing it (pytest does,
for every test below tests/) loads nothing. A unit test that asks for an engine's fixture, directly
or through another fixture, fails before any is made; one that builds an engine itself fails too.
"""

from __future__ import annotations

import pytest

from harness.knowledge.questions import index_bases
from models.llm import LanguageModel
from models.stt import SpeechToText
from models.tts import TextToSpeech
from voice.knowledge.base import KnowledgeBase

# The fixtures of tests/conftest.py that load an engine; those built on them (`speech`, `server`,
# `make_server`) bring these into a test's fixture closure too.
ENGINE_FIXTURES = frozenset({"llm", "tiny_llm", "profile_llm", "stt", "tts"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unit = config.rootpath / "tests" / "unit"
    for item in items:
        if item.path.is_relative_to(unit):
            item.add_marker(pytest.mark.unit)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before any fixture is made: a unit test that would load an engine fails here."""
    wanted = ENGINE_FIXTURES.intersection(getattr(item, "fixturenames", ()))
    if wanted:
        pytest.fail(f"the unit tier loads no model, and this test asks for {', '.join(sorted(wanted))}: "
                    "move it out of tests/unit or give it tests/unit/fake_model.py", pytrace=False)


@pytest.fixture(autouse=True)
def no_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine built in a test's own code fails it as its fixture would."""
    def refuse(self, *args, **kwargs) -> None:
        pytest.fail(f"the unit tier loads no model, and this test built a {type(self).__name__}", pytrace=False)

    for engine in (LanguageModel, SpeechToText, TextToSpeech):
        monkeypatch.setattr(engine, "__init__", refuse)


@pytest.fixture(scope="session")
def evaluation_knowledge(tmp_path_factory) -> KnowledgeBase:
    """The research evaluation's two knowledge bases (the license texts and a household's notes),
    indexed together as a user with both would have them."""
    work = tmp_path_factory.mktemp("knowledge")
    return index_bases(KnowledgeBase(work / "knowledge.sqlite3"), work)
