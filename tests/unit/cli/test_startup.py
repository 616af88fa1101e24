"""The collector is paused while a command loads, and back as it was afterwards; what loading
made is frozen only when mtkit owns the process."""

from __future__ import annotations

import gc
import signal
import subprocess
import sys

import pytest

from mtkit.cli import startup
from mtkit.cli.startup import collector_paused


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
from mtkit.cli.startup import handle_termination
from mtkit.errors import Terminated
from mtkit.fileio import atomic_write
handle_termination()
with atomic_write(sys.argv[1]) as f:
    f.write("half")
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
    except Terminated:  # the first signal's clean-up (waiting for an engine) gets a second
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
"""


def test_a_second_sigterm_kills_at_once_and_leaves_no_temporary(tmp_path):
    """The second signal has the default effect at once: the temporary of the output being
    written was left beside it (`.out.txt.k3j2x_ab.tmp`)."""
    out = subprocess.run([sys.executable, "-c", _TWICE, str(tmp_path / "out.txt")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == -signal.SIGTERM, out.stderr
    assert list(tmp_path.iterdir()) == []
