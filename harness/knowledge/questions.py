"""Spoken questions over two knowledge bases of different kinds, for evaluations of research.

The license texts (/usr/share/common-licenses) are formal and widely known, so a model may answer
from pretraining; the household notes (household/) are a family's own manuals and notes, full of
invented names, models and dates that only the documents can answer. Each question asks for one
fact stated plainly in one passage, phrased as a person says it aloud (numbers as words), so that
it can be rendered by a synthetic voice as it stands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from voice.knowledge.base import KnowledgeBase


@dataclass(frozen=True)
class Question:
    text: str
    right: str  # a regular expression a right answer matches (case ignored)
    domain: tuple[str, ...]  # the words whisper must hear for the search to find the document


@dataclass(frozen=True)
class Base:
    """A knowledge base: the folder to index and the questions it answers."""

    name: str
    folder: Path
    questions: tuple[Question, ...]

    def materialize(self, into: Path) -> Path:
        """The folder to index: its files copied into `into` as .txt where they have no suffix
        `parlour index` reads (the license texts), else the folder itself."""
        files = [path for path in sorted(self.folder.iterdir()) if path.is_file()]
        if all(path.suffix in (".txt", ".md", ".html") for path in files):
            return self.folder
        into.mkdir(parents=True, exist_ok=True)
        for path in files:
            (into / f"{path.name}.txt").write_text(path.read_text(errors="replace"))
        return into


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()


def domain_misses(question: Question, heard: str) -> int:
    """The domain words said that the transcript lacks."""
    got = set(words(heard))
    return sum(word.lower() not in got for word in question.domain)


def right(question: Question, reply: str) -> bool:
    return re.search(question.right, reply, re.IGNORECASE) is not None


LICENSES = (
    Question("When was version three of the GNU General Public License published?", r"2007",
             ("GNU", "General", "Public", "License")),
    Question("Which company may publish revised versions of the Mozilla Public License version one point one?",
             r"Netscape", ("Mozilla", "Public", "License")),
    Question("Under the Apache license, what happens to my patent license if I start patent litigation over the work?",
             r"terminat|end", ("Apache", "patent", "litigation")),
    Question("Who is the license steward of the Mozilla Public License version two?", r"Mozilla Foundation",
             ("Mozilla", "steward")),
    Question("Under the GNU General Public License version three, how many days after a notice do I have to cure "
             "a violation?", r"\b30\b|thirty", ("GNU", "General", "Public", "License", "violation")),
    Question("When was version two of the GNU General Public License published?", r"1991",
             ("GNU", "General", "Public", "License")),
    Question("When was version two point one of the GNU Lesser General Public License published?", r"1999",
             ("GNU", "Lesser", "General", "Public", "License")),
    Question("When was version one point three of the GNU Free Documentation License published?", r"2008",
             ("GNU", "Free", "Documentation", "License")),
    Question("In which month and year was version two of the Apache License released?", r"January 2004|2004",
             ("Apache", "License")),
    Question("Which organisation holds the copyright of the GNU General Public License version three?",
             r"Free Software Foundation", ("GNU", "General", "Public", "License", "copyright")),
    Question("In which city is the address of the Free Software Foundation in the GPL version two?", r"Boston",
             ("Free", "Software", "Foundation", "GPL")),
    Question("Which university is named in the copyright line of the BSD license?", r"California|Berkeley",
             ("BSD", "copyright")),
    Question("Under the Apache license, which text file's notices must I include when I redistribute the work?",
             r"NOTICE", ("Apache", "notices", "redistribute")),
    Question("Under the Apache license, is the patent license perpetual?", r"perpetual|\byes\b",
             ("Apache", "patent", "perpetual")),
    Question("What does the Artistic License call the package when it has not been modified?",
             r"Standard Version", ("Artistic", "License", "package")),
    Question("What does the GNU Free Documentation License call the sections whose titles are designated as "
             "not to be changed?", r"Invariant", ("GNU", "Free", "Documentation", "License")),
    Question("Which version of the GNU General Public License does the GNU Lesser General Public License "
             "version three incorporate?", r"\b3\b|three", ("GNU", "Lesser", "General", "Public", "License")),
    Question("Under the Mozilla Public License version two, how many days after notice do I have to become "
             "compliant?", r"\b30\b|thirty", ("Mozilla", "Public", "License", "compliant")),
    Question("Under the GNU General Public License version three, after how many days without notice from the "
             "copyright holder is my license reinstated permanently?", r"\b60\b|sixty",
             ("GNU", "General", "Public", "License", "reinstated")),
    Question("Under the GNU General Public License version three, what is the preferred form of the work for "
             "making modifications to it called?", r"source code", ("GNU", "General", "Public", "License")),
)

# Each fact is stated once, in one passage of household/; the patterns take digits or words.
HOUSEHOLD = (
    Question("What does fault code F twenty two mean on the Kestrel boiler?", r"condensate",
             ("fault", "code", "Kestrel", "boiler")),
    Question("What pressure should I top the boiler up to when it is cold?", r"\b1\.3\b|one point three",
             ("pressure", "boiler")),
    Question("Who services the Vossbrandt boiler?", r"Tamsin|Ogilvie|Brackwater", ("Vossbrandt", "boiler")),
    Question("How long does the Quickwash programme take on the washing machine?", r"\b29\b|twenty[- ]nine",
             ("Quickwash", "washing", "machine")),
    Question("How do I turn on the child lock on the washing machine?",
             r"temp\w*\W+(and|\+|&)\W+spin|spin\W+(and|\+|&)\W+temp", ("child", "lock", "washing", "machine")),
    Question("Which model is our washing machine?", r"Aquaris|8400|eighty[- ]four hundred",
             ("model", "washing", "machine")),
    Question("Which firmware version is the Fernwick router running?", r"3\.8\.14|three point eight point fourteen",
             ("firmware", "Fernwick", "router")),
    Question("What is the password of the guest wireless network?", r"marigold", ("guest", "password")),
    Question("When does our Corvane broadband contract end?",
             r"\b(14|fourteenth)\w*\s+(of\s+)?August|August\s+(the\s+)?(14|fourteenth)\b",
             ("Corvane", "broadband", "contract")),
    Question("When does the MOT on the Tarrant run out?",
             r"\b(22|twenty[- ]second)\w*\s+(of\s+)?May|May\s+(the\s+)?(22|twenty[- ]second)\b", ("MOT", "Tarrant")),
    Question("What pressure do the car's front tyres need for normal driving?", r"\b33\b|thirty[- ]three",
             ("pressure", "front", "driving")),
    Question("At what mileage was the cambelt replaced?",
             r"62,?410|sixty[- ]two thousand,? four hundred (and )?ten", ("mileage", "cambelt")),
    Question("How much oil does the Meridian take with a filter change?", r"4\.2|four point two",
             ("oil", "Meridian", "filter")),
    Question("Which day is the brown garden waste bin collected?", r"Friday", ("garden", "waste", "bin")),
    Question("Which day of the week is the Sallowmead recycling centre closed?", r"Thursday",
             ("Sallowmead", "recycling", "closed")),
    Question("How much Marrowby's seaweed feed goes in a full watering can?", r"\b20\b|twenty",
             ("Marrowby's", "seaweed", "watering")),
    Question("Which height setting should the Corsley mower be on in summer?",
             r"\b(4|four)\b|\b45\b|forty[- ]five", ("height", "setting", "Corsley", "mower")),
    Question("Which model is our lawn mower?", r"Trimline", ("lawn", "mower")),
    Question("Who is our doctor at Larkhill Surgery?", r"Castellane|Anwen", ("Larkhill", "Surgery")),
    Question("What is the name of our vet at Brightwater?", r"Fairweather|Olusegun", ("vet", "Brightwater")),
    Question("Where does Biscuit stay when we go away?", r"Hollybrook", ("Biscuit", "away")),
    Question("Which breaker is the electric shower on?", r"\b(9|nine)\b", ("breaker", "electric", "shower")),
    Question("How often should I test the RCDs in the Halvard fuse box?",
             r"three months|3 months|quarter|four times a year", ("test", "RCDs", "Halvard")),
    Question("Where is the inside stopcock for the water?", r"hatch|under the floor|(under|beneath) the (little )?rug",
             ("stopcock", "water")),
    Question("When does the cheap rate of our Oxbourne tariff start at night?",
             r"\b0?0[:.]30\b|12[:.]30|half past (twelve|midnight)|twelve thirty", ("Oxbourne", "cheap", "rate")),
    Question("Which variety is the apple tree at the end of the garden?", r"Tydeman", ("apple", "tree")),
)

LICENSE_BASE = Base("licenses", Path("/usr/share/common-licenses"), LICENSES)
HOUSEHOLD_BASE = Base("household", Path(__file__).resolve().parent / "household", HOUSEHOLD)
BASES = (LICENSE_BASE, HOUSEHOLD_BASE)


def index_bases(knowledge: KnowledgeBase, work: Path) -> KnowledgeBase:
    """`knowledge` with both bases indexed into it, as `parlour index` would for a user with both
    folders; the license texts' copies are made under `work`."""
    for base in BASES:
        knowledge.index(base.materialize(work / base.name))
    return knowledge
