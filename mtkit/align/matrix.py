"""Attention as a word alignment matrix: one row per target token, one column per source
token (numpy array or torch tensor in, numpy out), EOS dropped, sentencepiece pieces merged
into words. Needs no model.

Shapes: T target tokens (rows), S source tokens (columns).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from mtkit.errors import MtkitError

Link = tuple[int, int]  # (source index i, target index j), both 0-based
Level = Literal["word", "subword"]

WORD_START = "\u2581"  # sentencepiece's "▁": a piece starting with it begins a new word
EOS_TOKEN = "</s>"  # label of the end-of-sentence row/column when it is kept


# --------------------------------------------------------------------------- matrices


@dataclass(frozen=True, eq=False)
class AlignMatrix:
    """An attention matrix with its labels. weights: (T, S) float64, row j = target token j,
    column i = source token i; src_tokens: S labels; tgt_tokens: T labels; level: whether the
    labels are sentencepiece pieces or whole words. For self-attention both axes carry the same
    sentence (rows are queries, columns keys). axes: what (columns, rows) are called in
    heatmaps and tables."""

    weights: np.ndarray
    src_tokens: tuple[str, ...]
    tgt_tokens: tuple[str, ...]
    level: Level
    axes: tuple[str, str] = ("source", "target")

    def __post_init__(self) -> None:
        shape = (len(self.tgt_tokens), len(self.src_tokens))
        if self.weights.shape != shape:
            raise ValueError(f"weights have shape {self.weights.shape}, labels give {shape}")


def as_array(attn: Any) -> np.ndarray:
    """A (T, S) numpy float64 copy of a numpy array or torch tensor (any device)."""
    if hasattr(attn, "detach"):  # torch.Tensor, without importing torch here
        attn = attn.detach().cpu().double().numpy()
    arr = np.array(attn, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"expected a 2-D (T, S) attention matrix, got shape {arr.shape}")
    return arr


def word_ids(pieces: Sequence[str]) -> list[int]:
    """The word index of each sentencepiece piece: a piece starting with '▁' begins a new word,
    as do the first piece and the EOS token; other pieces continue the word before them.
    E.g. ['▁Fahr', 'rad', '▁fährt'] -> [0, 0, 1].

    Words are those of the decoded text split at spaces: a piece of '▁' alone is a space with
    no word of its own, so it joins the word that follows it (['▁', '▁Hund'] is one word,
    'Hund'), or at the end the word before it. A model's output may hold such pieces, and
    link indices must count the words a reader of the hypothesis sees."""
    ids: list[int] = []
    filled = False  # whether the current word has a character yet
    for piece in pieces:
        if ids and (piece == EOS_TOKEN or piece.startswith(WORD_START) and filled):
            ids.append(ids[-1] + 1)
            filled = False
        else:
            ids.append(ids[-1] if ids else 0)
        filled = filled or piece.strip(WORD_START) != ""
    # Only the last word (before EOS) can be spaces alone: it goes to the word before it.
    end = len(pieces) - (1 if pieces and pieces[-1] == EOS_TOKEN and len(pieces) > 1 else 0)
    last = [i for i in range(end) if ids[i] == ids[end - 1]] if end else []
    if last and ids[last[0]] > 0 and all(not pieces[i].strip(WORD_START) for i in last):
        for i in range(last[0], len(ids)):
            ids[i] -= 1
    return ids


def words(pieces: Sequence[str]) -> list[str]:
    """Join pieces into words (the '▁' markers removed): ['▁Fahr', 'rad'] -> ['Fahrrad'].
    A word made only of '▁' keeps it as its label, so no label is empty."""
    out: list[str] = []
    for wid, piece in zip(word_ids(pieces), pieces, strict=True):
        if wid == len(out):
            out.append("")
        out[wid] += piece
    return [w.replace(WORD_START, "") or WORD_START for w in out]


@dataclass(frozen=True)
class Words:
    """How a sentence's pieces make words: ids[k] is the word of piece k (non-decreasing,
    from 0), labels the words. A word may have no piece (a whitespace word that
    sentencepiece's normalization removes, such as a lone zero-width space): it keeps its
    place, so indices count the words a reader of the line sees, and it gets no link."""

    ids: tuple[int, ...]
    labels: tuple[str, ...]

    def __post_init__(self) -> None:
        if any(not 0 <= i < len(self.labels) for i in self.ids):
            raise ValueError(f"word ids {self.ids} do not fit {len(self.labels)} words")


def piece_words(pieces: Sequence[str]) -> Words:
    """The words of the text the pieces decode to (`word_ids`, `words`)."""
    return Words(tuple(word_ids(pieces)), tuple(words(pieces)))


def line_words(encode: Callable[[str], list[int]], line: str,
               ids: Sequence[int]) -> Words | None:
    """The whitespace words of `line` (`str.split`, as in Pharaoh files and gold links) and
    which of them each of its pieces `ids` belongs to, or None where that cannot be told.

    Sentencepiece's own words can differ from the line's: its normalization turns a zero-width
    space or U+FFFD into a space, so 'dog\ufffdx' would count as two words and every index
    after it would shift. Each word is encoded alone (`encode`) and the pieces concatenated;
    where that does not give `ids` (a line cut to the model's length, a model not trained to
    split at whitespace), None: the words are then those the pieces decode to."""
    split = line.split()
    per_word = [encode(w) for w in split]
    if [i for word in per_word for i in word] != list(ids):
        return None
    return Words(tuple(k for k, word in enumerate(per_word) for _ in word), tuple(split))


def drop_eos(weights: np.ndarray, n_src: int, n_tgt: int) -> np.ndarray:
    """Drop the EOS column and row of a (T, S) matrix and renormalise each row to sum to 1.

    The matrix may come with or without them: S must be n_src or n_src + 1 (the source EOS is
    the last column), T must be n_tgt or n_tgt + 1 (the last row is the step that predicted
    EOS). Each remaining row is divided by its sum, so it is again a distribution over the
    real source tokens: the mass a decoder parks on EOS, a known attention sink with little
    alignment meaning (Clark et al. 2019 observe the same for [SEP]), is spread in proportion.
    A row whose whole mass was on EOS stays all zero and yields no link. Returns (n_tgt, n_src).
    """
    t, s = weights.shape
    if s not in (n_src, n_src + 1) or t not in (n_tgt, n_tgt + 1):
        raise ValueError(f"attention of shape {weights.shape} does not fit {n_tgt} target and "
                         f"{n_src} source tokens (each with or without EOS)")
    kept = weights[:n_tgt, :n_src]
    sums = kept.sum(axis=1, keepdims=True)
    return np.divide(kept, sums, out=np.zeros_like(kept), where=sums > 0)


def merge_subwords(weights: np.ndarray, src_pieces: Sequence[str] | Words,
                   tgt_pieces: Sequence[str] | Words) -> np.ndarray:
    """Merge a piece-level (T, S) matrix into a word-level (T_w, S_w) one; each side is given
    as its pieces (words as `piece_words` makes them) or as its `Words`.

    Source side (columns): the attention a target piece pays to a source word is the SUM over
    the word's pieces (the issue's rule; attending to any piece of the word is attending to the
    word, and the events are disjoint). Target side (rows): a target word's row is the MEAN of
    its pieces' rows, not the sum: each piece row is a distribution over the source, so their
    mean is one too, rows keep summing to 1, and a word split into three pieces does not get
    three times the mass, which keeps the `threshold` method comparable across words. A word
    without pieces gets a zero column or row.
    """
    src, tgt = (w if isinstance(w, Words) else piece_words(w) for w in (src_pieces, tgt_pieces))
    src_w, tgt_w = src.ids, tgt.ids
    if weights.shape != (len(tgt_w), len(src_w)):
        raise ValueError(f"attention of shape {weights.shape} does not fit {len(tgt_w)} target "
                         f"and {len(src_w)} source pieces")
    col_sum = np.zeros((len(src_w), len(src.labels)))  # (S, S_w) one-hot: piece -> its word
    col_sum[np.arange(len(src_w)), src_w] = 1.0
    row_mean = np.zeros((len(tgt.labels), len(tgt_w)))  # (T_w, T) one-hot rows, to average
    row_mean[tgt_w, np.arange(len(tgt_w))] = 1.0
    row_mean /= np.maximum(row_mean.sum(axis=1, keepdims=True), 1.0)
    return row_mean @ weights @ col_sum


def from_attention(attn: Any, src_pieces: Sequence[str], tgt_pieces: Sequence[str], *,
                   level: Level = "word", keep_eos: bool = False,
                   src_words: Words | None = None, tgt_words: Words | None = None) -> AlignMatrix:
    """Label a model's attention matrix, optionally dropping EOS and merging pieces into words.

    attn: (T, S) numpy or torch, T = len(tgt_pieces) [+ 1 for the EOS step], S =
    len(src_pieces) [+ 1 for the source EOS]; pieces exclude BOS/EOS. keep_eos=False (what
    Pharaoh output needs) drops the EOS row and column and renormalises rows (`drop_eos`);
    keep_eos=True labels them EOS_TOKEN and keeps the weights as they are (for looking at
    the matrix). level='word' then merges pieces into words (`merge_subwords`): a side's
    `Words` where given (the whitespace words of the line read), else those its pieces
    decode to.
    """
    if level not in ("word", "subword"):
        raise MtkitError(f"unknown alignment level {level!r}: expected 'word' or 'subword'")
    weights = as_array(attn)
    src, tgt = list(src_pieces), list(tgt_pieces)
    for given, pieces in ((src_words, src), (tgt_words, tgt)):
        if given is not None and len(given.ids) != len(pieces):
            raise ValueError(f"{len(given.ids)} word ids for {len(pieces)} pieces")
    if keep_eos:
        t, s = weights.shape
        src += [EOS_TOKEN] if s == len(src) + 1 else []
        tgt += [EOS_TOKEN] if t == len(tgt) + 1 else []
        if weights.shape != (len(tgt), len(src)):
            raise ValueError(f"attention of shape {weights.shape} does not fit "
                             f"{len(tgt_pieces)} target and {len(src_pieces)} source pieces")
    else:
        weights = drop_eos(weights, len(src), len(tgt))
    if level == "subword":
        return AlignMatrix(weights, tuple(src), tuple(tgt), "subword")
    sw, tw = (_with_eos(given, pieces) for given, pieces in ((src_words, src), (tgt_words, tgt)))
    return AlignMatrix(merge_subwords(weights, sw, tw), sw.labels, tw.labels, "word")


def _with_eos(given: Words | None, pieces: list[str]) -> Words:
    """`given` extended by an EOS word when the pieces end with a kept EOS; the pieces' own
    words when nothing is given."""
    if given is None:
        return piece_words(pieces)
    if len(pieces) == len(given.ids) + 1:  # EOS_TOKEN appended by keep_eos
        return Words(given.ids + (len(given.labels),), given.labels + (EOS_TOKEN,))
    return given
