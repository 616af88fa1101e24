"""Reading parallel text in chunks: both sides of a corpus, line-aligned, in bounded memory.

Lines follow mtkit's text policy (`mtkit.fileio`: only ``\\n`` ends a line, invalid UTF-8 is
replaced and counted per file) and are stripped of surrounding whitespace (`read_blocks` reads
a whole file so). Memory is a few MB of text and one chunk of lines per side, whatever the
size of the files.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

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


class Corpus(NamedTuple):
    """The files of one corpus: source, target, and (training split only) its Pharaoh word
    alignment, one line per pair (`alignments`)."""

    src: Path
    tgt: Path
    align: Path | None = None
    key: str = ""  # the recipe's name for it ('data.train[1]'), which errors give
    tag: str | None = None  # put before every non-blank source line (data.*.tag)


class Chunk(NamedTuple):
    """Aligned lines of a corpus: source, target and, when the corpus has one, alignment;
    `first` is the 1-based line number of the chunk's first line in its files."""

    src: list[str]
    tgt: list[str]
    align: list[str] | None
    first: int


def read_corpus(corpus: Corpus, invalid: dict[str, InvalidUtf8], *,
                chunk: int | None = None) -> Iterator[Chunk]:
    """Aligned chunks of up to `chunk` (default `CHUNK`) lines of a corpus's files, the
    alignment read in step with its pair so that whatever drops a pair drops its links too.
    Invalid UTF-8 is counted in ``invalid[str(path)]`` (added when missing). Raises DataError
    when the files' line counts differ (found when the shorter file ends)."""
    chunk = chunk or CHUNK
    a, b = _Side(Path(corpus.src), invalid), _Side(Path(corpus.tgt), invalid)
    c = None if corpus.align is None else _Side(Path(corpus.align), invalid)
    first = 1
    while True:
        s, t = a.take(chunk), b.take(chunk)
        if len(s) != len(t):
            where = f" ({corpus.key}.src and .tgt)" if corpus.key else ""
            raise DataError(f"line counts differ{where}: {a.path} has {a.count()} lines, "
                            f"{b.path} has {b.count()}; expected one target line per source "
                            "line")
        links = None if c is None else c.take(chunk)
        if c is not None and links is not None and len(links) != len(s):
            raise DataError(_count_error(c.path, a.path, c.count(), a.count()))
        if not s:
            return
        if corpus.tag is not None:  # a blank line stays blank: cleaning drops the pair
            s = [f"{corpus.tag} {line}" if line.strip() else line for line in s]
        yield Chunk(s, t, links, first)
        first += len(s)


def _count_error(align: Path, src: Path, n_align: int, n_src: int) -> str:
    return (f"{align}: line {min(n_align, n_src) + 1}: the alignment has {n_align} lines but "
            f"the corpus has {n_src} ({src}); expected one line of links per sentence pair")


def read_pairs(src: str | Path, tgt: str | Path, invalid: dict[str, InvalidUtf8], *,
               chunk: int | None = None) -> Iterator[tuple[list[str], list[str]]]:
    """Aligned chunks of (source, target) lines of two files (`read_corpus` without an
    alignment)."""
    for part in read_corpus(Corpus(Path(src), Path(tgt)), invalid, chunk=chunk):
        yield part.src, part.tgt
