"""The models a server translates with: a `ModelSet` (routes, detection, the bounded pool of
loaded models) and each loaded model's own cross-request batcher, made when the model is
first asked for and ended, after what it holds, when the pool unloads the model.

Each model batches alone: its requests' sentences decode together, never with another
model's (they are different networks), and each leg of a pivot is a request to its model
like any other.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from mtkit.api import TranslationModel
from mtkit.api.many import ModelSet
from mtkit.serve.batcher import Batcher


class ServedModels:
    """`models` and a batcher for each loaded one (`make_batcher(name, model)`)."""

    def __init__(self, models: ModelSet,
                 make_batcher: Callable[[str, TranslationModel], Batcher]) -> None:
        self.models = models
        self._make = make_batcher
        self._batchers: dict[str, Batcher] = {}
        self._lock = threading.Lock()
        models.on_close(self._drop)

    @property
    def queued(self) -> int:
        """Sentences waiting, over every model."""
        with self._lock:
            return sum(b.queued for b in self._batchers.values())

    async def acquire(self, name: str) -> tuple[TranslationModel, Batcher]:
        """The model called `name` and its batcher, held until `release(name)`: at once when
        it is loaded, else after its load (in a thread: the event loop goes on)."""
        model = self.models.pool.acquire_loaded(name)
        if model is None:
            model = await asyncio.to_thread(self.models.pool.acquire, name)
        return model, self.batcher(name, model)

    def release(self, name: str) -> None:
        self.models.pool.release(name)

    def batcher(self, name: str, model: TranslationModel) -> Batcher:
        """The batcher of the loaded model `name`, made on first use."""
        with self._lock:
            if name not in self._batchers:
                self._batchers[name] = self._make(name, model)
            return self._batchers[name]

    def close(self) -> None:
        """End every batcher (after what each holds)."""
        with self._lock:
            batchers = list(self._batchers.values())
            self._batchers.clear()
        for b in batchers:
            b.close()

    def _drop(self, name: str) -> None:
        with self._lock:
            batcher = self._batchers.pop(name, None)
        if batcher is not None:
            batcher.close()
