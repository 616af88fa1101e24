"""Learning that the reader of a pipe mtkit writes to has gone, before writing to it again,
and after: what a command's end makes of a closed standard output."""

from __future__ import annotations

import contextlib
import os
import select
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from typing import IO


@contextlib.contextmanager
def watching_reader(out: IO, on_gone: Callable[[], None]) -> Iterator[None]:
    """While the block runs, call `on_gone` (from a thread of its own) once `out` is a pipe
    whose reader has closed it. A command that writes after long computations learns it then,
    not at its next write: `mtkit translate big.en | head -1` decoded a whole further chunk
    (~8 s of 2,000 lines) before writing found the pipe closed. Other outputs: no watch."""
    try:
        fd = out.fileno()
        is_pipe = stat.S_ISFIFO(os.fstat(fd).st_mode) and hasattr(select, "poll")
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is a ValueError
        is_pipe = False
    if not is_pipe:
        yield
        return
    wake_r, wake_w = os.pipe()  # written at the end, so the watch ends without a timeout

    def watch() -> None:
        poller = select.poll()
        poller.register(fd, 0)  # no events asked: a closed reader (POLLERR) is always told
        poller.register(wake_r, select.POLLIN)
        if any(f == fd and events & (select.POLLERR | select.POLLHUP)
               for f, events in poller.poll()):
            on_gone()

    watcher = threading.Thread(target=watch, name="mtkit-reader-watch", daemon=True)
    try:
        watcher.start()
        yield
    finally:
        os.write(wake_w, b"x")
        if watcher.is_alive():
            watcher.join()
        os.close(wake_r)
        os.close(wake_w)


def stdout_file() -> tuple[int, int] | None:
    """The file (device, inode) that stdout is, or None."""
    try:
        st = os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        return None
    return st.st_dev, st.st_ino


def reader_gone(stdout_was: tuple[int, int] | None) -> bool:
    """Whether stdout was a pipe whose reader has closed it: poll reports an error on it
    (click's case), or it is no longer the file it was but /dev/null (rich's
    `Console.on_broken_pipe` points it there before exiting 1)."""
    now = stdout_file()
    if now is not None and now != stdout_was:
        st = os.stat(os.devnull)
        return now == (st.st_dev, st.st_ino)
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no poll, or stdout is no file
        return False


def flush_stdout() -> None:
    """Write what is still buffered for stdout while a closed pipe can be told: a reader
    gone is no failure (stdout is dropped)."""
    from mtkit.process.startup import drop_stdout

    try:
        if sys.stdout is not None:  # None: closed before we started (`>&-`)
            sys.stdout.flush()
    except BrokenPipeError:
        drop_stdout()
