"""Reading parallel text in chunks: both sides of a corpus, line-aligned, in bounded memory.

Lines follow mtkit's text policy (`mtkit.fileio`: only ``\\n`` ends a line, invalid UTF-8 is
replaced and counted per file) and are stripped of surrounding whitespace, as `clean.read_lines`
does for a whole file. Memory is a few MB of text and one chunk of lines per side, whatever the
size of the files.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

from mtkit.errors import DataError
from mtkit.fileio import InvalidUtf8, read_line_blocks

CHUNK = 50_000  # pairs per chunk: big enough for batch encoding, small next to a corpus


def read_blocks(path: str | Path, report: InvalidUtf8) -> Iterator[list[str]]:
    """The stripped lines of a plain or gzip file, a block at a time, under the text policy
    (`fileio.read_line_blocks`); invalid UTF-8 is counted in `report`."""
    path = Path(path)
    try:
        for block in read_line_blocks(path, report):
            yield [line.strip() for line in block]
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"{path}: cannot read ({e})") from None


class _Side:
    """One side's lines, handed out `take(n)` at a time."""

    def __init__(self, path: Path, invalid: dict[str, InvalidUtf8]) -> None:
        self.path = path
        self._blocks = read_blocks(path, invalid.setdefault(str(path), InvalidUtf8(str(path))))
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


def read_pairs(src: str | Path, tgt: str | Path, invalid: dict[str, InvalidUtf8], *,
               chunk: int | None = None) -> Iterator[tuple[list[str], list[str]]]:
    """Aligned chunks of up to `chunk` (default `CHUNK`) (source, target) lines of two files.
    Invalid UTF-8 is counted in ``invalid[str(path)]`` (added when missing). Raises DataError
    naming both files and their line counts when the counts differ (found when the shorter file
    ends)."""
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
