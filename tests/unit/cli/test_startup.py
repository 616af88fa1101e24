"""The collector is paused while a command loads, and back as it was afterwards; what loading
made is frozen only when mtkit owns the process."""

from __future__ import annotations

import gc
import signal
import subprocess
import sys

import pytest

from mtkit.process import startup
from mtkit.process.startup import collector_paused


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(startup._OWNED, "process", False)
    was_on = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if was_on else gc.disable)()


def test_off_inside_and_on_again_after(collector):
    gc.enable()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_on_again_after_an_error(collector):
    gc.enable()
    with pytest.raises(KeyError), collector_paused():
        raise KeyError("x")
    assert gc.isenabled()


def test_stays_off_when_it_was_off(collector):
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_nothing_is_frozen_in_a_process_mtkit_does_not_own(collector):
    gc.unfreeze()
    with collector_paused():
        pass
    startup.before_exit()
    assert gc.get_freeze_count() == 0


def test_what_loading_made_is_frozen_when_mtkit_owns_the_process(collector):
    gc.unfreeze()
    startup.own_process()
    with collector_paused():
        loaded = [[i] for i in range(1000)]
    frozen = gc.get_freeze_count()
    assert frozen >= len(loaded)
    made_later = [[i] for i in range(1000)]
    startup.before_exit()
    assert gc.get_freeze_count() >= frozen + len(made_later)


_TWICE = """
import os, signal, sys, time
from mtkit.process.startup import handle_termination
from mtkit.errors import Terminated
from mtkit.fileio import atomic_write
handle_termination()
with atomic_write(sys.argv[1]) as f:
    f.write("half")
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
    except Terminated:  # the first signal's clean-up (waiting for an engine) gets a second
        time.sleep(float(sys.argv[2]))  # 0: at once, as `timeout` echoes its signal
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.5)
        print("cleaned up", flush=True)
        raise
"""


def test_a_second_sigterm_kills_at_once_and_leaves_no_temporary(tmp_path):
    """The second signal has the default effect at once: the temporary of the output being
    written was left beside it (`.out.txt.k3j2x_ab.tmp`)."""
    out = subprocess.run([sys.executable, "-c", _TWICE, str(tmp_path / "out.txt"), "1.5"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == -signal.SIGTERM, out.stderr
    assert "cleaned up" not in out.stdout
    assert list(tmp_path.iterdir()) == []


def test_the_same_signal_at_once_again_is_the_first_ones_echo(tmp_path):
    """GNU `timeout` signals mtkit, then mtkit's process group: the echo killed mtkit
    outright, silently, mid clean-up (its output's temporary left behind)."""
    out = subprocess.run([sys.executable, "-c", _TWICE, str(tmp_path / "out.txt"), "0"],
                         capture_output=True, text=True, timeout=60)
    assert "cleaned up" in out.stdout and "Terminated" in out.stderr, out
    assert list(tmp_path.iterdir()) == []


def test_once_the_command_is_over_signals_take_their_default_action(collector, monkeypatch,
                                                                    terminal_signals):
    """A second SIGTERM or Ctrl-C after training's 'Resume with' line reached an exit handler
    of torch's while the interpreter exited: 'Exception ignored in atexit callback', a
    traceback (1 run in 3 when sent every 2 ms; 3 in 3 in a trial)."""
    from mtkit import cli

    kinds = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    saved = {s: signal.getsignal(s) for s in kinds}
    monkeypatch.setitem(startup._OWNED, "process", False)  # main() claims the process
    monkeypatch.setattr(sys, "argv", ["mtkit", "--version"])
    try:
        with pytest.raises(SystemExit):
            cli.main()
        assert [signal.getsignal(s) for s in kinds] == [signal.SIG_DFL] * 3
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
