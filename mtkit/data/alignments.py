"""Word alignments of the training split (``data.train.align``): Pharaoh lines checked against
their sentence pair, and word links mapped onto sentencepiece pieces for guided alignment.

Pharaoh format, as statistical aligners (eflomal, fast_align, GIZA++ after symmetrization) and
`mtkit align --pharaoh` write it: one line per sentence pair, links ``i-j`` separated by
spaces, i a 0-based source word and j a 0-based target word, words being the line's
whitespace-separated tokens (``str.split``); an empty line is a pair without links.

Everything works on a chunk of lines at once with numpy (no loop over links in Python), so a
corpus of millions of pairs is checked and mapped at the speed of its reading.

Word -> piece mapping: sentencepiece marks the first piece of every word with U+2581 ("▁",
Kudo & Richardson 2018, §3.1; a word may also start with a bare "▁" piece), so the pieces of
word w are those from its w-th "▁" piece up to the next. A link between two words links every
piece of the one to every piece of the other (Garg et al. 2019 and OpenNMT-py convert links to
subwords the same way): each piece of a target word then learns to attend to the whole source
word, which is what reading word links back out of piece attention assumes (`mtkit align`
links words when any of their pieces are linked). Linking first pieces only would leave the
other pieces' rows unsupervised. Where sentencepiece's words are not the whitespace words
(text its normalization changes, such as a lone "▁" or control characters), the pair keeps no
links rather than wrong ones, and prep counts it (`AlignStats.unmapped`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mtkit.errors import DataError

# Nine digits at most: any index beyond is out of range anyway, and int64 never overflows.
_LINE = re.compile(r"(?:\d{1,9}-\d{1,9}(?:\s+\d{1,9}-\d{1,9})*)?")


@dataclass
class AlignStats:
    """What prep did with the training split's alignments: word links read (every line of
    every file), pairs and word links kept with the cleaned split, piece links stored, and
    the kept pairs whose links could not be mapped onto pieces (first one as FILE:LINE)."""

    links_read: int = 0
    pairs_kept: int = 0
    links_kept: int = 0
    piece_links: int = 0
    unmapped: int = 0
    first_unmapped: str | None = None

    def summary(self) -> str:
        """One line for prep's report."""
        text = (f"alignments: {self.links_read:,} word links read; the {self.pairs_kept:,} "
                f"pairs kept carry {self.links_kept:,}, stored as {self.piece_links:,} piece "
                "links for guided alignment")
        if self.unmapped:
            text += (f"; {self.unmapped:,} pairs whose words sentencepiece splits otherwise "
                     f"than whitespace keep no links (first: {self.first_unmapped})")
        return text


@dataclass(frozen=True)
class Links:
    """Links of a chunk of pairs: counts (N,) int64 links per pair; pairs (L, 2) int64
    (source index, target index), pair by pair in line order."""

    counts: np.ndarray
    pairs: np.ndarray

    @property
    def line(self) -> np.ndarray:
        """(L,) the pair (0-based within the chunk) each link belongs to."""
        return np.repeat(np.arange(len(self.counts)), self.counts)


def word_counts(lines: Sequence[str]) -> np.ndarray:
    """(N,) int64 whitespace words per line."""
    return np.fromiter((len(line.split()) for line in lines), dtype=np.int64, count=len(lines))


def parse_links(lines: Sequence[str], *, path: str, first_line: int) -> Links:
    """Pharaoh lines (stripped) -> their word links. DataError naming ``path: line N``
    (`first_line` is the 1-based number of lines[0] in its file) on a malformed line."""
    for k, line in enumerate(lines):
        if not _LINE.fullmatch(line):
            shown = line if len(line) <= 60 else line[:57] + "..."
            raise DataError(f"{path}: line {first_line + k}: expected word links i-j (0-based "
                            f"source and target word indices) separated by spaces, got "
                            f"{shown!r}")
    counts = np.fromiter((line.count("-") for line in lines), dtype=np.int64, count=len(lines))
    numbers = " ".join(lines).replace("-", " ").split()
    pairs = np.array(numbers, dtype=np.int64).reshape(-1, 2)
    return Links(counts, pairs)


