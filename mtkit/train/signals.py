"""Ctrl-C (SIGINT), SIGTERM and SIGHUP during training: the first asks the loop to stop at the
next update boundary with a checkpoint; a second one interrupts at once (not the first's echo:
`mtkit.signal_echo`). A signal ignored when training starts (SIGHUP under `nohup`) stays
ignored."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Any

from mtkit.errors import Terminated
from mtkit.signal_echo import SignalEcho

log = logging.getLogger(__name__)

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


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
