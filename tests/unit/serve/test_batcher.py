"""The server's batcher with a stand-in model (no torch, no HTTP): which jobs are decoded
together, when a pass starts, the queue's bound, cancelling, and errors; and a refilling
pass, with a stand-in search whose steps the test releases one by one."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from mtkit.api import Extras, Translation
from mtkit.config import DecodeConfig
from mtkit.serve.batcher import Batcher, QueueFull


class FakeModel:
    """Echoes each line upper-cased; records every pass's lines; can be held or fail."""

    def __init__(self) -> None:
        self.passes: list[list[str]] = []
        self.prefixes: list[list[str] | None] = []  # each pass's
        self.hold = threading.Event()
        self.hold.set()
        self.fail = False
        self.stops: list = []  # each pass's stop event

    def decode(self, lines, cfg, extras, *, prefixes=None, terms=None, tag=None, stop=None,
               max_output=None):
        self.stops.append(stop)
        self.hold.wait(10)
        self.passes.append(list(lines))
        self.prefixes.append(prefixes)
        if self.fail:
            raise RuntimeError("broken")
        from mtkit.api import Candidate

        return [Translation(line, [], [Candidate(line.upper(), 0.0, 0.0, [], [])])
                for line in lines]

    def refilling(self, cfg, extras, *, tag=None, max_output=None):
        return None  # decoded in passes


class FakeSearch:
    """A refilling search (`Refilling`): a line of n characters is done n steps after it
    joins, upper-cased; each step waits for the test to release it."""

    def __init__(self) -> None:
        self.rows: dict = {}  # handle -> [steps left, line]
        self.release = threading.Semaphore(0)
        self.joined: list[list[str]] = []
        self.changed = threading.Condition()
        self.dropped: set = set()

    @property
    def size(self) -> int:
        return len(self.rows)

    def join(self, lines, handles):
        with self.changed:
            self.joined.append(list(lines))
            self.rows.update((h, [len(line), line]) for h, line in zip(handles, lines, strict=True))
            self.changed.notify_all()
        return []

    def step(self):
        assert self.release.acquire(timeout=10)
        out = []
        for h, row in list(self.rows.items()):
            row[0] -= 1
            if row[0] == 0:
                from mtkit.api import Candidate

                del self.rows[h]
                out.append((h, Translation(row[1], [], [Candidate(row[1].upper(), 0.0, 0.0,
                                                                  [], [])])))
        return out

    def drop(self, handles):
        self.dropped |= handles
        for h in handles:
            self.rows.pop(h, None)

    def wait_joined(self, n: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.joined) >= n, timeout=10)


class RefillModel(FakeModel):
    def __init__(self) -> None:
        super().__init__()
        self.search = FakeSearch()

    def refilling(self, cfg, extras, *, tag=None, max_output=None):
        return self.search


CFG = DecodeConfig()


@pytest.fixture
def model():
    return FakeModel()


def _texts(job) -> list[str]:
    return [t.text for t in job.future.result(10)]


def test_jobs_that_come_together_share_a_pass_and_get_their_own_results(model):
    b = Batcher(model, max_wait=2.0, max_queue=100, gap=0.3)
    jobs = [b.submit([f"a{i}", f"b{i}"], CFG, Extras()) for i in range(5)]
    assert [_texts(j) for j in jobs] == [[f"A{i}", f"B{i}"] for i in range(5)]
    assert len(model.passes) == 1 and len(model.passes[0]) == 10
    b.close()


def test_prefixes_are_per_line_and_terms_and_tags_decode_apart(model):
    from mtkit.translation.terms import glossary

    b = Batcher(model, max_wait=2.0, max_queue=100, gap=0.3)
    terms = glossary([("dog", "Hund")])
    jobs = [b.submit(["a", "b"], CFG, Extras()),
            b.submit(["c"], CFG, Extras(), prefixes=["Ein"]),
            b.submit(["d"], CFG, Extras(), terms=terms),
            b.submit(["e"], CFG, Extras(), tag="<2de>")]
    assert [_texts(j) for j in jobs] == [["A", "B"], ["C"], ["D"], ["E"]]
    # a job with prefixes shares its pass with one without (whose lines get none)
    together = model.passes.index(["a", "b", "c"])
    assert model.prefixes[together] == ["", "", "Ein"]
    assert sorted(map(tuple, model.passes)) == [("a", "b", "c"), ("d",), ("e",)]
    b.close()


def test_a_lone_job_waits_only_the_gap(model):
    b = Batcher(model, max_wait=60.0, max_queue=100, gap=0.05)
    start = time.monotonic()
    assert _texts(b.submit(["x"], CFG, Extras())) == ["X"]
    assert time.monotonic() - start < 5.0  # the gap, with room for busy cores: not max_wait
    b.close()


