"""A bounded set of loaded models: at most `limit` kept at once, the least recently used
unloaded to make room and loaded again when asked for.

A model in use (acquired and not yet released) is never unloaded: a caller that needs room
while every loaded model is in use waits for one to be released. Loading happens outside the
pool's lock, so callers of models already loaded are not held up by another's load.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Generic, Literal, TypeVar

from mtkit.errors import ConfigError

T = TypeVar("T")
PoolEvent = Literal["load", "unload"]


class ModelPool(Generic[T]):
    """Models by name, opened by `open(name)` and let go by `close(name, model)`; `on_event`
    is told of every load and unload (with the seconds it took)."""

    def __init__(self, names: Sequence[str], open: Callable[[str], T],
                 close: Callable[[str, T], None], *, limit: int | None = None,
                 on_event: Callable[[PoolEvent, str, float], None] | None = None) -> None:
        if limit is not None and limit < 1:
            raise ConfigError.about("max_loaded", f"{limit}: expected at least 1 (or none: "
                                    "no limit)")
        self.names = list(names)
        self.limit = limit
        self._open, self._close, self._on_event = open, close, on_event
        self._loaded: OrderedDict[str, T] = OrderedDict()  # least recently used first
        self._loading: set[str] = set()
        self._users: dict[str, int] = {}
        self._cond = threading.Condition()
        self.loads: dict[str, int] = {}  # by name, since the start
        self.unloads: dict[str, int] = {}

    @property
    def loaded(self) -> list[str]:
        """The names loaded now, least recently used first."""
        with self._cond:
            return list(self._loaded)

    def make_room(self) -> None:
        """Unload the least recently used idle models until one more fits the limit: what a
        caller does before opening a model for `keep`."""
        while True:
            with self._cond:
                full = self.limit is not None and len(self._loaded) >= self.limit
                victim = self._idle() if full else None
                if victim is None:
                    return
                model = self._loaded.pop(victim)
            self._unload(victim, model)

    def keep(self, name: str, model: T, seconds: float = 0.0) -> None:
        """Take `model`, opened by the caller in `seconds` (after `make_room`), as the model
        called `name`: a load like any other, told to `on_event`."""
        with self._cond:
            if name not in self.names:
                self.names.append(name)
            self._loaded[name] = model
            self._users.setdefault(name, 0)
            self.loads[name] = self.loads.get(name, 0) + 1
        if self._on_event is not None:
            self._on_event("load", name, seconds)

    def acquire_loaded(self, name: str) -> T | None:
        """`acquire` for a model loaded now (None otherwise): it never waits, so an event
        loop may call it."""
        with self._cond:
            if name not in self._loaded:
                return None
            self._loaded.move_to_end(name)
            self._users[name] = self._users.get(name, 0) + 1
            return self._loaded[name]

    def acquire(self, name: str) -> T:
        """The model called `name`, loaded if it is not, held until `release(name)`."""
        if name not in self.names:
            raise KeyError(name)
        while True:
            victim = None
            with self._cond:
                if name in self._loaded:
                    self._loaded.move_to_end(name)
                    self._users[name] = self._users.get(name, 0) + 1
                    return self._loaded[name]
                if name in self._loading:
                    self._cond.wait()
                    continue
                if self._room():
                    self._loading.add(name)
                    break
                victim = self._idle()
                if victim is None:
                    self._cond.wait()
                    continue
                model = self._loaded.pop(victim)
            self._unload(victim, model)
        return self._load(name)

    def release(self, name: str) -> None:
        """The caller is done with the model `acquire` gave it."""
        with self._cond:
            self._users[name] -= 1
            self._cond.notify_all()

    @contextmanager
    def use(self, name: str) -> Iterator[T]:
        """`acquire` and `release` around a block."""
        model = self.acquire(name)
        try:
            yield model
        finally:
            self.release(name)

    def close(self) -> None:
        """Unload every model."""
        with self._cond:
            loaded = list(self._loaded.items())
            self._loaded.clear()
        for name, model in loaded:
            self._unload(name, model)

    def _room(self) -> bool:
        return self.limit is None or len(self._loaded) + len(self._loading) < self.limit

    def _idle(self) -> str | None:
        """The least recently used model nobody holds."""
        return next((n for n in self._loaded if self._users.get(n, 0) == 0), None)

    def _load(self, name: str) -> T:
        start = time.perf_counter()
        try:
            model = self._open(name)
        except BaseException:
            with self._cond:
                self._loading.discard(name)
                self._cond.notify_all()
            raise
        with self._cond:
            self._loading.discard(name)
            self._loaded[name] = model
            self._users[name] = self._users.get(name, 0) + 1
            self.loads[name] = self.loads.get(name, 0) + 1
            self._cond.notify_all()
        if self._on_event is not None:
            self._on_event("load", name, time.perf_counter() - start)
        return model

    def _unload(self, name: str, model: T) -> None:
        start = time.perf_counter()
        self._close(name, model)
        with self._cond:
            self.unloads[name] = self.unloads.get(name, 0) + 1
            self._cond.notify_all()
        if self._on_event is not None:
            self._on_event("unload", name, time.perf_counter() - start)
