"""Small file helpers shared by every command: atomic writes, and reading plain or gzip text
under one policy for lines and encodings.

Text policy (every input mtkit reads: corpora, sources, references, hypotheses, alignments):
only ``\n`` ends a line (a Unicode line separator inside a sentence never shifts the
alignment of parallel files); a file's last line needs no ``\n``; a byte-order mark that
starts a file is dropped (it is no text: it joined the first word); invalid UTF-8 bytes are
replaced with U+FFFD, and the command warns once per file with the number of such lines and
the first of them (`InvalidUtf8.warning`), rather than stopping a long job over a few bytes.

Write policy: every output is written to a temporary file beside its destination and renamed
into place only when complete (a device or a pipe, such as /dev/null, is written directly); a
failure to write is a `WriteError` naming the destination and the system's reason (disk full,
read-only, a folder in the way), never a traceback; folders made for it are removed again.
Figures are outputs too (`save_figure`), and reproducible: the same figure gives the same bytes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gzip
import io
import os
import re
import shutil
import stat
import sys
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from mtkit.errors import DataError, MtkitError


class WriteError(MtkitError):
    """An output could not be written (disk full, read-only folder, a folder in the way)."""


WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO, errno.EACCES,
                 errno.EPERM, errno.EISDIR, errno.ENOTDIR, errno.ENOENT, errno.EEXIST}


def write_error(path: str | Path, e: OSError) -> WriteError:
    """The one-line error for a failed write of `path`, with the OS's reason."""
    return WriteError(f"{path}: cannot write ({e.strerror or str(e)})")


def umask() -> int:
    """The process's file-creation mask (reading it means setting it, so it is set back)."""
    os.umask(mask := os.umask(0))
    return mask


# What atomic_write leaves of a file when its writer is killed: '.align-0007.png.k3j2x_ab.tmp'
# (mkstemp's prefix and suffix below, and its eight characters).
_TEMPORARY = re.compile(r"\.(.+)\.[a-z0-9_]{8}\.tmp")


def temporary_of(name: str) -> str | None:
    """The file name an atomic_write temporary called `name` was for, or None."""
    return m.group(1) if (m := _TEMPORARY.fullmatch(name)) else None


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", encoding: str | None = "utf-8", *,
                 own: bool = False) -> Iterator[IO]:
    """Write to a temporary file beside `path` and rename it into place only on success,
    so an interrupted write never leaves a half-written file that a later run trusts.

    A file the user names (`own` False): a symbolic link is followed (the file it names is
    replaced, the link stays), a file replaced keeps its permissions, and what is not a plain
    file (/dev/null, /dev/stdout, a named pipe) is written as it is. A file of a folder mtkit
    owns (`own`: a run directory, an export, a heatmap folder) is written as a file of that
    folder: whatever has its name, a link included, is replaced, never written through, so a
    link put there cannot make mtkit write elsewhere."""
    path = Path(path)
    if own:
        if path.is_dir() and not path.is_symlink():
            raise WriteError(f"{path}: is a folder; expected a file name")
        yield from _renamed_into_place(path, path, mode, encoding, None)
        return
    if path.is_dir():
        raise WriteError(f"{path}: is a folder; expected a file name")
    fd = _open_descriptor(path)
    if fd is not None:
        # through a copy of the open descriptor, appending: nothing replaced or truncated
        yield from _write_directly(path, lambda: os.fdopen(
            os.dup(fd), mode.replace("w", "a"), encoding=None if "b" in mode else encoding))
        return
    try:
        found: os.stat_result | None = path.stat()  # of what a link points to
    except OSError:
        found = None
    if found is not None and not stat.S_ISREG(found.st_mode):
        yield from _write_directly(path, lambda: open(
            path, mode, encoding=None if "b" in mode else encoding))
        return
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    if found is not None and not writable(target):
        # A rename needs only the folder's permission: it replaced a file that the shell's
        # `>` refuses (another user's, or one made read-only), and took it over.
        raise WriteError(f"{path}: cannot write (Permission denied)")
    # mkstemp creates 0600; give the file the permissions it had, or those a plain open()
    # would give a new one.
    yield from _renamed_into_place(path, target, mode, encoding,
                                   stat.S_IMODE(found.st_mode) if found else None)


_WRITING: set[str] = set()  # atomic_write's temporaries being written now


def _renamed_into_place(path: Path, target: Path, mode: str, encoding: str | None,
                        permissions: int | None) -> Iterator[IO]:
    """Write a temporary beside `target` and rename it over `target` on success (with
    `permissions`, else those a plain open() gives a new file); `path` names it in errors."""
    fd, tmp, made = _temporary(path, target)
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~umask() if permissions is None else permissions)
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        remove_empty(made)  # a failed write leaves no folders made for it
        # A file system error of our file; one naming another file (say, reading an input)
        # or from the network (a download written through us) is the caller's.
        if isinstance(e, OSError) and e.errno in WRITE_ERRNOS and e.filename in (None, tmp):
            raise write_error(path, e) from None
        raise
    finally:
        _WRITING.discard(tmp)


