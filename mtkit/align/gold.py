"""Gold alignments and their scores: reading sure (``i-j``) and possible (``i?j``, ``ipj``)
links, and alignment error rate, precision and recall (Och & Ney 2003, §4)."""

from __future__ import annotations

import dataclasses
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mtkit.align.matrix import Link
from mtkit.errors import DataError
from mtkit.fileio import read_lines

# --------------------------------------------------------------------------- gold and AER

_LINK = re.compile(r"(\d+)([-?p])(\d+)")


@dataclass(frozen=True)
class Gold:
    """One sentence's gold links, 0-based. possible includes sure (P ⊇ S); where: 'file:line';
    base: what the file counts from (1 with --one-based), for messages in its own terms."""

    sure: frozenset[Link]
    possible: frozenset[Link]
    where: str
    base: int = 0


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
    return Gold(frozenset(sure), frozenset(possible | sure), where, base)


def read_gold(path: str | Path, *, one_based: bool = False) -> list[Gold]:
    """Read a gold alignment file, one line per sentence pair (an empty line: no links)."""
    try:  # invalid UTF-8 cannot be a link: parse_links names its line
        lines = read_lines(path)
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"cannot read gold alignments {path}: {e}") from None
    return [parse_links(line, one_based=one_based, where=f"{path}:{n}")
            for n, line in enumerate(lines, start=1)]


def check_gold_bounds(gold: Gold, n_src: int, n_tgt: int) -> None:
    """Raise DataError if a gold link points past the sentence's n_src / n_tgt words."""
    for i, j in sorted(gold.possible):
        if i >= n_src or j >= n_tgt:
            b = gold.base
            raise DataError(f"{gold.where}: gold link {i + b}-{j + b} ({b}-based) is outside the "
                            f"sentence pair ({n_src} source words, {n_tgt} target words)")


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

