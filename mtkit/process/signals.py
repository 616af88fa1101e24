"""Stop signals: the training loop's graceful stop, and the echo of a signal told from a second
request.

Ctrl-C (SIGINT), SIGTERM and SIGHUP during training: the first asks the loop to stop at the
next update boundary with a checkpoint; a second one interrupts at once. A signal ignored when
training starts (SIGHUP under `nohup`) stays ignored. Other commands stop through
`mtkit.process.startup.handle_termination`.

GNU `timeout` (and some supervisors) send their signal to mtkit and then to mtkit's process
group, mtkit again, microseconds apart. Taken as "stop at once", the echo killed a command mid
clean-up (its output's temporary left) or a training run before its checkpoint. The same signal
within REPEAT_WINDOW seconds of the first is its echo. Ctrl-C reaches the process once per key
press, so twice is always meant.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType
from typing import Any

from mtkit.errors import Terminated

log = logging.getLogger("mtkit.train")

REPEAT_WINDOW = 1.0  # seconds
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class SignalEcho:
    """Remembers the first stop signal; `is_echo` says whether a later one repeats it."""

    def __init__(self) -> None:
        self._first: tuple[int, float] | None = None

    def is_echo(self, signum: int) -> bool:
        """Record `signum` if it is the first; whether it is the first one's echo."""
        now = time.monotonic()
        if self._first is None:
            self._first = (signum, now)
            return False
        first, at = self._first
        return signum == first != signal.SIGINT and now - at < REPEAT_WINDOW


class GracefulStop:
    """Context manager installing the handlers (main thread only); `requested` names the
    signal that asked to stop, or is None."""

    def __init__(self) -> None:
        self.requested: str | None = None
        self._previous: dict[int, Any] = {}
        self._echo = SignalEcho()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._echo.is_echo(signum):
            return  # `timeout`'s second copy of its signal: the graceful stop goes on
        if self.requested is not None:  # exit 128 + the signal, as the shell expects
            raise KeyboardInterrupt if signum == signal.SIGINT else Terminated(signum)
        self.requested = signal.Signals(signum).name
        log.warning("%s received: stopping after this update and saving a checkpoint "
                    "(send it again to quit at once)", self.requested)

    def __enter__(self) -> GracefulStop:
        if threading.current_thread() is threading.main_thread():
            for s in _SIGNALS:
                if signal.getsignal(s) is not signal.SIG_IGN:
                    self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()