def open_own(path: str | Path, flags: int = os.O_WRONLY | os.O_APPEND | os.O_CREAT) -> int:
    """A descriptor of a file of a folder mtkit owns (a run's log, metrics, lock), opened
    without following a link: a link found there is removed and a file of the folder made in
    its place (writing through it would change a file elsewhere)."""
    path = Path(path)
    try:
        return os.open(path, flags | os.O_NOFOLLOW, 0o666)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
    os.unlink(path)
    return os.open(path, flags | os.O_NOFOLLOW, 0o666)


def writable(path: str | Path) -> bool:
    """Whether this process may write the existing file `path` (as the shell's `>` would)."""
    return os.access(path, os.W_OK, effective_ids=os.access in os.supports_effective_ids)


def _temporary(path: Path, target: Path) -> tuple[int, str, list[Path]]:
    """A new temporary file beside `target`, recorded as being written: its descriptor, its
    name, and the folders made for it (deepest first); `path` names it in an error."""
    made = [p for p in target.parents if not p.exists()]
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        hold(fd)
    except FileExistsError:  # a file where a parent folder should be
        remove_empty(made)
        raise WriteError(f"{path}: cannot write (a parent of it is a file, not a folder)"
                         ) from None
    except OSError as e:
        remove_empty(made)
        raise write_error(path, e) from None
    _WRITING.add(tmp)
    return fd, tmp, made


def hold(fd: int) -> None:
    """Mark a temporary (file or folder) as being written by taking its lock, which closing
    it drops: `remove_leftovers` then leaves it alone. Where the file system has no locks,
    nothing is held."""
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def remove_leftovers(folder: Path, name: str) -> int:
    """Remove the temporaries of `name` in `folder` (`.NAME.XXXXXXXX.tmp`, the names
    `atomic_write` and mkdtemp give them) that a command killed mid-write left: those no live
    writer holds (`hold`). Returns how many."""
    pattern = re.compile(rf"\.{re.escape(name)}\.[a-z0-9_]{{8}}\.tmp")
    removed = 0
    for p in sorted(folder.iterdir()) if folder.is_dir() else ():
        if not pattern.fullmatch(p.name) or p.is_symlink():
            continue
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: a live writer's (or no locks here: left alone)
            os.close(fd)
            continue
        try:
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
            removed += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def remove_temporaries() -> None:
    """Remove the temporaries of the writes under way, for a process about to be killed
    outright (a second SIGTERM): their `atomic_write` never gets to."""
    for tmp in list(_WRITING):
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def remove_empty(folders: list[Path]) -> None:  # deepest first, while they are empty
    with contextlib.suppress(OSError):
        for folder in folders:
            folder.rmdir()


# Names of this process's open files: /dev/stdout under `> log` is the file `log`, which a
# rename would replace and an open() for writing would truncate (under `>> log` too).
_DESCRIPTOR = re.compile(r"/dev/(?:(stdout)|(stderr)|fd/(\d+))|/proc/self/fd/(\d+)")


def _open_descriptor(path: Path) -> int | None:
    """The file descriptor `path` names (/dev/stdout, /dev/fd/N, ...), or None."""
    if (m := _DESCRIPTOR.fullmatch(os.path.abspath(path))) is None:
        return None
    return 1 if m[1] else 2 if m[2] else int(m[3] or m[4])


def is_terminal(path: str | Path) -> bool:
    """Whether `path` is a terminal (`-i /dev/stdin` typed at one). Only character devices are
    opened to ask: opening and closing a pipe's reading end could cost its writer SIGPIPE."""
    try:
        if not stat.S_ISCHR(os.stat(path).st_mode):
            return False
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return os.isatty(fd)
    finally:
        os.close(fd)


def names_stdout(path: str | Path) -> bool:
    """Whether `path` is a name of this process's standard output (/dev/stdout, /dev/fd/1)."""
    return _open_descriptor(Path(path)) == 1


def _write_directly(path: Path, open_it: Callable[[], IO]) -> Iterator[IO]:
    """Write the file `open_it` opens as it is, a failure named by `path` as every write's."""
    try:
        f = open_it()
    except OSError as e:
        raise write_error(path, e) from None
    try:
        with f:  # closing flushes what is buffered: it fails as a write does
            yield f
            f.flush()
    except OSError as e:
        if e.errno in WRITE_ERRNOS and e.filename in (None, str(path)):
            raise write_error(path, e) from None
        raise


GZIP_MAGIC = b"\x1f\x8b"  # a gzip stream's first two bytes, whatever the file is called
BOM = b"\xef\xbb\xbf"  # UTF-8's byte-order mark, which Windows editors put first


