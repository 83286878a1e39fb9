"""Whisper hears the knowledge base's names: real whisper, a real server, and speech from voices
Parlour never uses (harness/voices.py).

Whisper tiny.en writes a name it does not know as the words it sounds like ("Vossbrandt" as "boss
brand"); the service gives whisper the knowledge base's words and mends what still sounds like one of
its names (voice.knowledge.mending), and the question is heard as asked."""

from __future__ import annotations

from harness.realtime import Client
from harness.voices import say
from voice.knowledge.base import KnowledgeBase

VOICES = ("festival-slt-hts", "festival-kal", "flite-slt", "flite-rms", "flite-awb", "flite-kal16")


def write_gnu_docs(folder) -> None:
    folder.mkdir()
    (folder / "gpl.md").write_text(
        "# The GNU licenses\n\nThe GNU General Public License was written for the GNU project. Version 3 of the "
        "GNU General Public License was published on 29 June 2007 by the Free Software Foundation.\n\n"
        "The GNU Lesser General Public License, version 2.1, was published in February 1999. See "
        "https://www.gnu.org/licenses/ for the texts.\n")
    (folder / "fdl.md").write_text(
        "# Documentation\n\nThe GNU Free Documentation License covers manuals. Its Invariant Sections may not "
        "be changed. Write to the Free Software Foundation, Inc.,\n51 Franklin Street, Fifth Floor, Boston, "
        "MA 02110-1301 USA.\n")


def test_the_vocabulary_is_the_names_the_texts_never_write_in_lower_case(tmp_path):
    write_gnu_docs(tmp_path / "docs")
    knowledge = KnowledgeBase(tmp_path / "knowledge.sqlite3")
    knowledge.index(tmp_path / "docs")
    names = knowledge.vocabulary()
    assert names[:3] == ["Documentation", "GNU", "licenses"]  # the titles' words first
    assert {"Foundation", "Invariant"} <= set(names[3:])  # then names the texts use
    # Not names: words written in lower case too ("version"), capitalized only where a sentence or
    # a heading begins ("Its", "See", "Write"), stop words, the address gnu.org, a postal address's
    # places (whisper given "Street" heard "copyright" as "Coon Str"), months and "Inc".
    assert not {"Version", "The", "Its", "See", "Write", "gnu"} & set(names)
    assert not {"Franklin", "Street", "Fifth", "Floor", "Boston", "USA", "February", "Inc"} & set(names)


def test_the_service_hears_a_name_whisper_alone_mishears_said_by_voices_parlour_never_uses(tmp_path, stt, tts,
                                                                                         make_server):
    """"Vossbrandt", an invented make of boiler, said by six synthetic voices (flite, festival):
    whisper alone writes "boss brand" or "VOS brand"; the service, given the knowledge base's words
    and mending what still sounds like one of its names, hears the name."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "boiler.md").write_text(
        "# Boiler: Vossbrandt Kestrel 28C\n\nOur boiler is a Vossbrandt Kestrel 28C. The Vossbrandt is serviced "
        "every October by Tamsin Ogilvie of Brackwater Heating.\n")
    KnowledgeBase(tmp_path / "data" / "knowledge.sqlite3").index(tmp_path / "docs")
    question = "Who services the Vossbrandt boiler?"
    clips = [say(name, question, tts, rate=24_000) for name in VOICES]
    plain = [stt.transcribe(clip, 24_000).text for clip in clips]
    server = make_server()
    served = [server.service.transcribe(clip).text for clip in clips]
    assert sum("Vossbrandt" in text for text in served) >= 4, served
    assert sum("Vossbrandt" in text for text in plain) < sum("Vossbrandt" in text for text in served), plain
    # A spoken question through the service's own path (a commit) is heard the same way.
    client = Client(server.url())
    events = client.speak(clips[["Vossbrandt" in text for text in served].index(True)], max_tokens=8)
    completed = next(e for e in events if e["type"] == "conversation.item.input_audio_transcription.completed")
    assert "Vossbrandt" in completed["transcript"], completed["transcript"]
    client.close()
