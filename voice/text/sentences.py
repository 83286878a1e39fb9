"""The one sentence splitter: reply text as it streams, cut into the pieces that are spoken.

A spoken reply is spoken sentence by sentence as each completes, so the first audio leaves after
the first sentence rather than after the whole reply; the first piece may be a phrase. Evidence for
spoken turns (voice.knowledge.research), stored replies (voice.store.reply_row) and Wyoming's
streamed synthesis cut text with the same `Sentences`.
"""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"([.!?…]+[\"')\]]*)(\s+)|\n+")
_WHOLE_WORD = re.compile(r"\S+(?=\s)")


# Words a phrase begins with: the first piece may end before one (prepositions, conjunctions).
_PHRASE_START = frozenset(
    "and or but nor so yet that which who whom whose where when while because since although though if unless "
    "until than as to of in on at for with without within under by from about after before during including "
    "except".split())


class Sentences:
    """Feed reply text as it streams; get back each sentence once it is complete.

    The first piece may end sooner, so the listener hears the reply begin while its first long
    sentence is still being written: at a clause (a comma, colon or semicolon) or before a word
    that begins a phrase ("of", "because", "which"...) once it has `first_words` words, and after
    twice that many words at the latest. With `first_words` 0, every piece is a sentence. A
    speaker about to run out of audio may also take the phrases complete so far (`phrase`).
    """

    def __init__(self, first_words: int = 4) -> None:
        self.pending = ""
        self.first_words = first_words
        self.started = False

    def feed(self, text: str) -> list[str]:
        self.pending += text
        done: list[str] = []
        while True:
            match = _SENTENCE_END.search(self.pending)
            cut = (match.end(1) if match.group(1) else match.start(), match.end()) if match else None
            if not self.started and self.first_words and (phrase := self._first_phrase()):
                if not cut or phrase[0] < cut[0]:
                    cut = phrase
            if not cut:
                return done
            if piece := self._take(cut):
                done.append(piece)

    def phrase(self, least_words: int = 3) -> str:
        """The pending text up to its last phrase end, if that holds `least_words` words; "" if
        none. For a listener who would otherwise wait in silence for the sentence to end."""
        ends = list(self._phrase_ends(least_words))
        return self._take(ends[-1][:2]) if ends else ""

    def _first_phrase(self) -> tuple[int, int] | None:
        """Where the first piece may end short of a sentence, and where the rest begins."""
        for end, rest, n in self._phrase_ends(self.first_words):
            if n < 2 * self.first_words:
                return end, rest
        words = list(_WHOLE_WORD.finditer(self.pending))
        if len(words) >= 2 * self.first_words:  # no phrase ended: cut there, before an article at least
            n = 2 * self.first_words - 1
            return (words[n - 1].end(), words[n].start()) if words[n].group().lower() in ("a", "an", "the") else \
                (words[n].end(), words[n].end())
        return None

    def _phrase_ends(self, least_words: int):
        """(end, where the rest begins, words before the end) for each place a phrase
        ends in the pending text with at least `least_words` words before it: after a clause mark,
        or before a word that begins a phrase. Only whole words count (followed by a space): a
        streamed "of" may yet become "often"."""
        words = list(_WHOLE_WORD.finditer(self.pending))
        for n, word in enumerate(words):
            if n >= least_words and word.group().lower().strip("\"'(") in _PHRASE_START:
                yield words[n - 1].end(), word.start(), n
            if n + 1 >= least_words and word.group()[-1] in ",;:":
                yield word.end(), word.end(), n + 1

    def _take(self, cut: tuple[int, int]) -> str:
        piece = self.pending[: cut[0]].strip()
        self.pending = self.pending[cut[1]:]
        if not re.search(r"\w", piece):
            return ""
        self.started = True
        return piece

    def flush(self) -> str:
        rest, self.pending = self.pending.strip(), ""
        return rest if re.search(r"\w", rest) else ""
