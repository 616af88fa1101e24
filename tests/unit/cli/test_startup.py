"""The collector is paused while a command loads, and back as it was afterwards."""

from __future__ import annotations

import gc

import pytest

from mtkit.cli.startup import collector_paused


@pytest.fixture
def collector():
    was_on = gc.isenabled()
    yield
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
