"""One writer at a time in a run directory: `prep` and `train` hold ``.mtkit.lock`` (run.LOCK)
with an exclusive `flock` for as long as they run, and record who holds it (command, pid,
host, start time) so that a second writer is refused with that named; `average`, which reads
the checkpoints training prunes, shares it. The kernel drops a `flock` when its process dies,
however it dies (kill -9 included), so a lock is never left stale.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from mtkit.fileio import remove_empty
from mtkit.run import LOCK, RunDirError

_held: dict[Path, int] = {}  # run directories this process holds the lock of -> depth


@contextlib.contextmanager
def run_lock(run_dir: str | Path, command: str) -> Iterator[None]:
    """Hold the run directory's lock for `command` (prep, train); RunDirError naming the
    holder when another process has it. Re-entrant within a process (train runs prep)."""
    run_dir = Path(run_dir)
    key = run_dir.resolve()
    if key in _held:
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    path = run_dir / LOCK
    made, fd = _locked(run_dir, path)
    try:
        holder = {"command": command, "pid": os.getpid(), "host": socket.gethostname(),
                  "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        with contextlib.suppress(OSError):  # the record only names us to others
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(holder).encode(), 0)
        _held[key] = 1
        try:
            yield
        finally:
            del _held[key]
            # A command that failed before writing anything leaves no trace: the lock file
            # it made, and the folders it made for it (a user's own empty folder stays).
            with contextlib.suppress(OSError):
                if made and os.listdir(run_dir) == [LOCK]:
                    os.unlink(path)
                    remove_empty(made[1:])
    finally:
        os.close(fd)  # closing drops the flock


@contextlib.contextmanager
def run_read_lock(run_dir: str | Path) -> Iterator[None]:
    """Share the run directory's lock, for a command that reads what training writes and
    prunes (average); RunDirError naming the holder while prep or train holds it. Nothing is
    made or written (read access does): a run without the lock file was never trained in."""
    try:
        fd = os.open(Path(run_dir) / LOCK, os.O_RDONLY)
    except FileNotFoundError:
        yield
        return
    except OSError as e:
        raise RunDirError(f"{Path(run_dir) / LOCK}: cannot read the run lock ({e.strerror})"
                          ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirError(f"{run_dir}: in use by {_holder(fd)}; wait for it to end") \
                from None
        yield
    finally:
        os.close(fd)


def _locked(run_dir: Path, path: Path) -> tuple[list[Path], int]:
    """Create `run_dir` if needed and take the lock file's lock: (what was made here, the
    lock file first, then the folders made for it, deepest first; the open lock file). A
    holder removes what it made when it wrote nothing else (`run_lock`), so a lock taken on
    a file that is then no longer there (or another one is) is taken again."""
    while True:
        folders = [p for p in (run_dir, *run_dir.parents) if not p.exists()]
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
                made = [path, *folders]
            except FileExistsError:
                try:  # a link in its place is not followed: written through, it truncated
                    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)  # the file it named
                except OSError as e:
                    if e.errno != errno.ELOOP:
                        raise
                    os.unlink(path)  # a lock file of the run's own is made instead
                    continue
                made = []
        except OSError as e:
            raise RunDirError(f"{path}: cannot create the run lock ({e.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd) if _writer_holds(fd) else None
            # Readers hold it, or the holder went between the two tries (then it is ours now).
            if holder is not None or not _take(fd):
                os.close(fd)
                raise RunDirError(f"{run_dir}: in use by {holder or READER}; wait for it to "
                                  "end, or use another --run-dir") from None
        try:
            current = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            current = False
        if current:
            return made, fd
        os.close(fd)


READER = "mtkit average (reading checkpoints)"  # the one command that shares the lock


def _take(fd: int) -> bool:
    """Take the lock exclusively if no one holds it; whether it was taken."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _writer_holds(fd: int) -> bool:
    """Whether the lock refused to us is a writer's: readers (`run_read_lock`) share it and
    write no record, so the record names the last writer, which may be gone."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def _holder(fd: int) -> str:
    try:
        h = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return (f"mtkit {h['command']} (pid {h['pid']} on {h['host']}, since "
                f"{h['started']})")
    except (OSError, ValueError, KeyError, TypeError):
        return "another mtkit process"