def test_jobs_that_waited_through_a_pass_go_with_the_next_burst(model):
    """Callers that a pass answers send again at once: the jobs that waited through the pass
    wait for them (from the pass's end), so the next pass is whole, not half."""
    model.hold.clear()
    b = Batcher(model, max_wait=2.0, max_queue=100, gap=0.2)
    first = b.submit(["1"], CFG, Extras())
    time.sleep(0.5)  # its pass has started (and is held)
    waiting = b.submit(["2"], CFG, Extras())
    time.sleep(0.5)  # longer than the gap: counted from its arrival, it would go alone
    model.hold.set()
    _texts(first)
    again = b.submit(["3"], CFG, Extras())
    assert _texts(waiting) == ["2"] and _texts(again) == ["3"]
    assert model.passes == [["1"], ["2", "3"]]
    b.close()


def test_other_options_and_sampling_are_decoded_apart(model):
    b = Batcher(model, max_wait=1.0, max_queue=100, gap=0.2)
    greedy = dataclasses.replace(CFG, method="greedy", nbest=1)
    sample = dataclasses.replace(CFG, method="sample")
    jobs = [b.submit(["a"], CFG, Extras()), b.submit(["b"], greedy, Extras()),
            b.submit(["c"], CFG, Extras(align=True)), b.submit(["d"], sample, Extras()),
            b.submit(["e"], sample, Extras()), b.submit(["f"], CFG, Extras())]
    assert [_texts(j) for j in jobs] == [["A"], ["B"], ["C"], ["D"], ["E"], ["F"]]
    assert sorted(model.passes) == [["a", "f"], ["b"], ["c"], ["d"], ["e"]]
    b.close()


def test_the_queue_is_bounded_and_a_waiting_job_can_be_cancelled(model):
    model.hold.clear()  # the first pass blocks; the others wait in the queue
    b = Batcher(model, max_wait=0.01, max_queue=4, gap=0.01)
    first = b.submit(["1"], CFG, Extras())
    time.sleep(0.2)  # taken for decoding: it no longer counts
    waiting = b.submit(["2", "3", "4"], CFG, Extras())
    assert b.queued == 3
    with pytest.raises(QueueFull):
        b.submit(["5", "6"], CFG, Extras())
    assert b.cancel(waiting) and b.queued == 0 and waiting.future.cancelled()
    model.hold.set()
    assert _texts(first) == ["1"]
    b.close()


def test_a_pass_is_told_to_stop_once_all_its_callers_gave_up(model):
    """A running search was never told to stop: a caller's 504 left the decoder busy."""
    model.hold.clear()
    b = Batcher(model, max_wait=1.0, max_queue=100, gap=0.2)
    jobs = [b.submit(["1"], CFG, Extras()), b.submit(["2"], CFG, Extras())]
    deadline = time.monotonic() + 10
    while not model.stops:  # the pass has started (and is held)
        assert time.monotonic() < deadline
        time.sleep(0.01)
    [stop] = model.stops
    assert not b.cancel(jobs[0]) and not stop.is_set()  # the other caller still waits
    assert b.cancel(jobs[1]) and stop.is_set()
    model.hold.set()
    b.close()


def test_an_error_reaches_every_caller_of_the_pass_and_the_batcher_goes_on(model):
    b = Batcher(model, max_wait=1.0, max_queue=100, gap=0.2)
    model.fail = True
    jobs = [b.submit(["a"], CFG, Extras()), b.submit(["b"], CFG, Extras())]
    for job in jobs:
        with pytest.raises(RuntimeError, match="broken"):
            job.future.result(10)
    model.fail = False
    assert _texts(b.submit(["c"], CFG, Extras())) == ["C"]
    b.close()


def test_a_refilling_pass_takes_jobs_while_it_runs_and_answers_each_when_done():
    model = RefillModel()
    b = Batcher(model, max_wait=60.0, max_queue=100, gap=0.01)
    long = b.submit(["x" * 6, "yy"], CFG, Extras())
    model.search.wait_joined(1)
    short = b.submit(["ab"], CFG, Extras())
    model.search.release.release()  # step 1: the short job joins after it
    model.search.wait_joined(2)
    assert model.search.joined == [["xxxxxx", "yy"], ["ab"]]
    for _ in range(2):  # steps 2 and 3: "yy" and then "ab" are done
        model.search.release.release()
    assert _texts(short) == ["AB"]
    assert not long.future.done()  # its first line has 3 steps to go
    for _ in range(3):
        model.search.release.release()
    assert _texts(long) == ["XXXXXX", "YY"]
    assert model.passes == []  # no whole pass was decoded
    b.close()


def test_a_given_up_job_leaves_the_refilling_search():
    model = RefillModel()
    b = Batcher(model, max_wait=60.0, max_queue=100, gap=0.01)
    gone = b.submit(["z" * 50], CFG, Extras())
    model.search.wait_joined(1)
    kept = b.submit(["ab"], CFG, Extras())
    assert b.cancel(gone)
    for _ in range(3):
        model.search.release.release()
    assert _texts(kept) == ["AB"]
    assert model.search.dropped == {(gone.serial, 0)}
    b.close()


def test_jobs_with_prefixes_decode_in_passes_when_refilling():
    model = RefillModel()
    b = Batcher(model, max_wait=60.0, max_queue=100, gap=0.01)
    job = b.submit(["c"], CFG, Extras(), prefixes=["Ein"])
    assert _texts(job) == ["C"]
    assert model.passes == [["c"]] and model.search.joined == []
    b.close()
