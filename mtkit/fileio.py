"""Small file helpers shared by every command: atomic writes and reading plain or gzip text."""

from __future__ import annotations

import contextlib
import gzip
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


def umask() -> int:
    """The process's file-creation mask (reading it means setting it, so it is set back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Write to a temporary file beside `path` and rename it into place only on success,
    so an interrupted write never leaves a half-written file that a later run trusts."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        # mkstemp creates 0600; give the file the permissions a plain open() would.
        os.chmod(tmp, 0o666 & ~umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


GZIP_MAGIC = b"\x1f\x8b"  # a gzip stream's first two bytes, whatever the file is called


def is_gzip(path: str | Path) -> bool:
    with open(path, "rb") as probe:
        return probe.read(2) == GZIP_MAGIC


def open_text(path: str | Path, errors: str = "strict") -> IO[str]:
    """Open a UTF-8 text file for reading, transparently decompressing `.gz`."""
    if is_gzip(path):
        return gzip.open(path, "rt", encoding="utf-8", errors=errors, newline="\n")
    return open(path, encoding="utf-8", errors=errors, newline="\n")
