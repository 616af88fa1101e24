"""Token-budget batching: sentences of similar length grouped into batches whose padded
source and target sizes each stay within `batch_tokens`.

Batches are cut once, greedily, along the sentences sorted by (longer side, target, source)
length; sorting on the longer side first keeps both sides' padding low at once. Each epoch
then (a) re-deals sentences of identical lengths among the batches, so a batch's company
changes between epochs while the batch sizes (and so the count) do not, and (b) shuffles the
batch order. Both come from a generator seeded with ``seed + epoch`` (all ranks agree).

Tokens are counted as the model sees them: a source of n ids is n + 1 with EOS, a target of n
ids is n + 1 with BOS (decoder input) or EOS (output). A sentence alone over the budget forms
a batch of its own. With `max_len`, lengths are counted after truncation to `max_len` ids, as
`iterate_batches` truncates.

Sharding: for rank r of w, the epoch's shuffled batches are cut to a multiple of w and rank r
takes every w-th. The remainder (fewer than w batches, different ones each epoch because the
order is shuffled first) is dropped, so ranks get disjoint batches of equal count; with w = 1
every sentence appears exactly once per epoch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from mtkit.data.batch import Batch, collate
from mtkit.data.store import ParallelData


class TokenBatchSampler:
    """Yields lists of sentence indices; ``len()`` is the number of batches per epoch on this
    rank, the same every epoch."""

    def __init__(self, src_lens: np.ndarray, tgt_lens: np.ndarray, *, batch_tokens: int,
                 seed: int, shuffle: bool = True, rank: int = 0, world_size: int = 1,
                 max_len: int | None = None) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, {world_size})")
        src = np.asarray(src_lens, dtype=np.int64)
        tgt = np.asarray(tgt_lens, dtype=np.int64)
        assert src.shape == tgt.shape, "source and target length arrays differ in size"
        if max_len is not None:
            src, tgt = np.minimum(src, max_len), np.minimum(tgt, max_len)
        self.src_tokens, self.tgt_tokens = src + 1, tgt + 1  # with EOS / BOS
        self.batch_tokens = batch_tokens
        self.seed, self.shuffle = seed, shuffle
        self.rank, self.world_size = rank, world_size
        self.epoch = 0
        self._order = self._sorted(np.arange(len(src)))
        self._bounds = _cut(self.src_tokens[self._order], self.tgt_tokens[self._order],
                            batch_tokens)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose order the next iteration yields."""
        self.epoch = epoch

    def _sorted(self, perm: np.ndarray) -> np.ndarray:
        # lexsort is stable: sentences with equal lengths keep their order in `perm`.
        s, t = self.src_tokens[perm], self.tgt_tokens[perm]
        return perm[np.lexsort((s, t, np.maximum(s, t)))]

    def batches(self) -> list[np.ndarray]:
        """This epoch's batches for this rank, in the order they are yielded."""
        if not len(self._order):
            return []
        if self.shuffle:
            rng = np.random.default_rng([self.seed, self.epoch])
            order = self._sorted(rng.permutation(len(self.src_tokens)))
        else:
            order = self._order
        batches = np.split(order, self._bounds)
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        usable = len(batches) - len(batches) % self.world_size
        return batches[self.rank:usable:self.world_size]

    def __iter__(self) -> Iterator[list[int]]:
        for b in self.batches():
            yield b.tolist()

    def __len__(self) -> int:
        return (len(self._bounds) + 1) // self.world_size if len(self.src_tokens) else 0

    def padding_efficiency(self) -> float:
        """Real / padded tokens over source and target together, for the batches as cut."""
        if not len(self._order):
            return 1.0
        s, t = self.src_tokens[self._order], self.tgt_tokens[self._order]
        starts = np.concatenate([[0], self._bounds])
        sizes = np.diff(np.concatenate([starts, [len(s)]]))
        padded = sizes * (np.maximum.reduceat(s, starts) + np.maximum.reduceat(t, starts))
        return float((s.sum() + t.sum()) / padded.sum())


def _cut(src_tokens: np.ndarray, tgt_tokens: np.ndarray, batch_tokens: int) -> np.ndarray:
    """Greedy batch boundaries along sorted lengths: start positions of batches 2..n."""
    bounds = []
    n = width = 0  # sentences in the batch so far, and its padded width (either side)
    for i, (s, t) in enumerate(zip(src_tokens.tolist(), tgt_tokens.tolist(), strict=True)):
        w = max(width, s, t)
        if n and (n + 1) * w > batch_tokens:
            bounds.append(i)
            n, w = 0, max(s, t)
        n, width = n + 1, w
    return np.asarray(bounds, dtype=np.int64)


def iterate_batches(data: ParallelData, sampler: Iterable[Sequence[int]],
                    max_len: int | None) -> Iterator[Batch]:
    """Padded `Batch`es for the index batches of `sampler` (a `TokenBatchSampler` or any
    iterable of index lists), in its order; sentences are truncated to `max_len` ids."""
    for idx in sampler:  # numpy slices: collate concatenates them without a token loop
        yield collate([data.src(i) for i in idx], [data.tgt(i) for i in idx], idx, max_len)
