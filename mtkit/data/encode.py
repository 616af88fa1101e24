"""Prep's second pass: encode every split with the trained sentencepiece model(s) and write
it, chunk by chunk, into the staging folder (`store.SideWriter`).

The training split keeps the pairs the first pass let through (its keep mask) and then those
that pass the token rules (`clean.clean_tokens`); validation and test splits keep every pair
and their text (the references for BLEU). Token counts are summed on the way. A training split
with alignments keeps the links of the pairs it keeps, mapped onto pieces (`alignments`) and
written as the ``align`` side (`store`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain, compress
from pathlib import Path

import numpy as np

from mtkit.config import CleanConfig
from mtkit.data.alignments import AlignStats, Links, parse_links, piece_links, word_counts
from mtkit.data.clean import CleanStats, clean_tokens
from mtkit.data.spm import Tokenizer
from mtkit.data.store import ALIGN, SIDES, SideWriter, ids_dtype, text_path
from mtkit.data.stream import Chunk, Corpus, read_corpus


@dataclass
class SplitInfo:
    """One prepared split: pairs, ids per side, and sentences over `data.max_len`."""

    pairs: int = 0
    src_tokens: int = 0
    tgt_tokens: int = 0
    src_over_max_len: int = 0
    tgt_over_max_len: int = 0
    tags: dict[str, int] = field(default_factory=dict)  # pairs per data.*.tag, if any

    def add(self, src_lens: np.ndarray, tgt_lens: np.ndarray, max_len: int) -> None:
        self.pairs += len(src_lens)
        self.src_tokens += int(src_lens.sum())
        self.tgt_tokens += int(tgt_lens.sum())
        self.src_over_max_len += int((src_lens > max_len).sum())
        self.tgt_over_max_len += int((tgt_lens > max_len).sum())


@dataclass(frozen=True)
class TrainRules:
    """What cleans the training split in this pass: the first pass's (N,) keep mask over its
    lines, the token rules, and the stats they count into; `links` counts the alignments
    (None: the split has none)."""

    keep: np.ndarray
    clean: CleanConfig
    stats: CleanStats
    links: AlignStats | None = None


def _flat(ids: list[list[int]], dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Encoded sentences -> ((N,) int64 lengths, (sum of lengths,) ids concatenated)."""
    lens = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    return lens, np.fromiter(chain.from_iterable(ids), dtype=dtype, count=int(lens.sum()))


def encode_split(name: str, corpora: list[Corpus], tok: Tokenizer, out_dir: Path, *,
                 max_len: int, train: TrainRules | None = None) -> tuple[SplitInfo, list[Path]]:
    """Encode and write split `name` (its corpora concatenated); with `train`, clean it.
    Returns the split's numbers and the files written."""
    sizes = (tok.src_vocab_size, tok.tgt_vocab_size)
    writers = [SideWriter(out_dir, name, side, v) for side, v in zip(SIDES, sizes, strict=True)]
    if train is not None and train.links is not None:  # piece indices < clean.max_len
        writers.append(SideWriter(out_dir, name, ALIGN, train.clean.max_len))
    dtypes = [ids_dtype(v) for v in sizes]
    texts = [] if train else [open(text_path(out_dir, name, side), "w", encoding="utf-8")
                              for side in SIDES]  # closed below, with the writers
    info, start = SplitInfo(), 0
    try:
        for corpus in corpora:
            before = info.pairs
            for part in read_corpus(corpus, {}):  # the first pass counted bad UTF-8
                if train is None:
                    for f, lines in zip(texts, (part.src, part.tgt), strict=True):
                        f.write("".join(line + "\n" for line in lines))
                    sides = _encode(part.src, part.tgt, tok, dtypes)
                else:
                    sides = _encode_train(part, corpus, start, train, tok, dtypes)
                    start += len(part.src)
                info.add(sides[0][0], sides[1][0], max_len)
                for writer, (lens, flat) in zip(writers, sides, strict=True):
                    writer.append(flat, lens)
            if corpus.tag is not None:
                info.tags[corpus.tag] = info.tags.get(corpus.tag, 0) + info.pairs - before
    finally:
        for f in texts:
            f.close()
        paths = [p for w in writers for p in w.close()]
    return info, paths + [Path(f.name) for f in texts]


Side = tuple[np.ndarray, np.ndarray]  # (N,) lengths and the concatenated values


def _encode(src: list[str], tgt: list[str], tok: Tokenizer, dtypes: list[np.dtype]
            ) -> list[Side]:
    return [_flat(tok.encode_src_lines(src), dtypes[0]),
            _flat(tok.encode_tgt_lines(tgt), dtypes[1])]


def _encode_train(part: Chunk, corpus: Corpus, start: int, train: TrainRules, tok: Tokenizer,
                  dtypes: list[np.dtype]) -> list[Side]:
    """A training chunk's kept pairs, encoded (and their piece links as a third side when
    the split has alignments): the first pass's keep mask, then the token rules."""
    keep = train.keep[start:start + len(part.src)]
    src, tgt = list(compress(part.src, keep)), list(compress(part.tgt, keep))
    sides = _encode(src, tgt, tok, dtypes)
    kept = clean_tokens(sides[0][0], sides[1][0], train.clean, train.stats)
    if not kept.all():
        sides = [(lens[kept], flat[np.repeat(kept, lens)]) for lens, flat in sides]
    if train.links is None:
        return sides
    assert part.align is not None and corpus.align is not None
    lines = np.flatnonzero(keep)[kept]  # chunk positions of the kept pairs
    # Checked in the first pass, so parsing cannot fail here.
    words = parse_links([part.align[i] for i in lines], path=str(corpus.align), first_line=0)
    src, tgt = list(compress(src, kept)), list(compress(tgt, kept))
    links, unmapped = piece_links(words, word_counts(src), word_counts(tgt), sides[0],
                                  sides[1], (tok.starts_word("src"), tok.starts_word("tgt")))
    _count_links(train.links, words, links, unmapped, part.first + lines, corpus)
    return [*sides, (2 * links.counts, links.pairs.reshape(-1))]


def _count_links(stats: AlignStats, words: Links, links: Links, unmapped: np.ndarray,
                 lines: np.ndarray, corpus: Corpus) -> None:
    """Add a chunk to the alignment counts; lines: (N,) file line numbers of its pairs."""
    stats.pairs_kept += len(links.counts)
    stats.links_kept += len(words.pairs)
    stats.piece_links += len(links.pairs)
    if unmapped.any():
        stats.unmapped += int(unmapped.sum())
        if stats.first_unmapped is None:
            stats.first_unmapped = f"{corpus.align}:{int(lines[unmapped][0])}"
