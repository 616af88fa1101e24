"""Reading parallel text in chunks: both sides of a corpus, line-aligned, in bounded memory.

The same reading rules as `clean.read_lines`, applied block by block: lines are split on
``\\n`` only (so Unicode line separators inside a sentence never shift the alignment), invalid
UTF-8 becomes U+FFFD and the lines where it did are counted per file, surrounding whitespace is
stripped, and a final newline ends the last line rather than starting an empty one. Memory is a
few blocks and one chunk of lines per side, whatever the size of the files.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path

from mtkit.errors import DataError
from mtkit.fileio import is_gzip

_BLOCK = 1 << 22  # bytes read at a time
CHUNK = 50_000  # pairs per chunk: big enough for batch encoding, small next to a corpus


def _decode(block: bytes, path: Path, invalid: dict[str, int]) -> list[str]:
    """The stripped lines of `block` (complete lines, without the final newline)."""
    try:
        # One decode for the whole block; only a block with a bad byte is redone line by line.
        return [s.strip() for s in block.decode("utf-8").split("\n")]
    except UnicodeDecodeError:
        pass
    lines = []
    for b in block.split(b"\n"):
        try:
            lines.append(b.decode("utf-8").strip())
        except UnicodeDecodeError:
            lines.append(b.decode("utf-8", errors="replace").strip())
            invalid[str(path)] = invalid.get(str(path), 0) + 1
    return lines


def read_blocks(path: str | Path, invalid: dict[str, int]) -> Iterator[list[str]]:
    """The stripped lines of a plain or gzip UTF-8 file, a block's worth at a time; counts the
    lines with invalid UTF-8 into ``invalid[str(path)]``."""
    path = Path(path)
    try:
        opener = gzip.open if is_gzip(path) else open
        with opener(path, "rb") as f:
            pending: list[bytes] = []  # a line longer than a block, so far
            while block := f.read(_BLOCK):
                cut = block.rfind(b"\n")
                if cut < 0:
                    pending.append(block)
                    continue
                head = b"".join([*pending, block[:cut]]) if pending else block[:cut]
                pending = [block[cut + 1:]]
                yield _decode(head, path, invalid)
            tail = b"".join(pending)
            if tail:  # a last line without a final newline
                yield _decode(tail, path, invalid)
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"{path}: cannot read ({e})") from None


class _Side:
    """One side's lines, handed out `take(n)` at a time."""

    def __init__(self, path: Path, invalid: dict[str, int]) -> None:
        self.path = path
        self._blocks = read_blocks(path, invalid)
        self._buf: list[str] = []
        self._pos = 0
        self.taken = 0

    def take(self, n: int) -> list[str]:
        while len(self._buf) - self._pos < n:
            block = next(self._blocks, None)
            if block is None:
                break
            self._buf = self._buf[self._pos:] + block
            self._pos = 0
        out = self._buf[self._pos:self._pos + n]
        self._pos += len(out)
        self.taken += len(out)
        return out

    def count(self) -> int:
        """Lines in the whole file (reads what is left of it)."""
        return self.taken + len(self._buf) - self._pos + sum(map(len, self._blocks))


def read_pairs(src: str | Path, tgt: str | Path, invalid: dict[str, int], *,
               chunk: int | None = None) -> Iterator[tuple[list[str], list[str]]]:
    """Aligned chunks of up to `chunk` (default `CHUNK`) (source, target) lines of two files.
    Raises DataError naming both files and their line counts when the counts differ (found
    when the shorter file ends)."""
    chunk = chunk or CHUNK
    a, b = _Side(Path(src), invalid), _Side(Path(tgt), invalid)
    while True:
        s, t = a.take(chunk), b.take(chunk)
        if len(s) != len(t):
            raise DataError(f"line counts differ: {a.path} has {a.count()} lines, "
                            f"{b.path} has {b.count()}")
        if not s:
            return
        yield s, t
