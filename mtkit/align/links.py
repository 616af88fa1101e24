"""Pharaoh links from an alignment matrix: argmax in either direction, their intersection,
union and grow-diag-final (Koehn et al. 2003), or a threshold; and the ``i-j`` format."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, get_args

import numpy as np

from mtkit.align.matrix import Link, as_array
from mtkit.errors import MtkitError, OptionError, Problem, choice

# The methods that need no least weight: those a translation's aligner takes
# (`mtkit.translation.lines.pharaoh_aligner`, the server's align_method).
AlignerMethod = Literal["argmax-tgt", "argmax-src", "intersection", "union", "grow-diag-final"]
LinkMethod = Literal[AlignerMethod, "threshold"]
METHODS: tuple[LinkMethod, ...] = get_args(LinkMethod)
DEFAULT_METHOD: LinkMethod = "argmax-tgt"
DEFAULT_THRESHOLD = 0.5
# How `mtkit align --reverse` combines the links of the two directions.
Symmetrization = Literal["grow-diag-final", "intersection", "union"]
SYMMETRIZATIONS: tuple[Symmetrization, ...] = ("grow-diag-final", "intersection", "union")


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


def symmetrize(forward: set[Link], backward: set[Link], how: Symmetrization) -> set[Link]:
    """Combine two directional link sets, both as (source i, target j): their intersection
    (precise), union (full recall) or grow-diag-final between the two (`grow_diag_final`)."""
    if how == "intersection":
        return forward & backward
    if how == "union":
        return forward | backward
    if how == "grow-diag-final":
        return grow_diag_final(forward, backward)
    raise MtkitError(f"unknown symmetrization {how!r}; expected one of "
                     f"{', '.join(SYMMETRIZATIONS)}")


def link_problems(method: str, threshold: float | None, *, option: str = "method",
                  thresholds: bool = True) -> list[Problem]:
    """What is wrong with a choice of link extraction (`extract_links`'s arguments), the
    method named `option`; without `thresholds`, 'threshold' is not among the choices (the
    caller offers no threshold)."""
    methods = METHODS if thresholds else tuple(m for m in METHODS if m != "threshold")
    if method not in methods:
        return [Problem(option, f"invalid choice {method!r}; expected one of "
                        f"{', '.join(methods)}")]
    if threshold is not None and method != "threshold":
        return [Problem("threshold", "applies only to {0} threshold", others=(option,))]
    if threshold is not None and not 0.0 < threshold <= 1.0:
        return [Problem("threshold", "expected an attention weight in (0, 1]", value=threshold)]
    return []


def extract_links(weights: Any, method: str = DEFAULT_METHOD, *,
                  threshold: float | None = None) -> set[Link]:
    """Word alignment links (i, j) from a (T, S) matrix by one of METHODS:

    argmax-tgt (default): one link per target word to its most-attended source word;
    argmax-src: one link per source word to the target word attending to it most;
    intersection / union / grow-diag-final: the two argmax directions combined;
    threshold: every cell with weight >= threshold (default DEFAULT_THRESHOLD; pass it
    only with this method).
    """
    if problems := link_problems(method, threshold):
        raise OptionError(*problems)
    w = as_array(weights)
    if method == "threshold":
        p = DEFAULT_THRESHOLD if threshold is None else threshold
        return {(int(i), int(j)) for j, i in zip(*np.nonzero(w >= p), strict=True)}
    if method == "argmax-tgt":
        return argmax_tgt(w)
    if method == "argmax-src":
        return argmax_src(w)
    return symmetrize(argmax_tgt(w), argmax_src(w), choice("method", method, Symmetrization))


def format_pharaoh(links: Iterable[Link]) -> str:
    """Links as one Pharaoh line, 'i-j' pairs sorted by source then target: '0-0 1-2 2-1'."""
    return " ".join(f"{i}-{j}" for i, j in sorted(links))

