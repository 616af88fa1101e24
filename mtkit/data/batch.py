"""The batch every model, loss and search consumes."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
import torch

from mtkit.data.store import ParallelData
from mtkit.models.vocab import BOS_ID, EOS_ID, PAD_ID


@dataclass(frozen=True)
class Batch:
    """src: (B, S) ids ending in EOS, right-padded with PAD; src_lens: (B,);
    tgt_in: (B, T) BOS + target ids; tgt_out: (B, T) target ids + EOS (PAD where padded);
    ids: (B,) positions of the sentences in their split (to restore input order);
    align: (B, T, S) bool gold links for guided alignment, or None: align[b, j, i] is True when
    target piece j (row j of tgt_out) is linked to source piece i (never EOS or padding).

    src_lens stays on the host when the batch moves to a device (`to`): lengths are
    bookkeeping that the host reads (packing an RNN's input needs them on the CPU, and a
    device copy read back would stall a GPU's queue once per batch); models copy them to
    the device themselves where they build a mask."""

    src: torch.Tensor
    src_lens: torch.Tensor
    tgt_in: torch.Tensor | None
    tgt_out: torch.Tensor | None
    ids: torch.Tensor
    align: torch.Tensor | None = None

    @property
    def num_tgt_tokens(self) -> int:
        return 0 if self.tgt_out is None else int((self.tgt_out != PAD_ID).sum())

    @property
    def num_linked_rows(self) -> int:
        """Target pieces with at least one gold link (what the alignment loss averages over)."""
        return 0 if self.align is None else int(self.align.any(dim=-1).sum())

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """The batch with every tensor but src_lens on `device`."""
        def mv(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device, non_blocking=non_blocking)

        return Batch(mv(self.src), self.src_lens, mv(self.tgt_in), mv(self.tgt_out),
                     mv(self.ids), mv(self.align))

    def pin_memory(self) -> Batch:
        def pin(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.pin_memory()

        return Batch(pin(self.src), pin(self.src_lens), pin(self.tgt_in), pin(self.tgt_out),
                     pin(self.ids), pin(self.align))


def _flat(seqs: Sequence[Sequence[int]], max_len: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Token-id sequences -> (their lengths after truncation to max_len (B,), all their ids
    concatenated (sum of lengths,)), without a Python loop over tokens."""
    lens = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    if max_len is not None and (lens > max_len).any():
        seqs = [s[:max_len] for s in seqs]
        lens = np.minimum(lens, max_len)
    total = int(lens.sum())
    if seqs and isinstance(seqs[0], np.ndarray):
        flat = np.concatenate(seqs).astype(np.int64, copy=False) if total else \
            np.zeros(0, np.int64)
    else:
        flat = np.fromiter(chain.from_iterable(seqs), dtype=np.int64, count=total)
    return lens, flat


def _padded(lens: np.ndarray, flat: np.ndarray, width: int, start: int) -> np.ndarray:
    """(B, width) PAD-filled rows holding each sequence from column `start` on."""
    out = np.full((len(lens), width), PAD_ID, dtype=np.int64)
    cols = np.arange(width - start)
    out[:, start:][cols < lens[:, None]] = flat  # row-major order = concatenation order
    return out


def collate(src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]] | None,
            ids: Sequence[int], max_len: int | None = None, *,
            links: Sequence[np.ndarray] | None = None) -> Batch:
    """Build a padded batch from token-id sequences (lists or numpy arrays, without BOS/EOS);
    truncates each to max_len ids before adding EOS (and BOS). links: per pair, (L, 2) gold
    links (source piece, target piece), made dense as `Batch.align` (links to a piece cut by
    max_len are dropped with it).

    Vectorised with numpy: on the GPU a 25k-token batch (about 1,700 sentences) must be ready
    faster than the device trains on it, which a per-sentence tensor loop was not."""
    rows = np.arange(len(src))
    lens, flat = _flat(src, max_len)
    src_np = _padded(lens, flat, int(lens.max()) + 1, 0)
    src_np[rows, lens] = EOS_ID
    tin = tout = gold = None
    if tgt is not None:
        t_lens, t_flat = _flat(tgt, max_len)
        width = int(t_lens.max()) + 1
        tin_np = _padded(t_lens, t_flat, width, 1)
        tin_np[:, 0] = BOS_ID
        tout_np = _padded(t_lens, t_flat, width, 0)
        tout_np[rows, t_lens] = EOS_ID
        tin, tout = torch.from_numpy(tin_np), torch.from_numpy(tout_np)
        if links is not None:
            gold = torch.from_numpy(_dense_links(links, lens, t_lens, (width, src_np.shape[1])))
    return Batch(torch.from_numpy(src_np), torch.from_numpy(lens + 1), tin, tout,
                 torch.from_numpy(np.array(list(ids), dtype=np.int64)), gold)


def padded_ids(seqs: Sequence[Sequence[int]]) -> torch.Tensor:
    """Token-id sequences as (B, max(1, longest)) rows, PAD after each (e.g. target prefixes:
    an empty one is a row of PAD)."""
    lens, flat = _flat(seqs, None)
    return torch.from_numpy(_padded(lens, flat, max(1, int(lens.max(initial=0))), 0))


def _dense_links(links: Sequence[np.ndarray], src_lens: np.ndarray, tgt_lens: np.ndarray,
                 shape: tuple[int, int]) -> np.ndarray:
    """Per-pair (L, 2) links -> (B, T, S) bool, [b, target piece, source piece]; links beyond
    a pair's (truncated) lengths are dropped. Dense per batch: at a few thousand tokens a
    batch the matrix is a few hundred kB, and the loss reads it whole anyway."""
    counts = np.fromiter((len(k) for k in links), dtype=np.int64, count=len(links))
    flat = (np.concatenate([np.asarray(k, dtype=np.int64).reshape(-1, 2) for k in links])
            if counts.sum() else np.zeros((0, 2), dtype=np.int64))
    row = np.repeat(np.arange(len(links)), counts)
    p, q = flat[:, 0], flat[:, 1]
    ok = (p < src_lens[row]) & (q < tgt_lens[row])
    out = np.zeros((len(links), *shape), dtype=bool)
    out[row[ok], q[ok], p[ok]] = True
    return out


def iterate_batches(data: ParallelData, sampler: Iterable[Sequence[int]],
                    max_len: int | None) -> Iterator[Batch]:
    """Padded `Batch`es for the index batches of `sampler` (a `TokenBatchSampler` or any
    iterable of index lists), in its order; sentences are truncated to `max_len` ids. With
    gold links when `data` was opened with them (guided alignment)."""
    for idx in sampler:  # numpy slices: collate concatenates them without a token loop
        links = [data.links(i) for i in idx] if data.has_links else None
        yield collate([data.src(i) for i in idx], [data.tgt(i) for i in idx], idx, max_len,
                      links=links)
