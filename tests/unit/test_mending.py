"""Misheard names mended into the knowledge base's names, and nothing else changed; spoken numbers
searched as the texts write them.

The misheard questions are what whisper tiny.en wrote for voices Parlour never uses
(scripts/eval_hearing.py); the knowledge base is the household notes and the license texts of the
evaluations, indexed for real."""

from __future__ import annotations

import pytest

from harness.knowledge.questions import BASES
from voice.knowledge.base import digits, fts_query, telling_terms
from voice.knowledge.mending import Mender, fold
from voice.knowledge.research import Research


@pytest.fixture(scope="module")
def mender(evaluation_knowledge) -> Mender:
    return evaluation_knowledge.mender()


@pytest.mark.parametrize(("heard", "mended"), [
    ("Who services the boss brand boiler?", "Who services the Vossbrandt boiler?"),
    ("What does fault code F22 mean on the cestral boiler?", "What does fault code F22 mean on the Kestrel boiler?"),
    ("When does our core vane broadband contract end?", "When does our Corvane broadband contract end?"),
    ("When is Biscuit's booster at bright water?", "When is Biscuit's booster at Brightwater?"),
])
def test_a_misheard_name_becomes_the_name_the_texts_use(mender, heard, mended):
    assert mender.mend(heard) == mended


def test_questions_heard_right_are_left_as_they_are(mender):
    questions = [q.text for base in BASES for q in base.questions]
    assert [mender.mend(q) for q in questions] == questions


def test_only_runs_the_texts_never_use_are_replaced():
    mender = Mender(["Kestrel", "Vossbrandt"], known={"boiler", "kestrels"})
    assert mender.mend("The kestrels and the boiler.") == "The kestrels and the boiler."  # words the texts use
    assert mender.mend("Is the Kestral's pump on?") == "Is the Kestrel's pump on?"  # a possessive stays one
    assert mender.mend("Is it at 1.3 bar?") == "Is it at 1.3 bar?"  # nothing like a name
    assert Mender([], known=set()).mend("boss brand") == "boss brand"
    compound = Mender(["Quickwash"], known={"quick", "wash"})
    assert compound.mend("a quick wash") == "a Quickwash" and compound.mend("a quick rinse") == "a quick rinse"


def test_letters_that_sound_alike_fold_together():
    assert fold("Cestral") == fold("Kestral") and fold("Vossbrandt") == fold("fosbrandt")
    assert fold("Kestrel") != fold("Kettle")


def test_spoken_numbers_and_codes_are_searched_as_the_texts_write_them():
    assert digits("version two point one of three") == "version 2.1 of 3"
    assert digits("fault code F twenty two, sixty days, Forty-five") == "fault code F22, 60 days, 45"
    assert digits("I two and a three") == "I 2 and a 3"  # "I" and "a" are words, not codes
    assert '"f22"' in fts_query("What does fault code F twenty two mean?")
    assert telling_terms("Who services the boiler?") & telling_terms("The boiler is serviced in October.") == {
        "servic", "boiler"}


def test_a_name_heard_as_a_common_word_inside_a_title_is_put_back(mender):
    assert mender.mend("When was version 3 of the new general public license published") == \
        "When was version 3 of the GNU general public license published"
    assert mender.mend("Is there new software here?") == "Is there new software here?"  # no title around it


def test_a_search_also_looks_for_a_name_heard_as_words_the_texts_use(mender, evaluation_knowledge):
    # festival's slt voice was heard so; "bright" is a word the texts use, so the transcript stays as it is
    heard = "What is the name of our vet at Bright Watcher?"
    assert mender.mend(heard) == heard
    assert mender.searched_for(heard) == ["Brightwater"]
    assert mender.searched_for("What is the name of our metal right, Walker?") == ["Brightwater"]
    questions = [q.text for base in BASES for q in base.questions]
    assert [q for q in questions if mender.searched_for(q)] == []
    exchange = Research("auto", evaluation_knowledge).for_question(heard, spoken=True)
    assert "Fairweather" in exchange[1]["content"]