def missing_input(path: str | Path, what: str) -> str | None:
    """Why `path` cannot be read as the `what` file, or None. A pipe (`<(zcat f)`) or a device
    is read like a file."""
    if Path(path).is_dir():
        return f"{path}: is a folder; expected the {what} file"
    return None if Path(path).exists() else f"{path}: {what} file not found"


def unicode_problem(text: str) -> str | None:
    """Why `text` is not text that can be written as UTF-8, or None: a lone surrogate
    (``"\\ud800"``, which JSON's escapes and Python's literals can spell and no UTF-8 text
    holds) reaches sentencepiece and CTranslate2 as their RuntimeError otherwise."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"not valid Unicode text (a lone surrogate at character {e.start})"
    return None


def open_text(path: str | Path, errors: str = "strict") -> IO[str]:
    """Open a UTF-8 text file for reading, transparently decompressing `.gz`."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8", errors=errors, newline="\n")


# --------------------------------------------------------------------------- reading text


@dataclass
class InvalidUtf8:
    """Lines of one input where invalid UTF-8 was replaced: how many, and the first (from 1);
    and lines holding NUL bytes (valid UTF-8, but no text: sentencepiece reads them as
    unknown pieces)."""

    name: str
    lines: int = 0
    first: int = 0
    nul_lines: int = 0
    nul_first: int = 0

    def note(self, line_number: int) -> None:
        self.lines += 1
        self.first = self.first or line_number

    def note_nul(self, line_number: int) -> None:
        self.nul_lines += 1
        self.nul_first = self.nul_first or line_number

    @property
    def found(self) -> bool:
        """Whether the input had anything to warn of."""
        return bool(self.lines or self.nul_lines)

    def warning(self) -> str | None:
        """The one warning every command gives for this input, or None when it was clean."""
        said = []
        for n, first, what in ((self.lines, self.first, "invalid UTF-8 on {}, replaced with "
                                "U+FFFD"),
                               (self.nul_lines, self.nul_first, "NUL bytes on {}, read as "
                                "unknown pieces")):
            if n:
                where = f"{n} line{'s' if n != 1 else ''}" + (
                    f" (first: line {first})" if first else "")
                said.append(what.format(where))
        return f"{self.name}: {'; '.join(said)}" if said else None


# A NUL byte this early in an input marks a binary file, not text with a stray byte (git's and
# grep's test): a .docx, a PDF or UTF-16 text given as lines to translate.
BINARY_HEAD = 8000


class NotText(DataError):
    """An input read as lines of text that is a binary file (`BINARY_HEAD`)."""


def decode_lines(raw: Iterable[bytes], report: InvalidUtf8, *,
                 refuse_binary: bool = False) -> Iterator[str]:
    """Decode byte lines (each ending in ``\n`` except perhaps the last) under the text policy:
    lines without their ``\n``, invalid UTF-8 replaced and counted in `report`. A damaged
    gzip stream (cut short, corrupt) is a `DataError` naming `report.name`. With
    `refuse_binary`, a NUL byte in the first `BINARY_HEAD` bytes is `NotText` (translation
    input: its output would be noise); corpora count such lines and go on."""
    read = 0  # bytes before this line
    try:
        for number, line in enumerate(raw, 1):
            if number == 1 and line.startswith(BOM):
                if line == BOM:  # no \n: a file that holds only its mark holds no line
                    continue
                line = line[len(BOM):]
            if refuse_binary and read < BINARY_HEAD and b"\0" in line[:BINARY_HEAD - read]:
                raise NotText(f"{report.name}: not text: a NUL byte on line {number}, in its "
                              f"first {BINARY_HEAD:,} bytes (a binary file)")
            read += len(line)
            line = line[:-1] if line.endswith(b"\n") else line
            if b"\0" in line:
                report.note_nul(number)
            try:
                yield line.decode("utf-8")
            except UnicodeDecodeError:
                report.note(number)
                yield line.decode("utf-8", errors="replace")
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:  # raised by reading `raw` only
        raise DataError(f"{report.name}: broken gzip file ({e})") from None


