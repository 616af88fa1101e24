"""Binarized parallel data: one flat id array per side plus sentence offsets, as .npy files.

For a split ``NAME`` and side ``src``/``tgt`` the data directory holds ``NAME.src.ids.npy``
(every sentence's ids concatenated, without BOS/EOS; uint16 when the vocabulary fits, else
int32) and ``NAME.src.offsets.npy`` (int64, length N + 1: sentence i is
``ids[offsets[i]:offsets[i + 1]]``). Both load with ``np.load(mmap_mode="r")``, so opening a
large corpus reads only the offsets into memory. Validation and test splits also keep their
text (``NAME.src.txt``, ``NAME.tgt.txt``) so that BLEU is computed against the untouched
references, not against decoded sentencepiece ids.

A training split prepared with word alignments (``data.train.align``) also holds its gold
piece links, stored as a side named ``align``: ``NAME.align.ids.npy`` holds each pair's links
as (source piece, target piece) index pairs, flattened (2 entries a link, uint16 when
``data.clean.max_len`` fits), and ``NAME.align.offsets.npy`` (int64, N + 1) delimits them
per pair. Data directories without them are the same as ever (data format 1 either way).

`SideWriter` writes a side chunk by chunk (prep streams corpora of any size); the files are
the same bytes that ``np.save`` of the whole arrays would write.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from mtkit.errors import DataError

SIDES = ("src", "tgt")
ALIGN = "align"  # the side name of the training split's piece links


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


# np.save writes a version 1.0 header of 128 bytes for any 1-D array (the shape's digits
# fit easily): a streamed file reserves that much and fills it in when the length is known.
_HEADER_BYTES = 128


def _npy_header(dtype: np.dtype, length: int) -> bytes:
    """The .npy header np.save writes for a (length,) array of `dtype`."""
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {
        "descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
        "shape": (length,)})
    header = out.getvalue()
    assert len(header) == _HEADER_BYTES, "a 1-D .npy header is 128 bytes"
    return header


class _ArrayFile:
    """A 1-D .npy file written in pieces: the same bytes as np.save of their concatenation."""

    def __init__(self, path: Path, dtype: np.dtype) -> None:
        self.path, self.dtype, self.length = path, np.dtype(dtype), 0
        self._f = open(path, "wb")  # closed by close(), once the length is known
        self._f.write(b"\0" * _HEADER_BYTES)

    def append(self, values: np.ndarray) -> None:
        self._f.write(np.ascontiguousarray(values, dtype=self.dtype).tobytes())
        self.length += len(values)

    def close(self) -> None:
        self._f.seek(0)
        self._f.write(_npy_header(self.dtype, self.length))
        self._f.close()


class SideWriter:
    """Writes one side of a split (ids and offsets files, see the module docstring) chunk by
    chunk, into a directory that the caller makes atomic (prep's staging folder)."""

    def __init__(self, data_dir: Path, split: str, side: str, vocab_size: int) -> None:
        self._ids = _ArrayFile(ids_path(data_dir, split, side), ids_dtype(vocab_size))
        self._offsets = _ArrayFile(offsets_path(data_dir, split, side), np.dtype(np.int64))
        self._offsets.append(np.zeros(1, dtype=np.int64))
        self._end = 0  # ids written so far

    def append(self, flat: np.ndarray, lens: np.ndarray) -> None:
        """Add sentences: their ids concatenated (sum(lens),) and their (N,) lengths."""
        self._ids.append(flat)
        self._offsets.append(self._end + np.cumsum(lens, dtype=np.int64))
        self._end += int(flat.size)

    def close(self) -> list[Path]:
        """Finish both files; returns their paths."""
        self._ids.close()
        self._offsets.close()
        return [self._ids.path, self._offsets.path]


def _load_npy(path: Path) -> np.ndarray:
    """An array file of prep's, mapped; a damaged one is named with the remedy (numpy's own
    message would suggest loading it with pickle allowed)."""
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError:
        raise DataError(f"{path}: not a valid .npy file (damaged?); run `mtkit prep --force` "
                        "to prepare the data again") from None


_LENGTH_CHUNK = 1 << 22  # offsets differenced at a time


def _lengths(path: Path) -> np.ndarray:
    """(N,) int32 sentence lengths from an offsets file. Read through a mapping of its own
    that is closed afterwards, so that the file's pages do not stay in this process's resident
    memory (80 MB a side at 10M pairs); training then maps in only the offsets it reads."""
    offsets = _load_npy(path)
    out = np.empty(max(len(offsets) - 1, 0), dtype=np.int32)
    for i in range(0, len(out), _LENGTH_CHUNK):
        out[i:i + _LENGTH_CHUNK] = np.diff(offsets[i:i + _LENGTH_CHUNK + 1])
    del offsets
    return out


class ParallelData:
    """A prepared split, memory-mapped. ``d.src(i)`` and ``d.tgt(i)`` are id arrays without
    BOS/EOS; ``d.src_lens`` and ``d.tgt_lens`` are (N,) int32 arrays of their lengths."""

    def __init__(self, src_ids: np.ndarray, src_offsets: np.ndarray, tgt_ids: np.ndarray,
                 tgt_offsets: np.ndarray, name: str = "",
                 lens: tuple[np.ndarray, np.ndarray] | None = None,
                 links: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        assert len(src_offsets) == len(tgt_offsets), "sides differ in sentence count"
        assert links is None or len(links[1]) == len(src_offsets), "links per sentence"
        self.name = name
        self._links = links
        self._ids = (src_ids, tgt_ids)
        self._off = (np.asarray(src_offsets), np.asarray(tgt_offsets))
        if lens is None:
            lens = (np.diff(self._off[0]).astype(np.int32),
                    np.diff(self._off[1]).astype(np.int32))
        self.src_lens, self.tgt_lens = lens

    @classmethod
    def load(cls, data_dir: str | Path, split: str, *, links: bool = False) -> ParallelData:
        """Open split `split` of a data directory written by `mtkit prep`; with `links`, its
        gold piece links too (a training split prepared with alignments)."""
        data_dir = Path(data_dir)
        arrays = []
        for side in SIDES:
            for path in (ids_path(data_dir, split, side), offsets_path(data_dir, split, side)):
                if not path.is_file():
                    raise DataError(f"{path}: missing; is {split!r} a split of this recipe, "
                                    "and has `mtkit prep` run?")
                arrays.append(_load_npy(path))
        src_ids, src_off, tgt_ids, tgt_off = arrays
        if (len(src_off) != len(tgt_off) or src_off[-1] != len(src_ids)
                or tgt_off[-1] != len(tgt_ids)):
            raise DataError(f"{data_dir}: split {split!r} is inconsistent; run `mtkit prep "
                            "--force`")
        lens = (_lengths(offsets_path(data_dir, split, "src")),
                _lengths(offsets_path(data_dir, split, "tgt")))
        return cls(src_ids, src_off, tgt_ids, tgt_off, name=split, lens=lens,
                   links=_load_links(data_dir, split, len(src_off)) if links else None)

    def __len__(self) -> int:
        return len(self.src_lens)

    def _get(self, side: int, i: int) -> np.ndarray:
        off = self._off[side]
        return self._ids[side][off[i]:off[i + 1]]

    def src(self, i: int) -> np.ndarray:
        return self._get(0, i)

    def flat(self, side: str) -> tuple[np.ndarray, np.ndarray]:
        """Side `side` (src or tgt): every sentence's ids concatenated (memory-mapped) and the
        (N + 1,) offsets that delimit them."""
        i = SIDES.index(side)
        return self._ids[i], self._off[i]

    def tgt(self, i: int) -> np.ndarray:
        return self._get(1, i)

    @property
    def has_links(self) -> bool:
        return self._links is not None

    def links(self, i: int) -> np.ndarray:
        """(L, 2) gold links of pair i: (source piece, target piece) indices."""
        assert self._links is not None, "opened without links"
        flat, off = self._links
        return flat[off[i]:off[i + 1]].reshape(-1, 2)


def _load_links(data_dir: Path, split: str, offsets: int) -> tuple[np.ndarray, np.ndarray]:
    """The (flat, offsets) arrays of a split's piece links, memory-mapped."""
    arrays = []
    for path in (ids_path(data_dir, split, ALIGN), offsets_path(data_dir, split, ALIGN)):
        if not path.is_file():
            raise DataError(f"{path}: missing; guided alignment (train.guided_alignment) needs "
                            "the training split prepared with its word alignments "
                            "(data.train.align): run `mtkit prep`")
        arrays.append(_load_npy(path))
    flat, off = arrays
    if len(off) != offsets or off[-1] != len(flat):
        raise DataError(f"{data_dir}: the alignments of split {split!r} do not fit its "
                        "sentences; run `mtkit prep --force`")
    return flat, np.asarray(off)
