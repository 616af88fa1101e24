"""Word alignment from attention: subword-to-word merging, Pharaoh link extraction, AER.

Everything here works on a plain attention matrix of shape (T, S): one row per target token, one
column per source token (numpy array or torch tensor), and needs no model. `mtkit align` reads
the matrices from a model and hands them here; tests hand-make them.

Conventions (the ones of fast_align, GIZA++ and the Pharaoh/Moses tools):
- a link is a pair (i, j): 0-based source word i, 0-based target word j, written ``i-j``;
- gold files mark sure links ``i-j`` and possible links ``i?j`` or ``ipj``; the possible set P
  always includes the sure set S (Och & Ney 2003, §4).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from mtkit.errors import DataError, MtkitError
from mtkit.fileio import atomic_write, read_lines

Link = tuple[int, int]  # (source index i, target index j), both 0-based
Level = Literal["word", "subword"]

WORD_START = "\u2581"  # sentencepiece's "▁": a piece starting with it begins a new word
EOS_TOKEN = "</s>"  # label of the end-of-sentence row/column when it is kept

METHODS = ("argmax-tgt", "argmax-src", "intersection", "union", "grow-diag-final", "threshold")
DEFAULT_METHOD = "argmax-tgt"
DEFAULT_THRESHOLD = 0.5


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
    as does the first piece and the EOS token; other pieces continue the word before them.
    E.g. ['▁Fahr', 'rad', '▁fährt'] -> [0, 0, 1]."""
    ids: list[int] = []
    for piece in pieces:
        if not ids:
            ids.append(0)
        elif piece.startswith(WORD_START) or piece == EOS_TOKEN:
            ids.append(ids[-1] + 1)
        else:
            ids.append(ids[-1])
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


def merge_subwords(weights: np.ndarray, src_pieces: Sequence[str],
                   tgt_pieces: Sequence[str]) -> np.ndarray:
    """Merge a piece-level (T, S) matrix into a word-level (T_w, S_w) one.

    Source side (columns): the attention a target piece pays to a source word is the SUM over
    the word's pieces (the issue's rule; attending to any piece of the word is attending to the
    word, and the events are disjoint). Target side (rows): a target word's row is the MEAN of
    its pieces' rows, not the sum: each piece row is a distribution over the source, so their
    mean is one too, rows keep summing to 1, and a word split into three pieces does not get
    three times the mass, which keeps the `threshold` method comparable across words.
    """
    src_w, tgt_w = word_ids(src_pieces), word_ids(tgt_pieces)
    if weights.shape != (len(tgt_w), len(src_w)):
        raise ValueError(f"attention of shape {weights.shape} does not fit {len(tgt_w)} target "
                         f"and {len(src_w)} source pieces")
    n_src, n_tgt = (src_w[-1] + 1 if src_w else 0), (tgt_w[-1] + 1 if tgt_w else 0)
    col_sum = np.zeros((len(src_w), n_src))  # (S, S_w) one-hot: piece -> its word
    col_sum[np.arange(len(src_w)), src_w] = 1.0
    row_mean = np.zeros((n_tgt, len(tgt_w)))  # (T_w, T) one-hot rows, scaled to average
    row_mean[tgt_w, np.arange(len(tgt_w))] = 1.0
    row_mean /= np.maximum(row_mean.sum(axis=1, keepdims=True), 1.0)
    return row_mean @ weights @ col_sum


def from_attention(attn: Any, src_pieces: Sequence[str], tgt_pieces: Sequence[str], *,
                   level: Level = "word", keep_eos: bool = False) -> AlignMatrix:
    """Label a model's attention matrix, optionally dropping EOS and merging pieces into words.

    attn: (T, S) numpy or torch, T = len(tgt_pieces) [+ 1 for the EOS step], S =
    len(src_pieces) [+ 1 for the source EOS]; pieces exclude BOS/EOS. keep_eos=False (what
    Pharaoh output needs) drops the EOS row and column and renormalises rows (`drop_eos`);
    keep_eos=True labels them EOS_TOKEN and keeps the weights as they are (for looking at
    the matrix). level='word' then merges pieces into words (`merge_subwords`).
    """
    if level not in ("word", "subword"):
        raise MtkitError(f"unknown alignment level {level!r}: expected 'word' or 'subword'")
    weights = as_array(attn)
    src, tgt = list(src_pieces), list(tgt_pieces)
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
    return AlignMatrix(merge_subwords(weights, src, tgt), tuple(words(src)), tuple(words(tgt)),
                       "word")


# --------------------------------------------------------------------------- link extraction


def argmax_tgt(weights: np.ndarray) -> set[Link]:
    """Each target word j links to its most-attended source word i (the direction in which
    every target word has exactly one link, like an IBM-model Viterbi alignment). weights:
    (T, S). All-zero rows get no link; ties go to the lowest source index."""
    return {(int(np.argmax(row)), j) for j, row in enumerate(weights) if row.max(initial=0) > 0}


