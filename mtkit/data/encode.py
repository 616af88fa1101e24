"""Prep's second pass: encode every split with the trained sentencepiece model(s) and write
it, chunk by chunk, into the staging folder (`store.SideWriter`).

The training split keeps the pairs the first pass let through (its keep mask) and then those
that pass the token rules (`clean.clean_tokens`); validation and test splits keep every pair
and their text (the references for BLEU). Token counts are summed on the way.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain, compress
from pathlib import Path

import numpy as np

from mtkit.config import CleanConfig
from mtkit.data.clean import CleanStats, clean_tokens
from mtkit.data.scan import Corpus
from mtkit.data.spm import Tokenizer
from mtkit.data.store import SIDES, SideWriter, ids_dtype, text_path
from mtkit.data.stream import read_pairs


@dataclass
class SplitInfo:
    """One prepared split: pairs, ids per side, and sentences over `data.max_len`."""

    pairs: int = 0
    src_tokens: int = 0
    tgt_tokens: int = 0
    src_over_max_len: int = 0
    tgt_over_max_len: int = 0

    def add(self, src_lens: np.ndarray, tgt_lens: np.ndarray, max_len: int) -> None:
        self.pairs += len(src_lens)
        self.src_tokens += int(src_lens.sum())
        self.tgt_tokens += int(tgt_lens.sum())
        self.src_over_max_len += int((src_lens > max_len).sum())
        self.tgt_over_max_len += int((tgt_lens > max_len).sum())


@dataclass(frozen=True)
class TrainRules:
    """What cleans the training split in this pass: the first pass's (N,) keep mask over its
    lines, the token rules, and the stats they count into."""

    keep: np.ndarray
    clean: CleanConfig
    stats: CleanStats


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
    dtypes = [ids_dtype(v) for v in sizes]
    texts = [] if train else [open(text_path(out_dir, name, side), "w", encoding="utf-8")
                              for side in SIDES]  # closed below, with the writers
    info, start = SplitInfo(), 0
    try:
        for src_path, tgt_path in corpora:
            for src, tgt in read_pairs(src_path, tgt_path, {}):  # first pass counted bad UTF-8
                if train is not None:
                    keep = train.keep[start:start + len(src)]
                    start += len(src)
                    src, tgt = list(compress(src, keep)), list(compress(tgt, keep))
                else:
                    for f, lines in zip(texts, (src, tgt), strict=True):
                        f.write("".join(line + "\n" for line in lines))
                sides = [_flat(tok.encode_src_lines(src), dtypes[0]),
                         _flat(tok.encode_tgt_lines(tgt), dtypes[1])]
                if train is not None:
                    sides = _clean(sides, train)
                info.add(sides[0][0], sides[1][0], max_len)
                for writer, (lens, flat) in zip(writers, sides, strict=True):
                    writer.append(flat, lens)
    finally:
        for f in texts:
            f.close()
        paths = [p for w in writers for p in w.close()]
    return info, paths + [Path(f.name) for f in texts]


def _clean(sides: list[tuple[np.ndarray, np.ndarray]], train: TrainRules
           ) -> list[tuple[np.ndarray, np.ndarray]]:
    """The encoded chunk less the pairs that break a token rule."""
    keep = clean_tokens(sides[0][0], sides[1][0], train.clean, train.stats)
    if keep.all():
        return sides
    return [(lens[keep], flat[np.repeat(keep, lens)]) for lens, flat in sides]
