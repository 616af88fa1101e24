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

Refilling (`refill`, on unless the operator turns it off): a pass is one search that takes
more jobs while it runs (`TranslationModel.refilling`): after every step, jobs with the pass's
options join it while its sentences hold fewer source tokens than a batch, and each job is
answered as soon as its own sentences are done, not when the pass is, with what it would get
decoded alone. Once a job of other options has waited `max_wait`, the pass takes no more and
ends when its sentences do. Jobs with prefixes or glossary terms, and options or models that
such a search cannot take (`refilling`'s None), decode in passes as above; a given-up job's
sentences leave the search at its next step.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from mtkit.api import Extras, Translation, TranslationModel
from mtkit.api.model import Refilling
from mtkit.config import DecodeConfig
from mtkit.translation.lines import Stopped
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
                 refill: bool = True,
                 on_batch: Callable[[BatchReport], None] | None = None) -> None:
        """gap: default a fifth of `max_wait`; max_output: a cap on every output, in tokens,
        below the model's own; refill: passes take jobs while they run (module doc)."""
        self.model = model
        self.refill = refill
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
        self._refilling_pass = False  # whether the pass running is a refilling one
        self._thread = threading.Thread(target=self._loop, name="mtkit-batcher", daemon=True)
        self._thread.start()

    @property
    def queued(self) -> int:
        """Sentences waiting to be decoded."""
        return self._queued

    @property
    def decoding(self) -> int:
        """Sentences of the jobs being decoded (a refilling pass's: those not answered yet)."""
        return sum(len(job.lines) for job in self._running[0])

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
            if self._refilling_pass:  # its sentences leave the search at its next step
                return True
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
            search = self._refilling(batch)
            if search is None:
                self._decode(batch)
            else:
                self._refilling_pass = True
                _Refill(self, search, batch).run()
                self._refilling_pass = False
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

    def _refilling(self, batch: list[Job]) -> Refilling | None:
        """A search that takes jobs like these while it runs, or None (module doc)."""
        first = batch[0]
        if not self.refill or first.terms is not None or any(j.prefixes for j in batch):
            return None
        return self.model.refilling(first.cfg, first.extras, tag=first.tag,
                                    max_output=self.max_output)

    def _more(self, key: tuple[object, ...], room: int) -> list[Job]:
        """Waiting jobs a refilling pass of `key` takes now: in order, while their tokens fit
        in `room` (one at least when room is all a batch); none once a job of another key
        has waited `max_wait`."""
        with self._cond:
            now = time.monotonic()
            if any(j.key() != key and now - max(j.arrived, self._free_since) >= self.max_wait
                   for j in self._jobs):
                return []
            taken: list[Job] = []
            for job in self._jobs:
                if job.key() != key or job.prefixes:
                    continue
                if job.tokens > room and (taken or room < job.cfg.batch_tokens):
                    break
                taken.append(job)
                room -= job.tokens
            for job in taken:
                self._jobs.remove(job)
                self._queued -= len(job.lines)
            return taken

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


class _Refill:
    """One refilling pass of a `Batcher` (module doc): its search, and the jobs in it."""

    def __init__(self, batcher: Batcher, search: Refilling, batch: list[Job]) -> None:
        self.batcher, self.search = batcher, search
        self.key = batch[0].key()
        self.first = batch
        self.jobs: dict[int, tuple[Job, list[Translation | None]]] = {}  # by serial
        self.left: dict[int, int] = {}  # sentences still decoding, by serial
        self.served = self.sentences = self.tokens = 0

    def run(self) -> None:
        start = time.perf_counter()
        try:
            self._admit(self.first)
            while self.jobs:
                self._drop_given_up()
                for handle, result in self.search.step():
                    self._deliver(handle, result)
                tokens = sum(job.tokens for job, _ in self.jobs.values())
                self._admit(self.batcher._more(self.key, self.first[0].cfg.batch_tokens
                                               - tokens))
        except Exception as e:  # each caller waiting gets the error
            for job, _ in self.jobs.values():
                job.future.set_exception(e)
            return
        if self.batcher.on_batch is not None and self.served:
            self.batcher.on_batch(BatchReport(self.served, self.sentences, self.tokens,
                                              time.perf_counter() - start))

    def _admit(self, jobs: list[Job]) -> None:
        """Jobs join the search (all their lines in one call: one encoder batch)."""
        with self.batcher._cond:
            live = [j for j in jobs if j.future.set_running_or_notify_cancel()]
            running, stop = self.batcher._running
            self.batcher._running = (running + live, stop)
        if not live:
            return
        lines, handles = [], []
        for job in live:
            self.jobs[job.serial] = (job, [None] * len(job.lines))
            self.left[job.serial] = len(job.lines)
            lines += job.lines
            handles += [(job.serial, i) for i in range(len(job.lines))]
        for handle, result in self.search.join(lines, handles):
            self._deliver(handle, result)

    def _deliver(self, handle: object, result: Translation) -> None:
        serial, i = handle  # type: ignore[misc]
        if serial not in self.jobs:
            return
        job, results = self.jobs[serial]
        results[i] = result
        self.left[serial] -= 1
        self.sentences += 1
        self.tokens += len(result.candidates[0].tokens)
        if self.left[serial] == 0:
            self._leave(job)
            self.served += 1
            job.future.set_result([r for r in results if r is not None])

    def _leave(self, job: Job) -> None:
        del self.jobs[job.serial], self.left[job.serial]
        with self.batcher._cond:
            running, stop = self.batcher._running
            self.batcher._running = ([j for j in running if j is not job], stop)

    def _drop_given_up(self) -> None:
        """Sentences of jobs whose callers gave up leave the search."""
        gone = [job for job, _ in self.jobs.values() if job.given_up]
        if not gone:
            return
        self.search.drop({(job.serial, i) for job in gone for i in range(len(job.lines))})
        for job in gone:
            self._leave(job)
            job.future.set_exception(Stopped())
