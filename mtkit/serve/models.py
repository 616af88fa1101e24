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
from collections.abc import Callable, Iterator
from typing import Any

from mtkit.api import TranslationModel
from mtkit.api.many import ModelSet
from mtkit.errors import MtkitError
from mtkit.serve.batcher import Batcher, BatchReport
from mtkit.serve.errors import ApiError

OnBatch = Callable[[BatchReport], None]


class ServedModels:
    """`models` and a batcher for each loaded one (`make_batcher(model, on_batch)`), whose
    passes are counted by model and reported to `on_batch`."""

    def __init__(self, models: ModelSet,
                 make_batcher: Callable[[TranslationModel, OnBatch], Batcher],
                 on_batch: OnBatch | None = None) -> None:
        self.models = models
        self._make = make_batcher
        self._on_batch = on_batch
        self._batchers: dict[str, Batcher] = {}
        self._lock = threading.Lock()
        self.batches: dict[str, int] = {}  # decoding passes by model, since the start
        self.requests: dict[str, int] = {}  # requests (legs) decoded by model
        models.on_close(self._drop)

    @property
    def queued(self) -> int:
        """Sentences waiting, over every model."""
        with self._lock:
            return sum(b.queued for b in self._batchers.values())

    @property
    def decoding(self) -> int:
        """Sentences of the passes running, over every model."""
        with self._lock:
            return sum(b.decoding for b in self._batchers.values())

    async def acquire(self, name: str) -> tuple[TranslationModel, Batcher]:
        """The model called `name` and its batcher, held until `release(name)`: at once when
        it is loaded, else after its load (in a thread: the event loop goes on)."""
        model = self.models.pool.acquire_loaded(name)
        if model is None:
            try:
                model = await asyncio.to_thread(self.models.pool.acquire, name)
            except MtkitError as e:
                # its files broke after the start (under --max-loaded, a model unloaded is
                # read again): the server's fault, not the request's, so not a 4xx
                why = " ".join(str(e).split())
                raise ApiError(503, f"model {name} could not be loaded: {why}") from None
        return model, self.batcher(name, model)

    def release(self, name: str) -> None:
        self.models.pool.release(name)

    def batcher(self, name: str, model: TranslationModel) -> Batcher:
        """The batcher of the loaded model `name`, made on first use."""
        with self._lock:
            if name not in self._batchers:
                self._batchers[name] = self._make(model, lambda r: self._count(name, r))
            return self._batchers[name]

    def _count(self, name: str, report: BatchReport) -> None:
        with self._lock:
            self.batches[name] = self.batches.get(name, 0) + 1
            self.requests[name] = self.requests.get(name, 0) + report.jobs
        if self._on_batch is not None:
            self._on_batch(report)

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


class ModelMetrics:
    """A prometheus_client collector of the models: loads and unloads by model (the start's
    included), how many are loaded, and each model's decoding passes and the requests they
    held (a pass holds one model's requests only)."""

    def __init__(self, served: ServedModels) -> None:
        self.served = served

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        pool, served = self.served.models.pool, self.served
        for name, help_text, values in [
                ("mtkit_model_loads", "models loaded (at the start and again on demand)",
                 pool.loads),
                ("mtkit_model_unloads", "models unloaded, least recently used first, to keep "
                 "within --max-loaded", pool.unloads),
                ("mtkit_model_batches", "decoding passes, by model", served.batches),
                ("mtkit_model_requests", "requests (a pivot's legs each) decoded, by model",
                 served.requests)]:
            family = CounterMetricFamily(name, help_text, labels=["model"])
            for model in pool.names:
                family.add_metric([model], values.get(model, 0))
            yield family
        loaded = GaugeMetricFamily("mtkit_models_loaded", "models loaded now")
        loaded.add_metric([], len(pool.loaded))
        yield loaded
