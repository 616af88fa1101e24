"""Data sources: turn a recipe's `FileSource` into a verified local file.

A source is a local path (plain or .gz) or a URL with its sha256. A URL is looked up, in this
order, in the mirror folder (``--mirror DIR`` or ``$MTKIT_DATA_MIRROR``, by file name), in the
download cache (``$MTKIT_CACHE``, default ``~/.cache/mtkit``), and finally on the network. Every
file taken for a URL source is checked against its sha256; a download is written under a
temporary name and renamed into the cache only after its checksum matches, so the cache never
holds a file that a later run would trust wrongly.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Protocol

from mtkit.config import FileSource
from mtkit.errors import DataError
from mtkit.fileio import atomic_write


class DownloadProgress(Protocol):
    """Told about downloads as they happen. The command line turns it into a rich progress
    bar; the library owns no bar itself."""

    def __call__(self, name: str, done: int, total: int | None) -> None:
        """`done` bytes of file `name` (of `total`, when the server says) have arrived."""

    def verified(self, name: str, size: int) -> None:
        """`name` matched its sha256 and is in the cache (a file that fails is never told)."""


_CHUNK = 1 << 20
_TIMEOUT_S = 30


def cache_dir() -> Path:
    """The download cache: ``$MTKIT_CACHE`` or ``~/.cache/mtkit``."""
    env = os.environ.get("MTKIT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "mtkit"


def mirror_dir(mirror: str | Path | None = None) -> Path | None:
    """The mirror folder: the argument if given, else ``$MTKIT_DATA_MIRROR``, else None."""
    if mirror is not None:
        return Path(mirror).expanduser()
    env = os.environ.get("MTKIT_DATA_MIRROR")
    return Path(env).expanduser() if env else None


def sha256_file(path: str | Path) -> str:
    """The hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _verify(path: Path, expected: str | None, what: str) -> None:
    """`what`: the file or URL checked, and the recipe key that names it."""
    if expected is None:
        return
    actual = sha256_file(path)
    if actual != expected:
        raise DataError(f"{path}: checksum mismatch for {what}: expected sha256 {expected}, "
                        f"got {actual}")


def resolve(source: FileSource, *, mirror: str | Path | None = None,
            on_download: DownloadProgress | None = None, key: str | None = None) -> Path:
    """The verified local file for `source`, downloading it into the cache if needed.
    `key` (e.g. ``data.train.src``) names the recipe field in a missing-file or checksum
    error.

    Raises DataError when a local file is missing, a checksum does not match, or a URL file
    is neither in the mirror, nor in the cache, nor downloadable.
    """
    where = f" (recipe key {key})" if key else ""
    if source.path is not None:
        path = Path(source.path)
        if not path.is_file():
            what = "is a folder; expected a data file" if path.is_dir() else \
                "data file not found" if not path.exists() else \
                "is not a regular file (a pipe or device); prep reads a corpus twice: give a file"
            raise DataError(f"{path}: {what}{where}")
        _verify(path, source.sha256, f"{path}{where}")
        return path
    assert source.url is not None and source.sha256 is not None  # checked by the config
    name = source.file_name
    mdir = mirror_dir(mirror)
    if mdir is not None and (mdir / name).is_file():
        _verify(mdir / name, source.sha256, f"{source.url}{where}")
        return mdir / name
    cached = cache_dir() / source.sha256[:16] / name
    if cached.is_file():
        _verify(cached, source.sha256, f"{source.url}{where}")
        return cached
    try:
        _download(source.url, cached, source.sha256, on_download, where)
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        where = "" if mdir is None else f"not in the mirror {mdir}; " if mdir.is_dir() else \
            f"the mirror {mdir} does not exist; "
        raise DataError(
            f"{name}: cannot get {source.url} ({reason}); {where}connect to the network, or "
            f"put {name} in a folder DIR and pass --mirror DIR (or set MTKIT_DATA_MIRROR=DIR)"
        ) from None
    return cached


def _download(url: str, dest: Path, sha256: str, on_download: DownloadProgress | None,
              where: str = "") -> None:
    """Stream `url` to a temporary file beside `dest`; rename it only if the checksum matches
    (`atomic_write` drops the temporary file when the check raises)."""
    h = hashlib.sha256()
    with atomic_write(dest, "wb") as out, \
            urllib.request.urlopen(url, timeout=_TIMEOUT_S) as resp:
        length = resp.headers.get("Content-Length") if resp.headers else None
        total = int(length) if length and length.isdigit() else None
        done = 0
        for chunk in iter(lambda: resp.read(_CHUNK), b""):
            out.write(chunk)
            h.update(chunk)
            done += len(chunk)
            if on_download is not None:
                on_download(dest.name, done, total)
        if h.hexdigest() != sha256:
            raise DataError(f"{dest.name}: checksum mismatch for {url}{where}: expected sha256 "
                            f"{sha256}, got {h.hexdigest()}")
    if on_download is not None:
        on_download.verified(dest.name, done)
