"""Prep's first pass: read every split once, check it, and learn what the second pass needs.

The training split is cleaned by the text rules as it streams by (`clean.clean_text`), which
gives a keep mask over its lines (1 byte a pair) and the sentencepiece training sample, drawn
by reservoir sampling (`reservoir.Reservoir`) so that memory is bounded by the sample size,
not by the corpus. Validation and test splits are only read, so that a broken file (line counts
that differ, unreadable gzip) stops prep before sentencepiece is trained. A training corpus's
alignment file is read in step with it and checked here, every line (`alignments`).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import compress

import numpy as np

from mtkit.config import DataConfig
from mtkit.data.alignments import check_links, parse_links
from mtkit.data.clean import CleanStats, clean_text
from mtkit.data.dedup import SeenPairs
from mtkit.data.reservoir import Reservoir
from mtkit.data.stream import Chunk, Corpus, read_corpus

__all__ = ["Corpus", "TrainScan", "count_lines", "scan_train"]

# Fixed (not train.seed) because the data section alone decides prep.
_SAMPLE_SEED = 1
# Sample keys: a source sentence is keyed by its pair's line number, a target sentence by that
# plus this, so that a joint sample lists every source sentence before every target one.
_TGT_KEY = 1 << 40


@dataclass
class TrainScan:
    """keep: (N,) bool over the training split's lines, the pairs that pass the text rules;
    samples: the sentencepiece sample, one reservoir when joint, else source and target;
    links_read: word links in the split's alignment files (0 without alignments)."""

    keep: np.ndarray
    samples: list[Reservoir]
    stats: CleanStats
    links_read: int = 0


def count_lines(corpora: list[Corpus], invalid: dict[str, int]) -> int:
    """Pairs in a split; raises DataError on unreadable files or differing line counts."""
    return sum(len(part.src) for corpus in corpora for part in read_corpus(corpus, invalid))


def scan_train(corpora: list[Corpus], data: DataConfig, invalid: dict[str, int]) -> TrainScan:
    """Clean the training split's text and sample it for sentencepiece, streaming."""
    size = data.spm.input_sentence_size
    samples = [Reservoir(size, seed=_SAMPLE_SEED + i) for i in range(1 if data.spm.joint else 2)]
    stats = CleanStats()
    seen = SeenPairs() if data.clean.dedup else None
    masks, start, links_read = [], 0, 0
    for corpus in corpora:
        for part in read_corpus(corpus, invalid):
            links_read += _checked_links(part, corpus)
            src, tgt = part.src, part.tgt
            keep = clean_text(src, tgt, data.clean, stats, seen)
            lines = start + np.flatnonzero(keep)
            src_kept, tgt_kept = list(compress(src, keep)), list(compress(tgt, keep))
            if data.spm.joint:
                samples[0].add(src_kept + tgt_kept, np.concatenate([lines, lines + _TGT_KEY]))
            else:
                samples[0].add(src_kept, lines)
                samples[1].add(tgt_kept, lines)
            masks.append(keep)
            start += len(src)
    keep = np.concatenate(masks) if masks else np.zeros(0, dtype=bool)
    return TrainScan(keep=keep, samples=samples, stats=stats, links_read=links_read)


def _checked_links(part: Chunk, corpus: Corpus) -> int:
    """Check a chunk's alignment lines against their pairs (every line, before cleaning: the
    file must describe the corpus it names); returns its number of links."""
    if part.align is None:
        return 0
    links = parse_links(part.align, path=str(corpus.align), first_line=part.first)
    check_links(links, part.src, part.tgt, path=str(corpus.align), first_line=part.first)
    return len(links.pairs)