def check_links(links: Links, src: Sequence[str], tgt: Sequence[str], *, path: str,
                first_line: int) -> None:
    """DataError naming ``path: line N`` at the first link whose source or target word index
    is not a word of its pair (src and tgt: the pair's stripped lines)."""
    if not len(links.pairs):
        return
    line = links.line
    ns, nt = word_counts(src)[line], word_counts(tgt)[line]
    bad = (links.pairs[:, 0] >= ns) | (links.pairs[:, 1] >= nt)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        i, j = links.pairs[k]
        raise DataError(f"{path}: line {first_line + int(line[k])}: link {i}-{j} is out of "
                        f"range: the pair has {ns[k]} source and {nt[k]} target words "
                        "(0-based indices of whitespace-separated words)")


@dataclass(frozen=True)
class _Words:
    """Words of a chunk of encoded sentences: per sentence its word count (N,) and the index
    of its first word among all (N,); per word its first piece (within its sentence) and its
    piece count (W,); bad (N,) True where the pieces do not start with a word."""

    count: np.ndarray
    base: np.ndarray
    start: np.ndarray
    length: np.ndarray
    bad: np.ndarray


def _words(lens: np.ndarray, flat: np.ndarray, starts_word: np.ndarray) -> _Words:
    """lens (N,) pieces per sentence, flat (sum lens,) their ids; starts_word (V,) bool per
    vocabulary entry, True for pieces that begin a word."""
    n, total = len(lens), int(lens.sum())
    first = np.cumsum(lens) - lens  # (N,) offset of each sentence's first piece
    sent = np.repeat(np.arange(n), lens)
    starts = starts_word[flat] if total else np.zeros(0, dtype=bool)
    count = np.bincount(sent[starts], minlength=n).astype(np.int64)
    bad = np.zeros(n, dtype=bool)
    bad[sent[(np.arange(total) == first[sent]) & ~starts]] = True  # first piece mid-word
    at = np.flatnonzero(starts)  # global positions of word starts
    ends = np.append(at[1:], total)
    ends = np.minimum(ends, (first + lens)[sent[at]])  # a word ends with its sentence
    return _Words(count=count, base=np.cumsum(count) - count, start=at - first[sent[at]],
                  length=ends - at, bad=bad)


def piece_links(links: Links, src_words: np.ndarray, tgt_words: np.ndarray,
                src: tuple[np.ndarray, np.ndarray], tgt: tuple[np.ndarray, np.ndarray],
                starts_word: tuple[np.ndarray, np.ndarray]) -> tuple[Links, np.ndarray]:
    """Word links of N pairs -> piece links (see the module doc), sorted and unique per pair.

    src_words, tgt_words: (N,) whitespace words per side; src, tgt: (lens (N,), flat ids) of
    the encoded sides; starts_word: (src, tgt) (V,) bool tables. Returns the piece links and
    (N,) bool, True for pairs left without links because sentencepiece's words are not the
    whitespace words."""
    sw, tw = _words(*src, starts_word[0]), _words(*tgt, starts_word[1])
    unmapped = (sw.count != src_words) | (tw.count != tgt_words) | sw.bad | tw.bad
    line = links.line
    ok = ~unmapped[line]
    line, pairs = line[ok], links.pairs[ok]
    gs, gt = sw.base[line] + pairs[:, 0], tw.base[line] + pairs[:, 1]
    a, b = sw.length[gs], tw.length[gt]
    n = a * b  # piece pairs per word link
    rep = np.repeat(np.arange(len(n)), n)
    r = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    p = sw.start[gs][rep] + r // b[rep]
    q = tw.start[gt][rep] + r % b[rep]
    width = int(max(src[0].max(initial=0), tgt[0].max(initial=0))) + 1
    key = np.unique((line[rep] * width + p) * width + q)  # sorted by pair, then p, then q
    pair_of, rest = np.divmod(key, width * width)
    out = np.stack(np.divmod(rest, width), axis=1)
    return Links(np.bincount(pair_of, minlength=len(src[0])).astype(np.int64), out), unmapped