def argmax_src(weights: np.ndarray) -> set[Link]:
    """Each source word i links to the target word j that attends to it most. weights: (T, S).
    All-zero columns get no link; ties go to the lowest target index."""
    return {(i, int(np.argmax(col))) for i, col in enumerate(weights.T) if col.max(initial=0) > 0}


_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def grow_diag_final(forward: set[Link], backward: set[Link]) -> set[Link]:
    """Symmetrise two directional alignments (Koehn et al. 2005, "Edinburgh system description
    for the 2005 IWSLT speech translation evaluation"; also Koehn, Och & Marcu 2003, §4.2).

    Start from the intersection; GROW-DIAG repeatedly adds union links that are a horizontal,
    vertical or diagonal neighbour of a current link and cover a source or a target word that
    is still unaligned; FINAL(forward) then FINAL(backward) add the remaining links of each
    direction whose source or target word is still unaligned. Visits links in sorted order, so
    the result is deterministic.
    """
    union, links = forward | backward, forward & backward
    src_done, tgt_done = {i for i, _ in links}, {j for _, j in links}

    def add(link: Link) -> None:
        links.add(link)
        src_done.add(link[0])
        tgt_done.add(link[1])

    grown = True
    while grown:
        grown = False
        for i, j in sorted(links):
            for di, dj in _NEIGHBOURS:
                cand = (i + di, j + dj)
                if cand in union and cand not in links and (
                        cand[0] not in src_done or cand[1] not in tgt_done):
                    add(cand)
                    grown = True
    for direction in (forward, backward):
        for i, j in sorted(direction):
            if (i, j) not in links and (i not in src_done or j not in tgt_done):
                add((i, j))
    return links


def extract_links(weights: Any, method: str = DEFAULT_METHOD, *,
                  threshold: float | None = None) -> set[Link]:
    """Word alignment links (i, j) from a (T, S) matrix by one of METHODS:

    argmax-tgt (default): one link per target word to its most-attended source word;
    argmax-src: one link per source word to the target word attending to it most;
    intersection / union / grow-diag-final: the two argmax directions combined;
    threshold: every cell with weight >= threshold (default DEFAULT_THRESHOLD; pass it
    only with this method).
    """
    w = as_array(weights)
    if method not in METHODS:
        raise MtkitError(f"unknown alignment method {method!r}; expected one of "
                         f"{', '.join(METHODS)}")
    if threshold is not None and method != "threshold":
        raise MtkitError(f"a threshold applies only to method 'threshold', not {method!r}")
    if method == "threshold":
        p = DEFAULT_THRESHOLD if threshold is None else threshold
        if not 0.0 < p <= 1.0:
            raise MtkitError(f"alignment threshold must be in (0, 1], got {p}")
        return {(int(i), int(j)) for j, i in zip(*np.nonzero(w >= p), strict=True)}
    if method == "argmax-tgt":
        return argmax_tgt(w)
    if method == "argmax-src":
        return argmax_src(w)
    fwd, bwd = argmax_tgt(w), argmax_src(w)
    if method == "intersection":
        return fwd & bwd
    if method == "union":
        return fwd | bwd
    return grow_diag_final(fwd, bwd)


def format_pharaoh(links: Iterable[Link]) -> str:
    """Links as one Pharaoh line, 'i-j' pairs sorted by source then target: '0-0 1-2 2-1'."""
    return " ".join(f"{i}-{j}" for i, j in sorted(links))


# --------------------------------------------------------------------------- gold and AER

_LINK = re.compile(r"(\d+)([-?p])(\d+)")


@dataclass(frozen=True)
class Gold:
    """One sentence's gold links, 0-based. possible includes sure (P ⊇ S); where: 'file:line'."""

    sure: frozenset[Link]
    possible: frozenset[Link]
    where: str


def parse_links(line: str, *, one_based: bool = False, where: str = "<string>") -> Gold:
    """Parse one line of gold links: sure 'i-j', possible 'i?j' or 'ipj', separated by spaces.
    With one_based the file counts from 1 and the result is shifted to 0-based.
    Raises DataError naming `where` and the bad link."""
    sure: set[Link] = set()
    possible: set[Link] = set()
    base = 1 if one_based else 0
    for tok in line.split():
        m = _LINK.fullmatch(tok)
        if m is None or int(m[1]) < base or int(m[3]) < base:
            raise DataError(f"{where}: bad alignment link {tok!r}: expected i-j (sure) or "
                            f"i?j / ipj (possible), {base}-based source i and target j")
        link = (int(m[1]) - base, int(m[3]) - base)
        (sure if m[2] == "-" else possible).add(link)
    return Gold(frozenset(sure), frozenset(possible | sure), where)


