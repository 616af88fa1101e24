"""A command's start-up without the cyclic garbage collector; its standard output at exit.

Loading a model imports torch and builds the model: some 170,000 Python objects that live as
long as the process. While they are made, the collector runs again and again and scans all of
them, finding next to nothing (185 objects freed in an `import torch`), so `import torch`
alone runs about a tenth faster with it paused (bench/RESULTS.md, "Start-up without the
collector's scans").

Paused only, the work is deferred, not saved: the first collections after loading scanned
everything made meanwhile (230 ms in `mtkit translate`), and the collections of the
interpreter's exit all of it again (exit took 0.65-0.85 s, frozen 0.17-0.25 s). So when mtkit
owns the process (the console script, `python -m mtkit`), the objects that exist when loading
ends are frozen (`gc.freeze`): no later collection scans them, exit's included. A program
that calls mtkit's commands in-process, such as the tests, is left as it was: frozen objects
that later become cyclic garbage would never be freed there."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import sys
from collections.abc import Iterator
from typing import NoReturn

from mtkit.errors import Terminated
from mtkit.fileio import remove_temporaries
from mtkit.process.signals import SignalEcho

_OWNED = {"process": False}


def own_process() -> None:
    """Called by the console script's entry point: mtkit runs one command and exits."""
    _OWNED["process"] = True


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cyclic garbage collector off; afterwards it is on again if it
    was on, with what exists then frozen if mtkit owns the process."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _OWNED["process"]:
            gc.freeze()
        if was_on:
            gc.enable()


def before_exit() -> None:
    """What the command made is about to be dropped with the process: freeze it too, so the
    collection at interpreter exit has nothing to scan (mtkit's outputs are closed and renamed
    into place before a command returns; none waits on a finaliser)."""
    if _OWNED["process"]:
        gc.freeze()


def end_interrupted(code: int) -> NoReturn:
    """End the process of a command that Ctrl-C or a termination signal stopped, with exit
    code `code`, without the interpreter's exit. The signal's exception unwound the main
    thread at whatever bytecode it reached, and mtkit's clean-up ran as it unwound (the
    outputs' temporaries are gone; a training run stopped by Ctrl-C has written its
    checkpoint, while its own handlers' SIGTERM and SIGHUP stops, not recorded in
    `TERMINATED`, leave by the interpreter's exit); what the exit would add is waiting: for
    threads that are not daemons (a thread pool's workers, which the exit joins) and for
    library exit handlers, none of which a stopped command needs (a `translate` was once
    still alive 60 s after saying "terminated": its main thread was done, so the wait was
    there). Logs and standard streams are flushed first."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed, or its reader gone
            if stream is not None:
                stream.flush()
    os._exit(code)


TERMINATED: list[int] = []  # the signal that asked the process to end, once one has
_ECHO = SignalEcho()


def handle_termination() -> None:
    """SIGTERM and SIGHUP raise `Terminated` in the main thread, so that a command stops as
    on Ctrl-C: the files it was writing are dropped (killed outright, it left their
    temporaries behind). Python runs a handler between bytecodes of the main thread, so a
    long call into a library ends first (sentencepiece's training runs in a thread of its own
    for that reason: `mtkit.data.spm`); a second signal, while the first one's
    clean-up runs (waiting for an engine's running batches), has the default effect at once,
    after removing `atomic_write`'s temporaries of the outputs being written (a staging
    folder of prep's is removed by the next prep); the same signal within a second of the
    first is its echo (`mtkit.process.signals`) and ignored.
    A signal ignored when mtkit started (`nohup`) stays ignored; training installs its own
    handlers (a graceful stop with a checkpoint)."""
    def terminate(signum: int, frame: object) -> None:
        if _ECHO.is_echo(signum):
            return  # the first one's echo (`mtkit.process.signals`): its clean-up goes on
        if TERMINATED:  # the second: the default action, now
            remove_temporaries()
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        TERMINATED.append(signum)
        raise Terminated(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, terminate)


def default_signals() -> None:
    """Give SIGINT, SIGTERM and SIGHUP their default action (those ignored stay ignored),
    once the command is over: raised during the interpreter's exit, in an exit handler of
    torch's, they were a traceback ('Exception ignored in atexit callback') after a trained
    run's 'Resume with' line, on a second Ctrl-C or a second SIGTERM."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)


def hold_closed_stdout() -> None:
    """With standard output closed (`>&-`), open /dev/null as descriptor 1: the next file
    mtkit opens would get it otherwise, and what a library prints would land in that file.
    sys.stdout stays None, so a command that would write there can say it is closed."""
    if sys.stdout is None:
        fd = os.open(os.devnull, os.O_WRONLY)
        if fd != 1:
            os.dup2(fd, 1)
            os.close(fd)


def drop_stdout() -> None:
    """Point stdout at /dev/null once its reader has gone (or it cannot be written), so that
    the interpreter's last flush does not fail again (exit 1 after `| head -1`)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