def count_lines(path: str | Path) -> int | None:
    """The lines of a plain (not gzip) regular file, as `decode_lines` reads them, counted in
    its bytes without decoding; None for what cannot be read twice or counted cheaply (a pipe,
    a terminal, gzip). A file on standard input (`< f`) is counted as /dev/stdin."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with open(path, "rb") as f:
            if f.read(2) == GZIP_MAGIC:
                return None
            f.seek(0)
            count, last = 0, b"\n"
            while block := f.read(_BLOCK):
                count, last = count + block.count(b"\n"), block[-1:]
    except OSError:  # no /dev/stdin here, or unreadable: the count is only for a progress bar
        return None
    return count + (last != b"\n")


def open_binary(path: str | Path) -> IO[bytes]:
    """A plain or gzip file as a binary stream (whatever the file is called). The file is
    opened once and its first bytes peeked at: a pipe cannot be read twice."""
    raw: IO[bytes] = open(path, "rb")
    try:
        head = raw.peek(2)[:2]
        if head == GZIP_MAGIC[:1]:  # a pipe that has delivered one byte of gzip's two so far
            head = raw.read(2)
            raw = io.BufferedReader(_Prefixed(head, raw))
    except BaseException:
        raw.close()
        raise
    return _GzipReader(raw) if head == GZIP_MAGIC else raw


class _Prefixed(io.RawIOBase):
    """`first`, then the rest of `rest`: bytes read to look at put back in front."""

    def __init__(self, first: bytes, rest: IO[bytes]) -> None:
        self._first, self._rest = first, rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._first:
            n = min(len(buffer), len(self._first))
            buffer[:n], self._first = self._first[:n], self._first[n:]
            return n
        return self._rest.readinto1(buffer)  # what is there: a line typed waits for no more

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._rest.close()


class _GzipReader(gzip.GzipFile):
    """gzip over a file it closes when closed (GzipFile leaves a file object it is given
    open)."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def stdin_raw() -> IO[bytes]:
    """Standard input's bytes; a DataError when it is closed (`<&-`: sys.stdin is None)."""
    if sys.stdin is None:
        raise DataError("standard input is closed; give an input file or redirect it")
    return sys.stdin.buffer


def stdin_binary() -> IO[bytes]:
    """Standard input as a binary stream, decompressed when it is gzip (`zcat` not needed:
    files are read either way). Peeking waits for the first bytes, as reading would."""
    raw = stdin_raw()
    head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    return gzip.GzipFile(fileobj=raw, mode="rb") if head == GZIP_MAGIC else raw


_BLOCK = 1 << 22  # bytes read at a time by read_line_blocks


def _decode_block(block: bytes, first_line: int, report: InvalidUtf8) -> list[str]:
    """The lines of `block` (complete lines, without the final ``\n``); line `first_line`
    (from 1) is its first, for the report."""
    if b"\0" in block:  # rare: counted line by line (one scan of the block otherwise)
        for number, line in enumerate(block.split(b"\n"), first_line):
            if b"\0" in line:
                report.note_nul(number)
    try:
        # One decode for the whole block; only a block with a bad byte goes line by line.
        return block.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        pass
    lines = []
    for number, line in enumerate(block.split(b"\n"), first_line):
        try:
            lines.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            report.note(number)
            lines.append(line.decode("utf-8", errors="replace"))
    return lines


def read_line_blocks(path: str | Path, report: InvalidUtf8) -> Iterator[list[str]]:
    """The lines of a plain or gzip text file under the text policy, a few MB of them at a
    time (bounded memory whatever the file's size; a line longer than a block is joined)."""
    with open_binary(path) as f:
        pending: list[bytes] = []  # the start of a line longer than a block, so far
        done = 0  # lines handed out
        while block := f.read(_BLOCK):
            cut = block.rfind(b"\n")
            if cut < 0:
                pending.append(block)
                continue
            head = b"".join([*pending, block[:cut]]) if pending else block[:cut]
            head = head if done else head.removeprefix(BOM)
            pending = [block[cut + 1:]]
            lines = _decode_block(head, done + 1, report)
            done += len(lines)
            yield lines
        tail = b"".join(pending) if done else b"".join(pending).removeprefix(BOM)
        if tail:  # a last line without its \n
            yield _decode_block(tail, done + 1, report)


def read_lines(path: str | Path, report: InvalidUtf8 | None = None) -> list[str]:
    """Every line of a plain or gzip text file, under the text policy (see the module doc)."""
    report = report if report is not None else InvalidUtf8(str(path))
    return [line for block in read_line_blocks(path, report) for line in block]


# Metadata keys matplotlib fills with the save date, per format: cleared, so that the same
# figure gives the same bytes.
_NO_DATES = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}


def save_figure(fig: Any, path: str | Path, fmt: str, *, dpi: int | None = None,
                own: bool = False) -> None:
    """Write a matplotlib `Figure` to `path` atomically as PNG, SVG or PDF, reproducibly: SVG
    keeps text as <text> with fixed ids, PDF embeds TrueType, and no save date is stored.
    own: `path` is a file of a folder mtkit owns (`atomic_write`)."""
    import matplotlib  # here: most commands draw nothing, and matplotlib is slow to import

    with matplotlib.rc_context({"svg.fonttype": "none", "pdf.fonttype": 42,
                                "svg.hashsalt": "mtkit"}), atomic_write(path, "wb", own=own) as f:
        fig.savefig(f, format=fmt, dpi=dpi, metadata=_NO_DATES[fmt])
