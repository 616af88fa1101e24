"""Binarized parallel data: one flat id array per side plus sentence offsets, as .npy files.

For a split ``NAME`` and side ``src``/``tgt`` the data directory holds ``NAME.src.ids.npy``
(every sentence's ids concatenated, without BOS/EOS; uint16 when the vocabulary fits, else
int32) and ``NAME.src.offsets.npy`` (int64, length N + 1: sentence i is
``ids[offsets[i]:offsets[i + 1]]``). Both load with ``np.load(mmap_mode="r")``, so opening a
large corpus reads only the offsets into memory. Validation and test splits also keep their
text (``NAME.src.txt``, ``NAME.tgt.txt``) so that BLEU is computed against the untouched
references, not against decoded sentencepiece ids.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mtkit.errors import DataError
from mtkit.fileio import atomic_write

SIDES = ("src", "tgt")


def ids_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (vocab_size <= 65536), else int32."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.int32)


def ids_path(data_dir: Path, split: str, side: str) -> Path:
    return Path(data_dir) / f"{split}.{side}.ids.npy"


def offsets_path(data_dir: Path, split: str, side: str) -> Path:
    return Path(data_dir) / f"{split}.{side}.offsets.npy"


def text_path(data_dir: str | Path, split: str, side: str) -> Path:
    """The stripped text of a validation or test split side (references for BLEU)."""
    return Path(data_dir) / f"{split}.{side}.txt"


def _save(path: Path, array: np.ndarray) -> None:
    with atomic_write(path, "wb") as f:
        np.save(f, array, allow_pickle=False)


def write_side(data_dir: Path, split: str, side: str, sents: Sequence[Sequence[int]],
               vocab_size: int) -> list[Path]:
    """Write one side of a split; returns the files written."""
    lens = np.fromiter((len(s) for s in sents), dtype=np.int64, count=len(sents))
    offsets = np.zeros(len(sents) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    ids = np.fromiter(itertools.chain.from_iterable(sents), dtype=ids_dtype(vocab_size),
                      count=int(offsets[-1]))
    paths = [ids_path(data_dir, split, side), offsets_path(data_dir, split, side)]
    _save(paths[0], ids)
    _save(paths[1], offsets)
    return paths


def write_text(data_dir: Path, split: str, side: str, lines: Sequence[str]) -> Path:
    path = text_path(data_dir, split, side)
    with atomic_write(path) as f:
        for line in lines:
            f.write(line + "\n")
    return path


class ParallelData:
    """A prepared split, memory-mapped. ``d.src(i)`` and ``d.tgt(i)`` are id arrays without
    BOS/EOS; ``d.src_lens`` and ``d.tgt_lens`` are (N,) int64 arrays of their lengths."""

    def __init__(self, src_ids: np.ndarray, src_offsets: np.ndarray, tgt_ids: np.ndarray,
                 tgt_offsets: np.ndarray, name: str = "") -> None:
        assert len(src_offsets) == len(tgt_offsets), "sides differ in sentence count"
        self.name = name
        self._ids = (src_ids, tgt_ids)
        self._off = (np.asarray(src_offsets), np.asarray(tgt_offsets))
        self.src_lens = np.diff(self._off[0])
        self.tgt_lens = np.diff(self._off[1])

    @classmethod
    def load(cls, data_dir: str | Path, split: str) -> ParallelData:
        """Open split `split` of a data directory written by `mtkit prep`."""
        data_dir = Path(data_dir)
        arrays = []
        for side in SIDES:
            for path in (ids_path(data_dir, split, side), offsets_path(data_dir, split, side)):
                if not path.is_file():
                    raise DataError(f"{path}: missing; is {split!r} a split of this recipe, "
                                    "and has `mtkit prep` run?")
                try:
                    arrays.append(np.load(path, mmap_mode="r", allow_pickle=False))
                except ValueError as e:
                    raise DataError(f"{path}: not a valid .npy file ({e})") from None
        src_ids, src_off, tgt_ids, tgt_off = arrays
        if (len(src_off) != len(tgt_off) or src_off[-1] != len(src_ids)
                or tgt_off[-1] != len(tgt_ids)):
            raise DataError(f"{data_dir}: split {split!r} is inconsistent; run `mtkit prep "
                            "--force`")
        return cls(src_ids, src_off, tgt_ids, tgt_off, name=split)

    def __len__(self) -> int:
        return len(self.src_lens)

    def _get(self, side: int, i: int) -> np.ndarray:
        off = self._off[side]
        return self._ids[side][off[i]:off[i + 1]]

    def src(self, i: int) -> np.ndarray:
        return self._get(0, i)

    def tgt(self, i: int) -> np.ndarray:
        return self._get(1, i)
