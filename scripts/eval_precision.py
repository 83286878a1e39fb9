#!/usr/bin/env python3
"""Does research give a turn only what bears on it? Model-free: the knowledge base and the research
policy alone, with the model's tokenizer for the bound on spoken evidence.

The knowledge base is the research evaluation's two folders indexed together (the license texts and
a household's notes, harness/knowledge/questions.py), as a user with both would have it. It prints:
- Home Assistant's evaluated commands and state questions (scripts/eval_home_assistant.py), as the
  turns that offer HA's tools see them (`acting`), and as a turn without tools would: how many were
  given passages, which none of them needs;
- questions about the world and the conversation, which no passage answers: how many were given;
- the 46 research questions as written, spoken and typed: how many were given passages, and how many
  of those held the answer;
- recall (voice.knowledge.recall): with the user's earlier sessions in a real store (things they told
  the assistant, and Home Assistant's commands said over Wyoming, which no function answered), how
  often what they said elsewhere was given to a question about it and held the fact, and how often
  it was given to the research questions, the unrelated questions and HA's commands, which it does
  not bear on;
- with `--heard LOG`, the same for each voice's transcripts in an earlier scripts/eval_research.py
  printout: the spoken evidence for what was heard, which bounds what the model can answer.

Run: .venv/bin/python scripts/eval_precision.py [--show] [--heard LOG]
It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.knowledge.questions import BASES, index_bases, right
from models.llm import LanguageModel
from voice.config import Config
from voice.engines import llm_path
from voice.knowledge.base import KnowledgeBase
from voice.knowledge.research import Research, result_tokens
from voice.store.sessions import SessionStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval_home_assistant import COMMANDS, QUESTIONS
from eval_research import transcripts

# No passage answers these: the world's facts, arithmetic, and the conversation itself.
UNRELATED = [question for question, _ in QUESTIONS] + [
    "Who wrote Hamlet?", "What is twelve times eight?", "Tell me a story about a lighthouse.",
    "What did I ask you first?", "Summarize what we discussed.", "Thanks, that's all."]

# What a user told the assistant in an earlier session, a question about each, and its fact.
TOLD = [
    ("My locker code at the swimming pool is 4512.", "What is my locker code at the swimming pool?", "4512"),
    ("The plumber, Dermot, is coming on Thursday at nine to look at the leak.", "When is the plumber coming?",
     "Thursday"),
    ("I parked the car on level three of the station car park.", "Where did I park the car?", "level three"),
    ("Isla's school trip money is twelve pounds, due on Friday.", "How much is Isla's school trip money?", "twelve"),
    ("I lent my ladder to our neighbour Priya.", "Who did I lend my ladder to?", "Priya"),
    ("My passport expires in August 2029.", "When does my passport expire?", "2029"),
    ("The spare house key is under the blue flowerpot by the shed.", "Where is the spare house key?", "flowerpot"),
    ("Tobias wants a red bicycle for his birthday.", "What did I say Tobias wants for his birthday?", "bicycle"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", action="store_true",
                        help="name each text given passages, and each heard one whose evidence lacks the answer")
    parser.add_argument("--heard", type=Path, help="an eval_research.py printout: the evidence for what was heard")
    args = parser.parse_args()
    config = Config()
    work = Path(tempfile.mkdtemp(prefix="parlour-precision-"))
    knowledge = index_bases(KnowledgeBase(work / "knowledge.sqlite3"), work)
    tokenizer = LanguageModel(llm_path(config), context=512, vocab_only=True)
    research = Research("auto", knowledge, spoken_tokens=config.voice_research_tokens, count=result_tokens(tokenizer))

    def given(texts: list[str], label: str, **how) -> None:
        hits = [text for text in texts if research.for_question(text, **how)]
        print(f"{label:52} given passages: {len(hits)} of {len(texts)}")
        for text in hits if args.show else []:
            print(f"    {text}")

    commands = [command.text for command in COMMANDS]
    given(commands, "Home Assistant's commands, in a turn with its tools", acting=True)
    given(commands, "Home Assistant's commands, in a turn without tools")
    given(UNRELATED, "questions no passage answers")
    for spoken in (True, False):
        for base in BASES:
            evidence = [research.for_question(q.text, spoken=spoken) for q in base.questions]
            held = sum(right(q, exchange[1]["content"]) for q, exchange in zip(base.questions, evidence, strict=True)
                       if exchange)
            label = f"{base.name} questions, {'spoken' if spoken else 'typed'}"
            print(f"{label:52} given passages: {sum(map(bool, evidence))} of {len(evidence)}, "
                  f"holding the answer: {held}")
    recall(args.show)
    for voice, heard in (transcripts(args.heard) if args.heard else {}).items():
        held, missed = 0, []
        for base in BASES:
            for n, question in enumerate(base.questions):
                text = heard[f"{base.name[0]}{n + 1}"]
                exchange = research.for_question(text, spoken=True)
                if exchange and right(question, exchange[1]["content"]):
                    held += 1
                else:
                    missed.append(f"{base.name[0]}{n + 1}: {text}")
        print(f"{'heard by ' + voice:52} evidence holding the answer: {held} of {held + len(missed)}")
        for text in missed if args.show else []:
            print(f"    {text}")


def recall(show: bool) -> None:
    """What the user said in their earlier sessions, given to the questions it bears on and to those
    it does not (see the module's doc)."""
    store = SessionStore(Path(tempfile.mkdtemp(prefix="parlour-recall-")) / "sessions.sqlite3")
    for said, answer in (([statement for statement, _, _ in TOLD], "Noted."),
                         ([command.text for command in COMMANDS], "Done.")):
        session = store.create("")
        for text in said:
            store.append(session, {"role": "user", "content": text})
            store.append(session, {"role": "assistant", "content": answer})
    asking = store.create("")
    research = Research("auto", None, store)  # what the user said elsewhere, and no knowledge base

    def elsewhere(text: str) -> str:
        exchange = research.for_question(text, session_id=asking)
        return exchange[1]["content"] if exchange else ""

    def given(texts: list[str], label: str) -> None:
        hits = [(text, found) for text in texts if (found := elsewhere(text))]
        print(f"{label:52} given what was said elsewhere: {len(hits)} of {len(texts)}")
        for text, found in hits if show else []:
            print(f"    {text}  <-  {' / '.join(found.splitlines())}")

    held = sum(fact in elsewhere(question) for _, question, fact in TOLD)
    print(f"{'questions about what the user told, elsewhere':52} given it, holding the fact: {held} of {len(TOLD)}")
    given([q.text for base in BASES for q in base.questions], "the research questions")
    given(UNRELATED, "questions no passage answers")
    given([command.text for command in COMMANDS], "Home Assistant's commands, in a turn without tools")
    store.close()


if __name__ == "__main__":
    main()
