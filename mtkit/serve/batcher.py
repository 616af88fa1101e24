"""Batching across requests: sentences of concurrent requests decoded together, in the
length-sorted, token-bounded batches that `mtkit translate` makes of a file.

One decoding thread takes the jobs waiting, those with the same options as the oldest (a
sampling job alone: its draws follow its own lines, as `mtkit translate` of them would), and
decodes their sentences as one input (`TranslationModel.decode`, whose batches are shared by
its CPU workers); each job then gets its own slice of the results, in order.

When to start: clients that each wait for their answer send their next requests in a burst
after a pass ends, and a small batch costs nearly as much per step as a large one on a CPU
(bench/RESULTS.md). So the thread waits while jobs keep arriving: it starts once no job has
come for `gap` seconds, once the oldest has waited `max_wait`, or once a batch's worth of
source tokens is there; jobs that waited through a pass count their wait from its end, so
that they go with the next requests of the callers it answered. A lone request waits `gap`
only. The queue is bounded in sentences: a job that would overflow it is refused at once
(`QueueFull`), so a flood is answered, not stored.

A caller that gives up (its timeout, or gone) cancels its job: one still waiting is dropped,
and a pass whose callers have all given up is told to stop (`TranslationModel.decode`'s
`stop`), which its search does at its next step.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from mtkit.api import Extras, Translation, TranslationModel
from mtkit.config import DecodeConfig
from mtkit.translation.terms import Glossary


class QueueFull(Exception):
    """The queue holds too many sentences to take a job now."""


class Closed(Exception):
    """The batcher no longer takes jobs (the server is shutting down)."""


@dataclass
class Job:
    """One request's sentences and options, and the future its results are set on."""

    lines: list[str]
    cfg: DecodeConfig
    extras: Extras
    tokens: int  # source tokens, for the batch budget
    prefixes: list[str] | None = None  # per line, the target text its output starts with
    terms: Glossary | None = None  # the request's glossary
    tag: str | None = None  # the request's language tag (checked)
    arrived: float = field(default_factory=time.monotonic)
    future: Future[list[Translation]] = field(default_factory=Future)
    serial: int = 0
    given_up: bool = False  # its caller no longer waits (`Batcher.cancel`)

    def key(self) -> tuple[object, ...]:
        """Jobs decoded together share this key."""
        alone = self.serial if self.cfg.method == "sample" else 0
        return (self.cfg, self.extras, self.terms, self.tag, alone)


@dataclass(frozen=True)
class BatchReport:
    """What one decoding pass did, for the metrics."""

    jobs: int
    sentences: int
    tokens: int  # target tokens of the best hypotheses
    seconds: float


class Batcher:
    """Jobs from any thread in (`submit`), results out through each job's future."""

    def __init__(self, model: TranslationModel, *, max_wait: float, max_queue: int,
                 gap: float | None = None, max_output: int | None = None,
                 on_batch: Callable[[BatchReport], None] | None = None) -> None:
        """gap: default a fifth of `max_wait`; max_output: a cap on every output, in tokens,
        below the model's own."""
        self.model = model
        self.max_output = max_output
        self.max_wait = max_wait
        self.gap = max_wait / 5 if gap is None else min(gap, max_wait)
        self.max_queue = max_queue
        self.on_batch = on_batch
        self._jobs: list[Job] = []
        self._queued = 0  # sentences waiting
        self._cond = threading.Condition()
        self._closed = False
        self._free_since = 0.0  # when the last pass ended (monotonic)
        self._serials = itertools.count(1)
        self._running: tuple[list[Job], threading.Event] = ([], threading.Event())
        self._thread = threading.Thread(target=self._loop, name="mtkit-batcher", daemon=True)
        self._thread.start()

    @property
    def queued(self) -> int:
        """Sentences waiting to be decoded."""
        return self._queued

    def submit(self, lines: list[str], cfg: DecodeConfig, extras: Extras,
               prefixes: list[str] | None = None, terms: Glossary | None = None,
               tag: str | None = None) -> Job:
        """Queue a job (its future is set when it is decoded); raises QueueFull or Closed.
        prefixes: one per line (checked: `TranslationModel.checked_prefixes`), or None;
        terms: the job's glossary (`TranslationModel.glossary`), or None; tag: its language
        tag (`TranslationModel.checked_tag`)."""
        tokens = sum(len(line.split()) + 1 for line in lines)  # a cheap estimate
        job = Job(lines, cfg, extras, tokens, prefixes=prefixes, terms=terms, tag=tag)
        with self._cond:
            if self._closed:
                raise Closed
            if self._queued + len(lines) > self.max_queue:
                raise QueueFull
            job.serial = next(self._serials)
            self._jobs.append(job)
            self._queued += len(lines)
            self._cond.notify()
        return job

    def cancel(self, job: Job) -> bool:
        """Its caller gave up: drop the job if it is waiting, or, if every job of the pass
        decoding it has been given up, stop that pass's search; whether either was done."""
        with self._cond:
            if job in self._jobs:
                self._jobs.remove(job)
                self._queued -= len(job.lines)
                job.future.cancel()
                return True
            running, stop = self._running
            if job not in running:
                return False
            job.given_up = True
            if all(j.given_up for j in running):
                stop.set()
                return True
        return False

    def close(self) -> None:
        """Decode what is queued, take nothing more, and end the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            self._decode(batch)
            with self._cond:
                self._running = ([], threading.Event())
            self._free_since = time.monotonic()

    def _next_batch(self) -> list[Job] | None:
        """The oldest job and those that decode with it, once it has waited long enough or
        a batch's worth of tokens is there; None once closed and empty."""
        with self._cond:
            while not self._jobs:
                if self._closed:
                    return None
                self._cond.wait()
            first = self._jobs[0]
            while not self._closed:
                same = [j for j in self._jobs if j.key() == first.key()]
                # Jobs that waited through the last pass wait on, for the callers that
                # pass just answered: their next requests come as a burst.
                start = max(first.arrived, self._free_since)
                latest = max(same[-1].arrived, self._free_since)
                left = min(start + self.max_wait, latest + self.gap) - time.monotonic()
                if left <= 0 or sum(j.tokens for j in same) >= first.cfg.batch_tokens:
                    break
                self._cond.wait(left)
            batch = [j for j in self._jobs if j.key() == first.key()]
            for job in batch:
                self._jobs.remove(job)
                self._queued -= len(job.lines)
            return batch

    def _decode(self, batch: list[Job]) -> None:
        start = time.perf_counter()
        stop = threading.Event()
        with self._cond:
            live = [j for j in batch if j.future.set_running_or_notify_cancel()]
            self._running = (live, stop)
        lines = [line for job in live for line in job.lines]
        # Prefixes are per line: jobs with and without them decode together.
        prefixes = None
        if any(job.prefixes for job in live):
            prefixes = [p for job in live for p in job.prefixes or [""] * len(job.lines)]
        try:
            results = self.model.decode(lines, live[0].cfg, live[0].extras,
                                        prefixes=prefixes, terms=live[0].terms,
                                        tag=live[0].tag, stop=stop,
                                        max_output=self.max_output) if live else []
        except Exception as e:  # each caller gets the error (Stopped: none waits for it)
            for job in live:
                job.future.set_exception(e)
            return
        at = 0
        for job in live:
            job.future.set_result(results[at:at + len(job.lines)])
            at += len(job.lines)
        if self.on_batch is not None:
            tokens = sum(len(r.candidates[0].tokens) for r in results)
            self.on_batch(BatchReport(len(live), len(lines), tokens,
                                      time.perf_counter() - start))
