"""Sentences of a paragraph, as ranges of its whitespace words.

The splitter is BlingFire's (`blingfire.text_to_sentences_and_offsets`): on 1,000 paragraphs
joined from test2016 and Tatoeba sentences it found the most boundaries of the three
candidates measured, with no false split, at a third of a second (pysbd: as accurate, ten
times slower; sentencex: fastest, but takes "me." and "art." for abbreviations);
bench/RESULTS.md has the figures. A sentence still longer than the model's source limit is
split again at the punctuation, else the clause word, nearest its middle, else at the space
nearest its middle: never cut.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from mtkit.errors import ConfigError

WordRange = tuple[int, int]  # words [start, end) of a paragraph

# Words a clause starts with: a split before one of them keeps each part a clause.
_CLAUSE_WORDS = frozenset(
    "and but or because while whereas although though which who whom whose where when "
    "that so if unless until since after before und aber oder weil während obwohl denn "
    "sondern dass wenn als bis nachdem bevor et mais ou parce que qui quand".split())
_PUNCT_END = re.compile(r"[,;:)\]\u2014\u2013]+[\"'\u201d\u2019]*$")
_SPACE = re.compile(r"\s")
_WORD = re.compile(r"\S+")


def _blingfire():
    try:
        import blingfire
    except ImportError:
        raise ConfigError("splitting paragraphs into sentences needs BlingFire: pip install "
                          "'mtkit[documents]'") from None
    return blingfire


def sentence_ranges(text: str, words: Sequence[tuple[int, int]]) -> list[WordRange]:
    """The sentences of `text` (whose whitespace words have the character spans `words`) as
    word ranges covering every word once, in order. Boundaries fall between words only."""
    if not words:
        return []
    # Whitespace is all one to a paragraph (a line break in HTML source is no boundary); one
    # character for one keeps the offsets.
    flat = _SPACE.sub(" ", text)
    _, offsets = _blingfire().text_to_sentences_and_offsets(flat)
    ends = sorted({_words_before(words, end) for _, end in offsets})
    ranges, start = [], 0
    for end in ends:
        if end > start:
            ranges.append((start, end))
            start = end
    if start < len(words):
        ranges.append((start, len(words)))
    return ranges


def text_sentences(text: str) -> list[str]:
    """The sentences of `text`, line by line: a line break always ends a sentence (two lines
    typed apart are never one), blank lines give none; each sentence as it stands in its
    line, its inner spacing kept."""
    out = []
    for line in text.splitlines():
        words = [m.span() for m in _WORD.finditer(line)]
        out.extend(line[words[a][0]:words[e - 1][1]] for a, e in sentence_ranges(line, words))
    return out


def _words_before(words: Sequence[tuple[int, int]], offset: int) -> int:
    """How many words start before `offset` (a boundary inside a word goes after it)."""
    lo, hi = 0, len(words)
    while lo < hi:
        mid = (lo + hi) // 2
        if words[mid][0] < offset:
            lo = mid + 1
        else:
            hi = mid
    return lo


def fitted(ranges: Sequence[WordRange], tokens: Sequence[str],
           too_long: Callable[[str], bool]) -> list[WordRange]:
    """`ranges` with each sentence that is `too_long` (its words joined by spaces) split
    again until every part fits or is one word: at the punctuation nearest its middle, else
    before the clause word nearest it, else at the middle space. `tokens`: the words."""
    out: list[WordRange] = []
    todo = list(reversed(ranges))
    while todo:
        a, b = todo.pop()
        if b - a < 2 or not too_long(" ".join(tokens[a:b])):
            out.append((a, b))
            continue
        cut = _cut(tokens, a, b)
        todo.extend([(cut, b), (a, cut)])
    return out


def _cut(tokens: Sequence[str], a: int, b: int) -> int:
    """Where to split words [a, b) (a < result < b)."""
    middle = (a + b) / 2

    def nearest(cands: list[int]) -> int | None:
        return min(cands, key=lambda k: (abs(k - middle), k)) if cands else None

    after_punct = [k + 1 for k in range(a, b - 1) if _PUNCT_END.search(tokens[k])]
    before_clause = [k for k in range(a + 1, b)
                     if tokens[k].lower().strip("\"'(") in _CLAUSE_WORDS]
    for cands in (after_punct, before_clause):
        if (k := nearest(cands)) is not None:
            return k
    return (a + b) // 2
