"""The bounded model pool with stand-in models: least recently used unloaded past the limit,
loaded again on demand, a model in use never unloaded (its caller's rival waits), every load
and unload told."""

from __future__ import annotations

import threading
import time

import pytest

from mtkit.api.pool import ModelPool
from mtkit.errors import ConfigError


def pool(limit: int | None) -> tuple[ModelPool[str], list[tuple[str, str]]]:
    events: list[tuple[str, str]] = []
    p: ModelPool[str] = ModelPool(["a", "b", "c"], lambda n: n.upper(),
                                  lambda n, m: events.append(("closed", n)), limit=limit,
                                  on_event=lambda kind, n, s: events.append((kind, n)))
    return p, events


def test_least_recently_used_goes_first():
    p, events = pool(2)
    for name in "aba":
        with p.use(name) as m:
            assert m == name.upper()
    assert p.loaded == ["b", "a"] and (p.loads, p.unloads) == ({"a": 1, "b": 1}, {})
    with p.use("c"):
        pass
    assert p.loaded == ["a", "c"] and p.unloads == {"b": 1}
    assert p.acquire_loaded("b") is None and p.acquire_loaded("c") == "C"
    p.release("c")
    assert events == [("load", "a"), ("load", "b"), ("closed", "b"), ("unload", "b"),
                      ("load", "c")]
    with p.use("b"):  # loaded again
        pass
    assert p.loaded == ["c", "b"] and p.loads == {"a": 1, "b": 2, "c": 1}
    p.close()
    assert p.loaded == [] and p.unloads == {"a": 1, "b": 2, "c": 1}


def test_a_model_in_use_is_not_unloaded():
    p, _ = pool(1)
    got: list[str] = []
    p.acquire("a")
    rival = threading.Thread(target=lambda: got.append(p.acquire("b")))
    rival.start()
    time.sleep(0.2)
    assert got == [] and p.loaded == ["a"]  # b waits for a's caller
    p.release("a")
    rival.join(10)
    assert got == ["B"] and p.loaded == ["b"]
    p.release("b")


def test_room_is_made_before_a_model_is_kept():
    p, events = pool(1)
    p.make_room()
    p.keep("a", "A", 0.5)
    p.make_room()  # before b is opened: never two models at once
    assert p.loaded == []
    p.keep("b", "B", 0.5)
    assert p.loaded == ["b"] and (p.loads, p.unloads) == ({"a": 1, "b": 1}, {"a": 1})
    assert events == [("load", "a"), ("closed", "a"), ("unload", "a"), ("load", "b")]


def test_a_failed_load_leaves_no_trace():
    calls = []

    def opener(name: str) -> str:
        calls.append(name)
        if len(calls) == 1:
            raise OSError("disk")
        return name

    p: ModelPool[str] = ModelPool(["a"], opener, lambda n, m: None, limit=1)
    with pytest.raises(OSError):
        p.acquire("a")
    assert p.loaded == [] and p.acquire("a") == "a"
    with pytest.raises(ConfigError, match="max_loaded: 0: expected at least 1"):
        ModelPool(["a"], opener, lambda n, m: None, limit=0)