def read_gold(path: str | Path, *, one_based: bool = False) -> list[Gold]:
    """Read a gold alignment file, one line per sentence pair (an empty line: no links)."""
    try:  # invalid UTF-8 cannot be a link: parse_links names its line
        lines = read_lines(path)
    except (OSError, EOFError) as e:
        raise DataError(f"cannot read gold alignments {path}: {e}") from None
    return [parse_links(line, one_based=one_based, where=f"{path}:{n}")
            for n, line in enumerate(lines, start=1)]


def check_gold_bounds(gold: Gold, n_src: int, n_tgt: int) -> None:
    """Raise DataError if a gold link points past the sentence's n_src / n_tgt words."""
    for i, j in sorted(gold.possible):
        if i >= n_src or j >= n_tgt:
            raise DataError(f"{gold.where}: gold link {i}-{j} (0-based) is outside the sentence "
                            f"pair ({n_src} source words, {n_tgt} target words)")


@dataclass(frozen=True)
class AlignScores:
    """Alignment quality against gold (Och & Ney 2003, §4), from link counts:
    precision = |A∩P| / |A|, recall = |A∩S| / |S|, AER = 1 - (|A∩S| + |A∩P|) / (|A| + |S|),
    where A are hypothesis links, S sure and P possible gold links (P ⊇ S). Empty sets:
    precision is 1 when A is empty, recall is 1 when S is empty, AER is 0 when both are."""

    precision: float
    recall: float
    aer: float
    hyp: int  # |A|
    sure: int  # |S|
    possible: int  # |P|
    hyp_sure: int  # |A ∩ S|
    hyp_possible: int  # |A ∩ P|

    @classmethod
    def from_counts(cls, hyp: int, sure: int, possible: int, hyp_sure: int,
                    hyp_possible: int) -> AlignScores:
        precision = hyp_possible / hyp if hyp else 1.0
        recall = hyp_sure / sure if sure else 1.0
        aer = 1.0 - (hyp_sure + hyp_possible) / (hyp + sure) if hyp + sure else 0.0
        return cls(precision, recall, aer, hyp, sure, possible, hyp_sure, hyp_possible)

    def as_dict(self) -> dict[str, float | int]:
        return dataclasses.asdict(self)


def score_links(hyp: Iterable[Link], gold: Gold) -> AlignScores:
    """Scores of one sentence's hypothesis links against its gold links."""
    a = set(hyp)
    return AlignScores.from_counts(len(a), len(gold.sure), len(gold.possible),
                                   len(a & gold.sure), len(a & gold.possible))


def score_corpus(hyps: Sequence[Iterable[Link]],
                 golds: Sequence[Gold]) -> tuple[AlignScores, list[AlignScores]]:
    """Corpus scores (link counts summed over sentences, the usual micro-average, not a mean
    of sentence AERs) and the per-sentence scores. Raises DataError on a count mismatch."""
    if len(hyps) != len(golds):
        where = golds[0].where.rsplit(":", 1)[0] if golds else "gold file"
        raise DataError(f"{where}: {len(golds)} gold lines for {len(hyps)} sentence pairs")
    per = [score_links(h, g) for h, g in zip(hyps, golds, strict=True)]
    fields = ("hyp", "sure", "possible", "hyp_sure", "hyp_possible")
    total = AlignScores.from_counts(*(sum(getattr(s, f) for s in per) for f in fields))
    return total, per


# --------------------------------------------------------------------------- JSON export


def matrix_record(matrix: AlignMatrix, *, index: int, links: Iterable[Link] | None = None,
                  scores: AlignScores | None = None, digits: int = 4) -> dict[str, Any]:
    """One sentence pair as JSON-ready data: its number, level, tokens, the (T, S) weights as
    rows of floats rounded to `digits`, and, when given, Pharaoh links and gold scores."""
    rec: dict[str, Any] = {
        "index": index,
        "level": matrix.level,
        "src_tokens": list(matrix.src_tokens),
        "tgt_tokens": list(matrix.tgt_tokens),
        "weights": np.round(matrix.weights, digits).tolist(),
    }
    if links is not None:
        rec["links"] = format_pharaoh(links)
    if scores is not None:
        rec["scores"] = scores.as_dict()
    return rec


def write_json(path: str | Path, records: Sequence[dict[str, Any]], *,
               scores: AlignScores | None = None) -> None:
    """Write records from `matrix_record` (and corpus scores) atomically as one JSON document:
    {"format": "mtkit-align", "version": 1, "sentences": [...], "scores": {...}}. weights[j][i]
    is the attention of target token j on source token i."""
    doc: dict[str, Any] = {"format": "mtkit-align", "version": 1, "sentences": list(records)}
    if scores is not None:
        doc["scores"] = scores.as_dict()
    with atomic_write(path) as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
