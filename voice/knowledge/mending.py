"""Misheard names mended: a transcript's words that sound like a knowledge base's name become it.

Whisper writes a name it does not know as the common words it sounds like: "Vossbrandt" as "boss
brand", "Kestrel" as "cestral". A search for those finds nothing, and the model repeats them. Hotwords
hold only a few dozen names; this holds every name the texts use. A heard word, or two or three
heard words run together, that the texts never use is compared with each name by spelling, after
folding letters that sound alike; the closest name at `SIMILAR` or above takes its place.

Words the texts use are never replaced ("boiler" stays), nor are short words, stop words or numbers:
a name must be earned by a run of letters at least `SHORTEST` long. Two exceptions: a name heard as
the words it is made of, letter for letter ("bright water" is the "Brightwater" vets), and a name
inside a document's title: "the new General Public License" is the GNU one, since every other word
was heard.

A search may look further than a transcript may be changed (`searched_for`): for a name that a run of
words the texts do use sounds like ("right water", "Bright Watcher": Brightwater). A search that also
looks for it loses little when it was not meant; a transcript changed wrongly would.
"""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet
from difflib import SequenceMatcher
from functools import lru_cache

SIMILAR = 0.8  # SequenceMatcher ratio of the folded spellings
SHORTEST = 5  # letters in a heard run and in a name
LONGEST_RUN = 3  # heard words run together: "boss brand" is one name
SHORT_HEARD = 4  # letters at most of a word heard in a title in place of one of its names ("new" for "GNU")
# Letters that whisper's spellings swap for one another, folded to one: c/k/q as k, v/f/ph as f,
# z as s, and doubled letters as one.
FOLDS = ((r"ph", "f"), (r"ck", "k"), (r"[cq]", "k"), (r"v", "f"), (r"z", "s"), (r"(.)\1+", r"\1"))
WORD = re.compile(r"[A-Za-z][A-Za-z']*")


def fold(word: str) -> str:
    folded = re.sub(r"[^a-z]", "", word.lower())
    for pattern, replacement in FOLDS:
        folded = re.sub(pattern, replacement, folded)
    return folded


class Mender:
    def __init__(self, names: list[str], known: AbstractSet[str], stopwords: frozenset[str] = frozenset(),
                 titles: list[list[str]] | None = None):
        """`names`: the texts' names as they write them; `known`: every word the texts use, in
        lower case; `stopwords`: words never taken for a name; `titles`: the documents' titles as
        words, for a name heard as a common word inside one (see `_in_titles`)."""
        self.names = {fold(name): name for name in names if len(name) >= SHORTEST and name.isalpha()}
        self.compounds = {name.lower(): name for name in self.names.values()}
        self.known, self.stopwords = known, stopwords
        named = {name.lower() for name in names}
        self.titles = [title for title in titles or [] if len(title) >= 3 and any(w.lower() in named for w in title)]
        self.named = named
        self.searched_for = lru_cache(maxsize=64)(self._searched_for)  # each question asks three times

    def mend(self, text: str) -> str:
        """`text` with each run of heard words that sounds like a name replaced by the name."""
        text = self._in_titles(text)
        if not self.names:
            return text
        words = list(WORD.finditer(text))
        pieces, end, n = [], 0, 0
        while n < len(words):
            found = self._name_for(words, n)
            if found is None:
                n += 1
                continue
            name, length = found
            last = words[n + length - 1]
            said = text[words[n].start():last.end()]
            if said.lower().removesuffix("'s") != name.lower():  # a name heard right stays as written
                pieces += [text[end:words[n].start()], name + ("'s" if said.endswith("'s") else "")]
                end = last.end()
            n += length
        return "".join(pieces) + text[end:]

    def _name_for(self, words: list[re.Match], start: int) -> tuple[str, int] | None:
        """The name the run of words from `start` sounds like, and how many words it takes; the
        longest run first, so "boss brand" is one name and not "boss" alone."""
        for length in range(min(LONGEST_RUN, len(words) - start), 0, -1):
            run = [w.group().lower().removesuffix("'s") for w in words[start:start + length]]
            joined = "".join(run)
            if length > 1 and joined in self.compounds:  # a name heard as the words it is made of
                return self.compounds[joined], length
            if any(w in self.known or w in self.stopwords for w in run):
                continue
            if name := self._sounds_like(joined):
                return name, length
        return None

    def _searched_for(self, text: str) -> list[str]:
        """The names a search for `text` looks for as well (see the module's doc): those that runs of
        two or three heard words sound like, words the texts use among them."""
        words = [w.group().lower().removesuffix("'s") for w in WORD.finditer(text)]
        found: dict[str, None] = {}
        for start in range(len(words)):
            for length in range(2, min(LONGEST_RUN, len(words) - start) + 1):
                run = words[start:start + length]
                if not any(w in self.stopwords for w in run) and (name := self._sounds_like("".join(run))):
                    found.setdefault(name)
        return [w for w in found if w.lower() not in words]

    def _sounds_like(self, heard: str) -> str | None:
        """The name whose folded spelling is closest to `heard`'s, at `SIMILAR` or above."""
        heard = fold(heard)
        if len(heard) < SHORTEST:
            return None
        matcher, best = SequenceMatcher(b=heard), (SIMILAR, "")
        for name in self.names:
            if abs(len(name) - len(heard)) <= len(heard) // 3:
                matcher.set_seq1(name)  # the cheap upper bounds first: most names are far off
                if matcher.quick_ratio() >= best[0] and (ratio := matcher.ratio()) >= best[0]:
                    best = (ratio, name)
        return self.names[best[1]] if best[1] else None

    def _in_titles(self, text: str) -> str:
        """A title said with one of its names heard as another short word ("the new General Public
        License" for "the GNU General Public License"): the name is put back. Only where every other
        word of the title was heard as it is written, so one word alone never becomes a name."""
        words = list(WORD.finditer(text))
        for title in self.titles:
            wanted = [w.lower() for w in title]
            for start in range(len(words) - len(title) + 1):
                heard = [w.group().lower() for w in words[start:start + len(title)]]
                wrong = [i for i, (h, t) in enumerate(zip(heard, wanted, strict=True)) if h != t]
                if len(wrong) == 1 and wanted[wrong[0]] in self.named and len(heard[wrong[0]]) <= SHORT_HEARD:
                    miss = words[start + wrong[0]]
                    return self._in_titles(text[:miss.start()] + title[wrong[0]] + text[miss.end():])
        return text
