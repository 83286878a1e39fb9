"""The knowledge base: chunking, BM25 search and re-indexing only what changed."""

from __future__ import annotations

import json
import os
from pathlib import Path

from voice.config import Config
from voice.knowledge.base import CHUNK_CHARS, KnowledgeBase, chunk_text, digits, fts_query, read_document
from voice.knowledge.research import result_tokens


def test_reindexing_touches_only_changed_files(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Tides\n\nThe tide turns twice a day.")
    (docs / "b.txt").write_text("Ferries leave at nine.")
    (docs / "skip.pdf").write_bytes(b"%PDF")
    knowledge = KnowledgeBase(tmp_path / "kb.sqlite3")
    first = knowledge.index(docs)
    assert (first.added, first.updated, first.unchanged, first.removed) == (2, 0, 0, 0)
    again = knowledge.index(docs)
    assert (again.added, again.updated, again.unchanged) == (0, 0, 2)
    (docs / "b.txt").write_text("Ferries leave at ten now.")
    os.utime(docs / "a.md")  # touched but not changed: read, hashed, left alone
    changed = knowledge.index(docs)
    assert (changed.updated, changed.unchanged, changed.chunks) == (1, 1, 1)
    assert "ten" in knowledge.search("When do ferries leave?")[0].text
    (docs / "a.md").unlink()
    gone = knowledge.index(docs)
    assert gone.removed == 1 and knowledge.search("tide") == []
    assert knowledge.size() == (1, 1)


def test_html_is_read_as_text_with_headings(tmp_path):
    page = tmp_path / "p.html"
    page.write_text("<html><head><title>Cork</title><style>p{}</style></head><body><h2>Harbour</h2>"
                    "<p>Cork has a large harbour.</p><script>alert(1)</script></body></html>")
    title, text = read_document(page)
    assert title == "Cork" and "## Harbour" in text and "alert" not in text and "p{}" not in text


def test_chunks_follow_paragraphs_and_stay_bounded():
    text = "# One\n\n" + "\n\n".join("word " * 100 for _ in range(20)) + "\n\n# Two\n\n" + "x" * 5000
    chunks = chunk_text(text)
    assert all(len(c) <= CHUNK_CHARS for c in chunks)
    assert any(c.startswith("# Two") for c in chunks)


def test_questions_become_safe_queries():
    assert fts_query('What is "AND" OR (NEAR)?') == '"near"'  # FTS5 syntax words are only words
    assert fts_query("How much rain in Galway?") == '"rain" OR "galway"'
    assert fts_query("?!") == ""


def test_results_far_weaker_than_the_best_are_left_out(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "rain.md").write_text("# Rain\n\nGalway rain: Galway gets 1,200 mm of rain, the rain of the west.")
    (docs / "food.md").write_text("# Food\n\nOysters are served in Galway in September.")
    knowledge = KnowledgeBase(tmp_path / "kb.sqlite3")
    knowledge.index(docs)
    found = knowledge.search("How much rain falls in Galway?")
    assert [r.title for r in found] == ["Rain"]
    assert len(knowledge.search("Galway")) == 2  # equally good matches both stay


def test_spoken_evidence_keeps_the_sentences_that_answer_in_their_order_under_the_bound(llm):
    from voice.knowledge.base import SearchResult
    from voice.knowledge.research import spoken_evidence

    count = result_tokens(llm)
    tides = SearchResult("/notes/tides.md", "Tides", "# Tides\n\nThe tide tables are printed weekly. "
                         "Spring tides at Galway reach five metres. Boats moor by the Claddagh. "
                         "The highest tide at Galway flooded the Spanish Arch in 1987.", -4.0)
    music = SearchResult("/notes/music.md", "Music", "Trad sessions run nightly in the Quays.", -2.5)
    kept = spoken_evidence("How high do the tides reach at Galway?", [tides, music], 40, count)
    assert [r.path for r in kept] == ["/notes/tides.md"]  # the passage sharing no word is left out
    assert kept[0].text.index("five metres") < kept[0].text.index("1987")  # sentences stay in order
    assert "Claddagh" not in kept[0].text
    roomy = spoken_evidence("How high do the tides reach at Galway?", [tides, music], 400, count)
    assert roomy[0].text.startswith("The tide tables")  # every sentence sharing a word fits
    unrelated = spoken_evidence("zebra crossings", [tides], 20, count)
    assert unrelated[0].text.startswith("The tide tables are printed weekly.")  # nothing shared: the opening
    assert count(kept[0].text) + count("[1] Tides (/notes/tides.md)") <= 40 + 2
    # The best sentence (all three share "tide": the first) is kept even alone over the bound.
    assert spoken_evidence("tides", [tides], 1, count)[0].text == "The tide tables are printed weekly."
    # Hard-wrapped text (the license texts) is cut into sentences, not lines; a heading stays apart.
    wrapped = SearchResult("/docs/license.txt", "License", "# Patents\nEach Contributor grants a patent\n"
                           "license to make and sell the Work. Notices must stay\nintact in every copy.", -1.0)
    patents = spoken_evidence("Does the license grant patents?", [wrapped], 400, count)
    assert patents[0].text == "Each Contributor grants a patent license to make and sell the Work."


def test_a_typed_result_reads_the_sentences_that_bear_on_the_question_after_the_passages(llm):
    from voice.knowledge.base import ANSWER_FROM_RESULTS, KEY_SENTENCES, SearchResult, format_results
    from voice.knowledge.research import key_sentences

    count = result_tokens(llm)
    opening = SearchResult("/docs/gpl.txt", "GPL", "GNU General Public License\nVersion 3, 29 June 2007\n"
                           "Everyone is permitted to copy it.", 0.0, opening=True)
    terms = SearchResult("/docs/gpl.txt", "GPL", "# 8. Termination\nYou may not propagate it. Your license is "
                         "reinstated permanently if the holder fails to notify you within 60 days. "
                         "The weather was fine.", -3.0)
    key = key_sentences("After how many days is my license reinstated permanently?", [opening, terms], 400, count)
    # The best sentence, not the opening first as in spoken evidence (the passages above hold it),
    # and, with room for more, not the opening's sentence that shares only "license".
    assert key.splitlines() == ["[2] Your license is reinstated permanently if the holder fails to notify you "
                                "within 60 days."]
    result = format_results([opening, terms], key)
    assert result.index("[2] GPL (gpl.txt)") < result.index(KEY_SENTENCES) < result.index(key)
    assert result.endswith(f"{key}\n\n{ANSWER_FROM_RESULTS}")
    assert KEY_SENTENCES not in format_results([opening, terms])  # no sentences, no heading for them


def write_licenses(folder) -> None:
    folder.mkdir()
    body = "\n\n".join(f"Section {n}. If You institute patent litigation, the patent licenses granted to You "
                       f"shall terminate. Clause {n} of the grant." for n in range(8))
    (folder / "apache.txt").write_text("Apache License\nVersion 2.0, January 2004\n\n"
                                       + body.replace("Section", "Apache"))
    (folder / "mpl.txt").write_text("Mozilla Public License\nVersion 2.0\n\n" + body + "\n\nMozilla Foundation is the "
                                    "license steward.")
    for version, date in (("2", "June 1991"), ("3", "29 June 2007")):
        (folder / f"gpl-{version}.txt").write_text(
            f"GNU GENERAL PUBLIC LICENSE\nVersion {version}, {date}\n\nCopyright (C) Free Software Foundation, Inc.\n"
            "51 Franklin Street, Boston, MA 02110-1301 USA\n\n"
            + "\n\n".join(f"Paragraph {n}: the GNU General Public License is published for software."
                          for n in range(8)))
    (folder / "lgpl.txt").write_text("GNU LESSER GENERAL PUBLIC LICENSE\nVersion 3, 29 June 2007\n\n"
                                     "This version of the GNU Lesser General Public License incorporates the terms "
                                     "of version 3 of the GNU General Public License.")


def test_evidence_for_a_question_naming_a_document_comes_from_that_document(tmp_path):
    write_licenses(tmp_path / "docs")
    knowledge = KnowledgeBase(tmp_path / "k.sqlite3")
    knowledge.index(tmp_path / "docs")
    unnamed = knowledge.search("What happens to my patent licenses if I start patent litigation?")
    assert {Path(r.path).name for r in unnamed} >= {"apache.txt", "mpl.txt"}  # both say so
    named = knowledge.search("Under the Apache license, what happens to my patent license if I start litigation?")
    assert named and {Path(r.path).name for r in named} == {"apache.txt"}
    assert named[0].title == "Apache License"  # a plain text's first line is its title
    # The version asked for, spoken in words, picks the document, and its opening states the date.
    three = knowledge.search("When was version three of the GNU General Public License published?")
    assert {Path(r.path).name for r in three} == {"gpl-3.txt"} and "29 June 2007" in three[0].text
    assert {Path(r.path).name for r in knowledge.search("When was version two of the GNU GPL published?")} == \
        {"gpl-2.txt"}
    assert digits("version two point one of three") == "version 2.1 of 3"


def test_a_license_called_by_its_initials_is_the_one_asked_about(tmp_path):
    write_licenses(tmp_path / "docs")
    knowledge = KnowledgeBase(tmp_path / "k.sqlite3")
    knowledge.index(tmp_path / "docs")
    named = lambda question: {Path(p).name for p in knowledge.named_documents(question) or ()}  # noqa: E731
    assert named("Which city is in the address of the GPL version two?") == {"gpl-2.txt"}
    assert named("Which version of the GPL does the LGPL incorporate?") == {"lgpl.txt"}  # the longer title
    assert named("What does the MPL say about patents?") == {"mpl.txt"}
    assert named("Is it a bad idea?") == set()  # two letters are no initials: "AL" is not the Apache License


def test_spoken_evidence_keeps_the_opening_of_the_document_asked_about(tmp_path, llm):
    """Its address is asked for in words it does not use ("city"), so only its place keeps it."""
    from voice.knowledge.research import Research

    write_licenses(tmp_path / "docs")
    knowledge = KnowledgeBase(tmp_path / "k.sqlite3")
    knowledge.index(tmp_path / "docs")
    research = Research("auto", knowledge, count=lambda text: llm.count_message(
        {"role": "tool", "content": text}))
    evidence = research.for_question("In which city is the address of the GPL version two?", spoken=True)[-1]
    assert "Boston" in evidence["content"] and "June 1991" in evidence["content"]
    assert "gpl-3.txt" not in evidence["content"]


def test_a_documents_boilerplate_does_not_crowd_out_the_answer(tmp_path, llm):
    """The GPL 3's opening keeps its figures, and its "Everyone is permitted to copy ..." competes with
    the terms' sentences: kept whole, it left no room for the 60 days under the default bound."""
    from harness.knowledge.questions import BASES
    from voice.knowledge.research import Research

    knowledge = KnowledgeBase(tmp_path / "k.sqlite3")
    knowledge.index(BASES[0].materialize(tmp_path / "licenses"))
    research = Research("auto", knowledge, spoken_tokens=Config.voice_research_tokens, count=result_tokens(llm))
    evidence = research.for_question("Under the GNU General Public License version three, after how many days without "
                                     "notice from the copyright holder is my license reinstated permanently?",
                                     spoken=True)[-1]["content"]
    assert "60 days" in evidence and "Version 3, 29 June 2007" in evidence
    assert "Everyone is permitted to copy" not in evidence


def test_a_text_that_several_documents_share_is_one_result(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    definitions = "\n\n".join(f"Definition {n}: a Cover Text is a short passage." for n in range(3))
    for version in ("1.2", "1.3"):
        (docs / f"fdl-{version}.txt").write_text(f"Free Documentation License\nVersion {version}\n\n{definitions}")
    (docs / "other.txt").write_text("Other\n\nA passage that names a Cover Text once, among other words here.")
    knowledge = KnowledgeBase(tmp_path / "k.sqlite3")
    knowledge.index(docs)
    found = knowledge.search("What is a Cover Text?", 2)
    assert len(found) == 2 and len({r.text for r in found}) == 2


def test_the_model_reads_an_auto_search_without_its_query_and_its_own_searches_with_theirs(llm):
    from models.tool_calls import new_call
    from voice.turns.prompt_layout import compact_calls

    asked = new_call("search", {"query": "When does the ferry leave?"})
    own = new_call("search", {"query": "ferry timetable"})
    messages = [{"role": "system", "content": "Answer briefly."},
                {"role": "user", "content": "When does the ferry leave?"},
                {"role": "assistant", "content": None, "tool_calls": [asked]},
                {"role": "tool", "tool_call_id": asked["id"], "content": "At ten."},
                {"role": "assistant", "content": "At ten."},
                {"role": "user", "content": "And on Sundays?"},
                {"role": "assistant", "content": None, "tool_calls": [own]},
                {"role": "tool", "tool_call_id": own["id"], "content": "At noon."}]
    compacted = compact_calls(messages)
    assert compacted[2]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert compacted[2]["tool_calls"][0]["id"] == asked["id"] and compacted[6] == messages[6]
    assert json.loads(messages[2]["tool_calls"][0]["function"]["arguments"]) == {"query": "When does the ferry leave?"}
    assert llm.count(compacted) <= llm.count(messages) - 6  # the question is not read twice


def test_an_auto_search_is_read_as_its_results_before_the_question(llm):
    from models.tool_calls import new_call
    from voice.turns.prompt_layout import compact_calls, evidence_first

    asked = new_call("search", {"query": "When does the ferry leave?"})
    own = new_call("search", {"query": "ferry timetable"})
    messages = [{"role": "system", "content": "Answer briefly."},
                {"role": "user", "content": "When does the ferry leave?"},
                {"role": "assistant", "content": None, "tool_calls": [asked]},
                {"role": "tool", "tool_call_id": asked["id"], "content": "[1] Timetable\nThe ferry leaves at ten."},
                {"role": "assistant", "content": "At ten."},
                {"role": "user", "content": "And on Sundays?"},
                {"role": "assistant", "content": None, "tool_calls": [own]},
                {"role": "tool", "tool_call_id": own["id"], "content": "At noon."}]
    read = evidence_first(compact_calls(messages))
    # The auto search's results, then the question, in one user message; the model's own search as it was.
    assert read[1] == {"role": "user",
                       "content": "[1] Timetable\nThe ferry leaves at ten.\n\nWhen does the ferry leave?"}
    assert read[2] == messages[4] and read[3:] == messages[5:]
    assert len(read) == len(messages) - 2
    assert llm.count(read) <= llm.count(compact_calls(messages)) - 15  # no call and no tool framing to read
    # The evidence's tokens lead the question's message: a prompt that ends with the evidence shares
    # all of it but its last token ("." merges with the separator), before the message's end and the
    # reply's opening (5 tokens).
    from models.kv_cache import common_prefix

    evidence = llm.tokens(read[:1] + [{"role": "user", "content": "[1] Timetable\nThe ferry leaves at ten."}])
    assert common_prefix(llm.tokens(read[:2]), evidence) == len(evidence) - 6


def test_a_question_the_knowledge_base_has_nothing_for_is_not_researched(tmp_path):
    from voice.knowledge.research import Research

    docs = tmp_path / "docs"
    docs.mkdir()
    for path in sorted(Path("/usr/share/common-licenses").iterdir()):
        if path.is_file():
            (docs / f"{path.name}.txt").write_text(path.read_text(errors="replace"))
    knowledge = KnowledgeBase(tmp_path / "k.sqlite3")
    knowledge.index(docs)
    research = Research("auto", knowledge)
    for question in ("What does Creative Commons Zero do with copyright?", "What does the BSD license require in "
                     "binary form?", "What does the Apache license say about patents?"):
        assert knowledge.bears_on(question), question
        assert research.for_question(question)[0]["tool_calls"], question
    for question in ("What did I ask you first?", "Summarize what we discussed.", "Who wrote Hamlet?",
                     "Tell me a joke."):
        assert not knowledge.bears_on(question), question
        assert research.for_question(question) == [], question
    # One passage has no word weights: whatever it matches, it bears on.
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "ferries.md").write_text("The harbour master is Orla Keane.")
    small = KnowledgeBase(tmp_path / "small.sqlite3")
    small.index(notes)
    assert small.bears_on("Who is the harbour master?") and not small.bears_on("Tell me a joke.")
