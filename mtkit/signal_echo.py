"""A stop signal's echo, told from a second request.

GNU `timeout` (and some supervisors) send their signal to mtkit and then to mtkit's process
group, mtkit again, microseconds apart. A second SIGTERM or SIGHUP means "stop at once" to
mtkit's handlers (`mtkit.cli.startup`, `mtkit.train.signals`); taken so, the echo killed a
command mid clean-up (its output's temporary left, 1 run in 10 of a trial) or a training run
before its checkpoint. The same signal within REPEAT_WINDOW seconds of the first is its echo.
Ctrl-C (SIGINT) reaches the process once per key press, so twice is always meant.
"""

from __future__ import annotations

import signal
import time

REPEAT_WINDOW = 1.0  # seconds


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
