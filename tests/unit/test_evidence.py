"""What a spoken turn's evidence holds: the sentences that answer, found for the questions as the
evaluation's unseen voices were heard, on the evaluation's knowledge bases indexed for real.

Tokens are counted as 4 characters each, about what the model's tokenizer counts for English, under
the default bound."""

from __future__ import annotations

import pytest

from voice.config import Config
from voice.knowledge.base import asked_terms, fts_query, telling_terms
from voice.knowledge.research import Research, _table_rows


@pytest.fixture(scope="module")
def research(evaluation_knowledge) -> Research:
    return Research("auto", evaluation_knowledge, spoken_tokens=Config.voice_research_tokens,
                    count=lambda text: len(text) // 4)


def evidence(research: Research, question: str) -> str:
    exchange = research.for_question(question, spoken=True)
    return exchange[1]["content"] if exchange else ""


def test_a_table_row_is_read_with_its_columns_names(research):
    shower = evidence(research, "Which breaker is the electric shower on?")
    assert "Breaker: 9; Rating: 40 A; Circuit: Electric shower; Behind RCD: 2." in shower
    assert "Breaker: 1;" not in shower  # the cooker's row shares "breaker" alone, a column's name
    assert _table_rows(["| 9 | 40 A | Electric shower |", "| 10 | 6 A | Smoke alarms |"]) == ([], [
        "9; 40 A; Electric shower.", "10; 6 A; Smoke alarms."])  # a passage that begins inside a table


def test_a_name_heard_as_the_words_it_is_made_of_finds_its_row(research):
    asked = "How long does the quick wash program take on the washing machine?"
    assert "Programme: Quickwash" in evidence(research, asked)
    assert "quickwash" in asked_terms("the quick wash program") and "quickwash" not in telling_terms("quick wash")
    assert '"quickwash"' in fts_query("the quick wash program") and '"thequick"' not in fts_query("the quick wash")


def test_an_abbreviation_meets_the_word_said(research):
    assert "Dr Anwen Castellane" in evidence(research, "Who is our doctor at Larkhill Surgery?")


def test_a_turn_that_acts_researches_questions_and_not_commands(research):
    for command in ("Turn on the kitchen light.", "Lock the front door.", "Set the thermostat to 21 degrees."):
        assert research.for_question(command), command  # the notes' words match it...
        assert research.for_question(command, acting=True) == [], command  # ...but it asks for nothing
    assert "Breaker: 9" in research.for_question("Which breaker is the electric shower on?", acting=True)[1]["content"]
    assert research.for_question("who services the Vossbrandt boiler", acting=True)  # heard without its mark
    assert research.for_question("what's the guest wifi password", acting=True)
    assert research.for_question("Tell me when the bins go out.", acting=True)
