"""Exact-duplicate detection over a stream of pairs in bounded memory: 8 bytes a pair.

A pair is remembered by a 64-bit hash, not by its text, so a 40M-pair corpus costs 320 MB
rather than its strings. The hashes of the pairs kept so far sit in a few sorted arrays of
geometrically growing size (merged like the runs of a log-structured merge tree), so each new
chunk costs a binary search per run and each hash is merged O(log N) times.

Two different pairs share a hash with probability about N^2 / 2^65 (about 3e-6 for 10M pairs);
the later one is then dropped as a duplicate.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def pair_hashes(src: Sequence[str], tgt: Sequence[str]) -> np.ndarray:
    """(N,) int64 hashes of the (source, target) pairs."""
    return np.fromiter(map(hash, zip(src, tgt, strict=True)), dtype=np.int64, count=len(src))


class SeenPairs:
    """The set of pair hashes seen so far."""

    def __init__(self) -> None:
        self._runs: list[np.ndarray] = []  # sorted, unique, sizes decreasing geometrically

    def __len__(self) -> int:
        return sum(map(len, self._runs))

    def first_seen(self, hashes: np.ndarray) -> np.ndarray:
        """(N,) bool: True where a hash occurs for the first time (not in an earlier call, not
        earlier in `hashes`); those hashes are remembered."""
        uniq, first = np.unique(hashes, return_index=True)
        new = np.ones(len(uniq), dtype=bool)
        for run in self._runs:
            pos = np.minimum(np.searchsorted(run, uniq), len(run) - 1)
            new &= run[pos] != uniq
        out = np.zeros(len(hashes), dtype=bool)
        out[first[new]] = True
        if new.any():
            self._add(uniq[new])
        return out

    def _add(self, run: np.ndarray) -> None:
        self._runs.append(run)
        # Merge while the newer run is at least half the older one: sizes then at least double
        # down the list, so there are O(log N) runs.
        while len(self._runs) > 1 and 2 * len(self._runs[-1]) >= len(self._runs[-2]):
            newer = self._runs.pop()
            merged = np.concatenate([self._runs.pop(), newer])
            merged.sort(kind="stable")  # two sorted runs: timsort merges them in linear time
            self._runs.append(merged)
