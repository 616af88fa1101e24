"""A uniform random sample of a stream of sentences (Vitter 1985, algorithm R), for training
sentencepiece on a corpus too big to hold.

Every item of the stream ends up in the sample with the same probability size / N, whatever
N; the decisions come from a seeded generator, so the same stream gives the same sample. Each
item carries an integer key, and the sample is returned sorted by key: a stream that fits
comes back whole and in key order (sentencepiece then trains on exactly the sentences, in
exactly the order, that it would have been given without sampling).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence

import numpy as np


class Reservoir:
    """At most `size` items of everything `add`ed (`size` 0: every item)."""

    def __init__(self, size: int, *, seed: int) -> None:
        self.size = size
        self.seen = 0  # items offered so far
        # A list while filling; an object array once full, so that a chunk's replacements
        # are one numpy assignment rather than a Python loop over ~1M of them per 2M pairs.
        self._items: list[str | None] | np.ndarray = []
        self._keys = array("q")
        self._rng = np.random.default_rng(seed)

    def add(self, items: Sequence[str], keys: np.ndarray) -> None:
        """Offer `items` (in stream order) with their (N,) int64 sort keys."""
        n = len(items)
        room = n if self.size == 0 else max(0, min(n, self.size - len(self._items)))
        if room:
            assert isinstance(self._items, list)
            self._items.extend(items[:room])
            self._keys.extend(keys[:room].tolist())
        if room < n:
            # Item number t (0-based) of the stream replaces slot j, drawn from [0, t], when
            # j < size. Drawn for the whole chunk at once; of the draws that hit the same slot
            # only the last one survives one-by-one replacement, so only it is applied.
            t = self.seen + np.arange(room, n)
            slots = self._rng.integers(0, t + 1)
            hits = np.flatnonzero(slots < self.size)
            slot, from_end = np.unique(slots[hits][::-1], return_index=True)
            winner = room + hits[len(hits) - 1 - from_end]  # the last draw of each slot
            np.frombuffer(self._keys, dtype=np.int64)[slot] = keys[winner]
            if isinstance(self._items, list):
                self._items = _object_array(self._items)
            self._items[slot] = _object_array([items[i] for i in winner.tolist()])
        self.seen += n

    def __len__(self) -> int:
        return len(self._items)

    def drain(self) -> Iterator[str]:
        """The sample in key order, each item released as it is handed out (so that its
        consumer's copy and this one do not both stay in memory)."""
        order = np.argsort(np.frombuffer(self._keys, dtype=np.int64), kind="stable")
        self._keys = array("q")
        if isinstance(self._items, np.ndarray):
            self._items = self._items.tolist()  # references only: the strings are shared
        for i in order.tolist():
            item, self._items[i] = self._items[i], None
            assert item is not None
            yield item
        self._items = []


def _object_array(items: Sequence[str]) -> np.ndarray:
    """(N,) object array holding the strings `items`."""
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out
