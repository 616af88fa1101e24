"""A vocabulary shortlist: for every source piece, the target pieces likely to appear in its
translation, learnt from a run's prepared training data (Marian's lexical shortlist and
CTranslate2's vocabulary map are the same idea; Schwenk 2007, Jean et al. 2015). Decoding a
batch then scores only the union of its source pieces' lists, the target side's most frequent
pieces and the special ids (`mtkit.decode.shortlist`).

The lists come from co-occurrence in the training pairs (no aligner): a target piece t is
ranked for a source piece s by the Dice coefficient 2 c(s, t) / (c(s) + c(t)), where c(s, t)
counts (s, t) token pairs within the same sentence pair; Dice, unlike p(t | s), does not put
the frequent pieces (which every batch gets anyway) at the head of every list.

Shapes: Vs, Vt source and target vocabulary sizes, K pieces per source piece, F frequent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mtkit.data.store import ParallelData
from mtkit.errors import CheckpointError
from mtkit.fileio import atomic_write
from mtkit.models.vocab import EOS_ID

FORMAT = 1
PER_SOURCE = 100  # K: Marian's usual "best" count (--shortlist lex.s2t 100 100)
FREQUENT = 100  # F: its usual "first" count
# Sentence pairs counted per chunk: a chunk's token pairs (sum of len(src) x len(tgt), ~200
# for Multi30k) stay within a few hundred MB of int64 keys.
CHUNK_PAIRS = 20_000


@dataclass(frozen=True)
class Shortlist:
    """table (Vs, K) target ids per source id, best first (padded with EOS); frequent (F,)
    the most frequent target ids; data_hash: the prepared data it was counted on."""

    table: np.ndarray
    frequent: np.ndarray
    data_hash: str

    @property
    def per_source(self) -> int:
        return int(self.table.shape[1])


def _pair_counts(data: ParallelData, vt: int, start: int, stop: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Unique keys s * Vt + t and their counts over the token pairs of pairs [start, stop)."""
    (src_ids, src_off), (tgt_ids, tgt_off) = data.flat("src"), data.flat("tgt")
    src = np.asarray(src_ids[src_off[start]:src_off[stop]], dtype=np.int64)
    tgt_base = int(tgt_off[start])
    tgt = np.asarray(tgt_ids[tgt_base:tgt_off[stop]], dtype=np.int64)
    ls, lt = data.src_lens[start:stop], data.tgt_lens[start:stop].astype(np.int64)
    sent = np.repeat(np.arange(stop - start), ls)  # sentence of each source token
    width = lt[sent]  # target tokens each source token pairs with
    first = np.cumsum(width) - width  # where each source token's block starts
    j = np.arange(int(width.sum())) - np.repeat(first, width)
    t_idx = np.repeat(tgt_off[start:stop][sent] - tgt_base, width) + j
    keys = np.repeat(src, width) * vt + tgt[t_idx]
    return np.unique(keys, return_counts=True)


def build_shortlist(data: ParallelData, src_vocab: int, tgt_vocab: int, data_hash: str, *,
                    per_source: int = PER_SOURCE, frequent: int = FREQUENT) -> Shortlist:
    """Count a prepared training split's co-occurrences and keep, per source piece, the
    `per_source` target pieces of highest Dice, and the `frequent` most frequent targets."""
    keys, counts = [], []
    for start in range(0, len(data), CHUNK_PAIRS):
        k, c = _pair_counts(data, tgt_vocab, start, min(start + CHUNK_PAIRS, len(data)))
        keys.append(k)
        counts.append(c)
    all_keys = np.concatenate(keys) if keys else np.zeros(0, np.int64)
    order = np.argsort(all_keys, kind="stable")
    all_keys, all_counts = all_keys[order], np.concatenate(counts or [np.zeros(0)])[order]
    uniq, first = np.unique(all_keys, return_index=True)
    pair = np.add.reduceat(all_counts, first) if uniq.size else np.zeros(0)
    c_src = np.bincount(np.asarray(data.flat("src")[0], dtype=np.int64), minlength=src_vocab)
    c_tgt = np.bincount(np.asarray(data.flat("tgt")[0], dtype=np.int64), minlength=tgt_vocab)
    s, t = uniq // tgt_vocab, uniq % tgt_vocab
    dice = 2 * pair / (c_src[s] + c_tgt[t])
    # best first within each source piece: sort by (s, -dice)
    rank = np.lexsort((-dice, s))
    s, t = s[rank], t[rank]
    starts = np.searchsorted(s, np.arange(src_vocab))
    pos = np.arange(s.size) - starts[s]
    keep = pos < per_source
    table = np.full((src_vocab, per_source), EOS_ID, dtype=np.int32)
    table[s[keep], pos[keep]] = t[keep]
    top = np.argsort(-c_tgt, kind="stable")[:frequent].astype(np.int32)
    return Shortlist(table, top, data_hash)


def save_shortlist(path: Path, shortlist: Shortlist) -> None:
    """Write `shortlist` to `path` (.npz; a file of the run directory mtkit owns)."""
    meta = json.dumps({"format": FORMAT, "data_hash": shortlist.data_hash,
                       "per_source": shortlist.per_source,
                       "frequent": int(shortlist.frequent.size)})
    with atomic_write(path, "wb", encoding=None, own=True) as f:
        np.savez(f, table=shortlist.table, frequent=shortlist.frequent,
                 meta=np.array(meta))


def load_shortlist(path: Path) -> Shortlist:
    """Read a file `save_shortlist` wrote; CheckpointError for anything else."""
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            table, frequent = z["table"], z["frequent"]
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not a shortlist mtkit wrote ({e}); move it away and "
                              "mtkit builds it again") from None
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: shortlist format {meta.get('format')!r}, expected "
                              f"{FORMAT}; move it away and mtkit builds it again")
    return Shortlist(table, frequent, str(meta.get("data_hash", "")))
