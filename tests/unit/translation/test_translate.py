"""mtkit.translation.lines: the streaming translator, on the trained toy model (tests/conftest.py
`toy_model`) and a briefly trained toy RNN. Command-line behaviour: test_translate_cmd.py."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import threading
import time
from pathlib import Path

import pytest
import torch

from mtkit.api.splits import translate_split
from mtkit.config import DecodeConfig
from mtkit.data.batch import collate
from mtkit.data.batching import decode_parallelism, parallel_batches, token_batches
from mtkit.data.store import text_path
from mtkit.decode import forced, length_penalty
from mtkit.device import inference_device
from mtkit.errors import ConfigError
from mtkit.run import data_dir
from mtkit.score.split_translation import decode_tag
from mtkit.translation.lines import (
    StreamTranslator,
    TranslateStats,
    load_translator,
    pharaoh_aligner,
)
from tests.helpers import train_toy

# One torch thread (see the `one_thread` fixture in conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")

CPU = torch.device("cpu")
_RNN = ["model.arch=rnn", "model.rnn.emb_dim=32", "model.rnn.hidden_dim=32",
        "model.rnn.attn_dim=32", "model.rnn.dropout=0.0", "train.max_updates=120",
        "train.valid_every=120"]


@pytest.fixture(scope="module")
def rnn_model(toy_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small Bahdanau GRU trained briefly on the toy task (read-only)."""
    return train_toy(toy_run, tmp_path_factory.mktemp("toy-rnn") / "run", _RNN)


@pytest.fixture(scope="module")
def test_lines(toy_model: Path) -> list[str]:
    return text_path(data_dir(toy_model), "test", "src").read_text().splitlines()


def _worker(run: Path | list[Path], **kw) -> StreamTranslator:
    """A translator of `run` (several: an ensemble) with the recipe's decoding changed by kw
    (DecodeConfig fields) and StreamTranslator options (fmt, align_fn, chunk_lines,
    workers)."""
    model, recipe, tok = load_translator(run if isinstance(run, list) else [run], CPU)
    opts = {k: kw.pop(k) for k in ("fmt", "align_fn", "chunk_lines", "workers") if k in kw}
    cfg = dataclasses.replace(recipe.decode, **kw)
    return StreamTranslator(model, tok, cfg, device=CPU, max_src_len=recipe.data.max_len,
                            max_out_len=recipe.output_cap(),
                            **opts)


def _run(worker: StreamTranslator, lines: list[str]) -> tuple[list[str], object]:
    out = io.StringIO()
    stats = worker.run([line + "\n" for line in lines], out)
    return out.getvalue().splitlines(), stats


def _records(worker: StreamTranslator, lines: list[str]) -> list[dict]:
    out, _ = _run(worker, lines)
    return [json.loads(line) for line in out]


def _assert_same(a: list[dict], b: list[dict], tol: float = 1e-4) -> None:
    assert [r["hypothesis"] for r in a] == [r["hypothesis"] for r in b]
    assert [r["source"] for r in a] == [r["source"] for r in b]
    for x, y in zip(a, b, strict=True):
        assert x["score"] == pytest.approx(y["score"], abs=tol)


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
def test_beam_of_one_is_greedy(arch, toy_model, rnn_model, test_lines):
    run = toy_model if arch == "transformer" else rnn_model
    beam = _records(_worker(run, method="beam", beam_size=1, fmt="jsonl"), test_lines)
    greedy = _records(_worker(run, method="greedy", fmt="jsonl"), test_lines)
    _assert_same(beam, greedy, tol=1e-5)
    assert sum(r["tokens"] for r in greedy) > 0


def test_one_batch_translates_like_one_sentence_at_a_time(toy_model, test_lines):
    lines = test_lines[:30]
    assert len({len(line.split()) for line in lines}) > 3  # lengths differ: batches get sorted
    batched = _records(_worker(toy_model, fmt="jsonl", batch_tokens=4000), lines)
    alone = _records(_worker(toy_model, fmt="jsonl", chunk_lines=1), lines)
    _assert_same(batched, alone)
    assert [r["id"] for r in batched] == list(range(30))
    assert [r["source"] for r in batched] == lines


@pytest.mark.parametrize("search", [{"method": "beam", "beam_size": 3}, {"method": "greedy"}])
def test_workers_translate_like_one_batch_at_a_time(toy_model, test_lines, search):
    """Two workers decoding batches at once give the same records, in input order, across
    chunks, with empty lines kept; each worker gets batches of its own (no batch twice)."""
    lines = test_lines[:40]
    lines[5] = lines[17] = ""
    one = _worker(toy_model, fmt="jsonl", batch_tokens=300, chunk_lines=25, **search)
    two = _worker(toy_model, fmt="jsonl", batch_tokens=300, chunk_lines=25, workers=2, **search)
    seen: list[list[list[int]]] = []
    search_of = two._search

    def counted(ids, stop, lines):
        seen.append(ids)
        return search_of(ids, stop, lines)

    two._search = counted  # type: ignore
    a, b = _records(one, lines), _records(two, lines)
    _assert_same(a, b)
    assert [r["id"] for r in b] == list(range(40)) and [r["source"] for r in b] == lines
    assert sum(len(ids) for ids in seen) == 38 and len(seen) % 2 == 0 and len(seen) >= 4


def test_a_failing_batch_stops_the_batch_running_beside_it(toy_model, test_lines):
    """When one worker's batch fails (or Ctrl-C arrives), the batch the other worker is
    decoding ends at its next step instead of running to its end; the error reaches the
    caller and nothing of the chunk is written."""
    lines = test_lines[:40]
    worker = _worker(toy_model, fmt="jsonl", batch_tokens=300, workers=2, method="beam",
                     beam_size=3)
    longest = max(len(ids) for ids in worker.tok.encode_src_lines(lines))
    beside: list[list[int]] = []  # the step count of the batch decoded beside the failing one
    other_running = threading.Event()
    local = threading.local()  # the batch a worker thread decodes now

    class Model:  # the model, each batch's steps counted; the first fails at its 2nd step
        def __getattr__(self, name):
            return getattr(model, name)

        def step(self, *args, **kwargs):
            local.steps[0] += 1
            if local.first and local.steps[0] == 2:
                assert other_running.wait(30)
                raise RuntimeError("boom")
            if not local.first and local.steps[0] == 2 and not beside:
                beside.append(local.steps)
                other_running.set()
                time.sleep(0.5)  # the caller sees the failure and sets stop meanwhile
            return model.step(*args, **kwargs)

    model, search_of = worker.model, worker._search

    def search(ids, stop, lines):
        local.first, local.steps = max(map(len, ids)) == longest, [0]  # longest first
        return search_of(ids, stop, lines)

    worker.model, worker._search = Model(), search  # type: ignore
    out = io.StringIO()
    with pytest.raises(RuntimeError, match="boom"):
        worker.run([line + "\n" for line in lines], out)
    worker.close()  # whatever still runs, let it end
    assert beside == [[2]]  # its 3rd step never ran
    assert out.getvalue() == ""


@pytest.mark.parametrize("workers", [1, 2])
def test_a_reader_gone_stops_the_decoding_at_its_next_step(toy_model, test_lines, workers):
    """`mtkit translate big.en | head -1`: once the pipe's reader has closed it, the batches
    being decoded end at their next step (they ran to the end of the chunk, and the next
    chunk was decoded in full before a write found the pipe closed)."""
    worker = _worker(toy_model, fmt="text", batch_tokens=300, chunk_lines=20, workers=workers,
                     method="greedy")
    steps = []
    model = worker.model
    local = threading.local()

    def watched() -> bool:  # the watch thread ends once it has told the run
        return not any(t.name == "mtkit-reader-watch" for t in threading.enumerate())

    class Model:  # each batch's first step waits for the watch to see the closed pipe
        def __getattr__(self, name):
            return getattr(model, name)

        def step(self, *args, **kwargs):
            steps.append(1)
            if not getattr(local, "stepped", False):
                local.stepped = True
                deadline = time.monotonic() + 30
                while not watched() and time.monotonic() < deadline:
                    time.sleep(0.01)
            return model.step(*args, **kwargs)

    worker.model = Model()  # type: ignore
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before anything is written
    with os.fdopen(write_end, "w") as out, pytest.raises(BrokenPipeError):
        worker.run([line + "\n" for line in test_lines[:60]], out)
    worker.close()  # whatever still runs, let it end
    assert len(steps) <= workers  # every batch's second step was refused


def test_parallel_batches_come_in_multiples_of_the_workers_with_equal_work():
    sizes = [3, 9, 4, 4, 12, 7, 5, 5, 6, 11, 2, 8]
    plain = list(token_batches(sizes, 40))
    assert parallel_batches(sizes, 40, 1) == plain
    for workers in (2, 3, 4, 5):
        got = parallel_batches(sizes, 40, workers)
        assert len(got) % workers == 0 or len(got) == len(sizes), (workers, got)
        assert sorted(i for b in got for i in b) == list(range(len(sizes)))
        assert all(sizes[b[0]] * len(b) <= 40 for b in got)  # the padded budget holds
        # as even as can be: a smaller cap on a batch's real tokens makes more batches
        most = max(sum(sizes[i] for i in b) for b in got)
        assert len(list(token_batches(sizes, 40, share=most - 1))) > len(got)
    assert len(plain) == 3 and len(parallel_batches(sizes, 40, 2)) == 4
    assert len(list(token_batches(sizes, 200))) == 1 and len(parallel_batches(sizes, 200, 6)) == 6
    assert parallel_batches([5], 100, 4) == [[0]] and parallel_batches([], 100, 4) == []
    # a long-sentence batch and a short remainder (as test2016's first 300 lines make) are
    # re-cut into two of about the same real tokens, not left as they are
    graded = list(range(40, 0, -1))
    plain = list(token_batches(graded, 800))
    assert [sum(graded[i] for i in b) for b in plain] == [610, 210]
    halves = parallel_batches(graded, 800, 2)
    work = [sum(graded[i] for i in b) for b in halves]
    assert len(halves) == 2 and max(work) <= 0.52 * sum(work)
    assert all(graded[b[0]] * len(b) <= 800 for b in halves)


def test_decode_parallelism():
    beam, sample = dataclasses.replace(DecodeConfig(), method="beam"), \
        dataclasses.replace(DecodeConfig(), method="sample")
    assert decode_parallelism(2, beam, cpu=True, streaming=False, default=8) == (2, 1)
    greedy = dataclasses.replace(beam, method="greedy")
    splits = {n: decode_parallelism(n, greedy, cpu=True, streaming=False, default=2)
              for n in (1, 3, 4, 7, 8, 16, 31, 32, 64)}
    assert splits == {1: (1, 1), 3: (2, 1), 4: (2, 2), 7: (2, 3), 8: (4, 2), 16: (4, 4),
                      31: (4, 7), 32: (8, 4), 64: (8, 8)}
    assert decode_parallelism(2, sample, cpu=True, streaming=False, default=8) == (1, 2)
    assert decode_parallelism(2, beam, cpu=False, streaming=False, default=8) == (1, 2)
    assert decode_parallelism(2, beam, cpu=True, streaming=True, default=8) == (1, 2)
    assert decode_parallelism(0, beam, cpu=False, streaming=False, default=8) == (1, 0)
    # 0 threads: the engine's default count (torch's: the physical cores)
    assert decode_parallelism(0, beam, cpu=True, streaming=False, default=16) == (4, 4)
    assert decode_parallelism(0, sample, cpu=True, streaming=False, default=16) == (1, 0)


def test_translations_of_the_toy_model_are_mostly_right(toy_model, test_lines):
    refs = text_path(data_dir(toy_model), "test", "tgt").read_text().splitlines()
    out, stats = _run(_worker(toy_model), test_lines)
    exact = sum(h == r for h, r in zip(out, refs, strict=True))
    assert exact >= 0.6 * len(refs), (exact, out[:5], refs[:5])
    assert stats.sentences == len(refs) and stats.tokens == sum(len(h.split()) for h in out)


@pytest.mark.parametrize("penalty", [("gnmt", 1.0), ("average", 0.0), ("none", 0.0)])
def test_score_is_the_sum_of_token_logprobs_over_the_penalty(toy_model, test_lines, penalty):
    kind, alpha = penalty
    worker = _worker(toy_model, fmt="jsonl", length_penalty=kind, alpha=alpha)
    recs = _records(worker, test_lines[:8])
    src = [worker.tok.encode_src(r["source"]) for r in recs]
    tgt = [worker.tok.encode_tgt(r["hypothesis"]) for r in recs]
    assert all(len(t) == r["tokens"] for t, r in zip(tgt, recs, strict=True))
    teacher = forced(worker.model, collate(src, tgt, list(range(8))), need_attn=False)
    for r, f in zip(recs, teacher, strict=True):
        expected = sum(f.token_logprobs) / length_penalty(r["tokens"] + 1, kind, alpha)
        assert r["score"] == pytest.approx(expected, abs=1e-4)


def test_empty_and_blank_lines_give_empty_lines(toy_model, test_lines):
    lines = ["", test_lines[0], "   ", test_lines[1], ""]
    out, stats = _run(_worker(toy_model), lines)
    full, _ = _run(_worker(toy_model), test_lines[:2])
    assert out == ["", full[0], "", full[1], ""]
    assert (stats.sentences, stats.empty) == (5, 3)
    recs = _records(_worker(toy_model, fmt="jsonl"), lines)
    assert [(r["hypothesis"], r["score"], r["tokens"]) for r in recs[::2]] == [("", 0.0, 0)] * 3


def test_overlong_lines_are_truncated_and_counted(toy_model, test_lines):
    worker = _worker(toy_model)
    limit = worker.max_src_len
    words = test_lines[0].split()
    long_line = " ".join(words * (limit // len(words) + 2))
    head = worker.tok.decode_src(worker.tok.encode_src(long_line)[:limit])
    out, stats = _run(worker, [test_lines[1], long_line, long_line + " " + words[0]])
    assert stats.truncated == 2 and stats.max_src_len == limit
    assert f"2 input line(s) longer than {limit} source tokens" in stats.truncation()
    cut, _ = _run(worker, [head])
    assert out[1] == out[2] == cut[0]


def test_jsonl_records_hold_every_field(toy_model, test_lines):
    recs = _records(_worker(toy_model, fmt="jsonl", nbest=3, beam_size=4,
                            align_fn=pharaoh_aligner()), test_lines[:5])
    for i, r in enumerate(recs):
        assert set(r) == {"id", "source", "hypothesis", "score", "tokens", "nbest", "alignment"}
        assert (r["id"], r["source"]) == (i, test_lines[i])
        assert len(r["nbest"]) == 3
        assert r["nbest"][0] == {"hypothesis": r["hypothesis"], "score": r["score"],
                                 "tokens": r["tokens"], "alignment": r["alignment"]}
        assert all("alignment" in h for h in r["nbest"])  # each its own hypothesis's links
        scores = [h["score"] for h in r["nbest"]]
        assert scores == sorted(scores, reverse=True)
        assert r["tokens"] == len(r["hypothesis"].split())  # one piece per toy word
    plain = _records(_worker(toy_model, fmt="jsonl"), test_lines[:1])[0]
    assert set(plain) == {"id", "source", "hypothesis", "score", "tokens"}


def _links(text: str) -> set[tuple[int, int]]:
    return {(int(i), int(j)) for i, j in (p.split("-") for p in text.split())}


def test_align_links_follow_the_reversal(toy_model, test_lines):
    """The toy task reverses words: source word i is target word n-1-i. Links index words
    within both sentences, for beam output (each hypothesis's own attention)."""
    out, _ = _run(_worker(toy_model, align_fn=pharaoh_aligner(), beam_size=4), test_lines)
    mirrored = 0
    for src, line in zip(test_lines, out, strict=True):
        hyp, _, links = line.partition(" ||| ")
        n, m = len(src.split()), len(hyp.split())
        found = _links(links)
        assert all(0 <= i < n and 0 <= j < m for i, j in found), line
        mirrored += n == m and found == {(i, n - 1 - i) for i in range(n)}
    assert mirrored >= 0.5 * len(test_lines), mirrored


def test_nbest_text_is_moses_format_with_alignments(toy_model, test_lines):
    out, _ = _run(_worker(toy_model, nbest=2, align_fn=pharaoh_aligner()),
                  [test_lines[0], "", test_lines[1]])
    fields = [line.split(" ||| ") for line in out]
    assert [f[0] for f in fields] == ["0", "0", "1", "2", "2"]
    assert all(len(f) == 5 for f in fields)  # id, hypothesis, features, total, alignment
    assert fields[2][1:] == ["", "F0= 0.0000", "0.0000", ""]
    assert all(f[2] == f"F0= {f[3]}" for f in fields)
    assert float(fields[0][3]) >= float(fields[1][3])
    plain, _ = _run(_worker(toy_model, nbest=2), [test_lines[0]])
    assert [line.split(" ||| ")[2:] for line in plain] == [f[2:4] for f in fields[:2]]


def test_a_hypothesis_of_spaces_alone_gets_no_links(toy_model, test_lines, monkeypatch):
    """Bare '▁' pieces decode to spaces: such a hypothesis has no word a link could name."""
    worker = _worker(toy_model, align_fn=pharaoh_aligner(), method="greedy")
    out, _ = _run(worker, test_lines[:3])
    assert all(line.split(" ||| ")[1] for line in out)  # links, normally
    monkeypatch.setattr(worker.tok, "decode_tgt", lambda ids: "   ")
    out, _ = _run(worker, test_lines[:3])
    assert out == ["    ||| "] * 3


def test_an_ensemble_of_two_copies_translates_like_the_model(toy_model, test_lines):
    single = _records(_worker(toy_model, fmt="jsonl"), test_lines[:20])
    double = _records(_worker([toy_model, toy_model / "best.pt"], fmt="jsonl"), test_lines[:20])
    _assert_same(single, double)


def test_sampling_is_reproducible_with_its_seed(toy_model, test_lines):
    def draw(seed: int) -> list[str]:
        out, _ = _run(_worker(toy_model, method="sample", seed=seed, temperature=3.0),
                      test_lines[:20])
        return out

    assert draw(1) == draw(1)
    assert draw(1) != draw(2)


def test_output_is_flushed_chunk_by_chunk(toy_model, test_lines):
    """A line of the second chunk is read only after the first chunk was written and flushed,
    so a pipe sees output while a long input is still being read."""
    out = io.StringIO()
    flushed: list[int] = []
    out.flush = lambda: flushed.append(len(out.getvalue().splitlines()))  # type: ignore

    def lines():
        for i, line in enumerate(test_lines[:7]):
            if i == 3:
                assert flushed == [3]
            yield line + "\n"

    _worker(toy_model, chunk_lines=3).run(lines(), out)
    assert flushed == [3, 6, 7]


def test_split_translation_is_written_once_and_redone_for_another_checkpoint(toy_model,
                                                                             tmp_path,
                                                                             monkeypatch):
    import shutil

    from mtkit.api import splits
    from mtkit.run import load_checkpoint, save_checkpoint

    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    first = translate_split(run, "test", device=CPU)
    assert first.stats is not None and first.stats.sentences == 60
    assert first.path == run / "translations" / f"test.{decode_tag(first.cfg)}.txt"
    assert first.path.name.startswith("test.beam4-")
    assert sorted(p.name for p in first.path.parent.iterdir()) == [
        first.path.name, first.path.name + ".key"]  # no temp file
    with monkeypatch.context() as m:  # a translation reused loads no model
        m.setattr(splits, "open_model", lambda *a, **k: pytest.fail("loaded"))
        again = translate_split(run, "test", device=CPU)
    assert again.stats is None and again.path == first.path
    newer = first.path.stat().st_mtime + 10  # a touched checkpoint is the same checkpoint
    os.utime(first.checkpoint, (newer, newer))
    assert translate_split(run, "test", device=CPU).stats is None
    # Another checkpoint copied in with an older date than the translation: redone.
    state = load_checkpoint(first.checkpoint)
    state["model"] = {k: v + 0.01 if v.is_floating_point() else v
                      for k, v in state["model"].items()}
    first.checkpoint.unlink()  # best.pt may be a hard link to a numbered checkpoint
    save_checkpoint(first.checkpoint, state)
    older = first.path.stat().st_mtime - 1000
    os.utime(first.checkpoint, (older, older))
    assert translate_split(run, "test", device=CPU).stats is not None
    greedy = translate_split(run, "test", device=CPU, decode={"method": "greedy"})
    assert greedy.path.name.startswith("test.greedy-") and greedy.stats is not None


def test_split_translation_shares_threads_as_translate_does(toy_model, tmp_path, monkeypatch):
    """`score --run --threads 2`: two batches of one thread at once on a CPU, the same
    file as one batch at a time."""
    import shutil

    import mtkit.translation.lines as tr

    texts, workers = {}, []
    init = tr.StreamTranslator.__init__

    def spy(self, *args, **kwargs):
        workers.append(kwargs.get("workers", 1))
        init(self, *args, **kwargs)

    monkeypatch.setattr(tr.StreamTranslator, "__init__", spy)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            run = tmp_path / f"run{threads}"
            shutil.copytree(toy_model, run)
            done = translate_split(run, "test", device=CPU, threads=threads)
            texts[threads] = done.path.read_text()
            assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert workers == [1, 2]
    assert texts[1] == texts[2] and len(texts[1].splitlines()) == 60


def test_decode_tag_ignores_the_batch_size_only(toy_model):
    _, recipe, _ = load_translator([toy_model], CPU)
    cfg = recipe.decode
    assert decode_tag(cfg) == decode_tag(dataclasses.replace(cfg, batch_tokens=17))
    assert decode_tag(cfg) != decode_tag(dataclasses.replace(cfg, alpha=0.5))


@pytest.mark.parametrize(("spec", "words"), [
    ("gpu", "device: expected auto, cpu, cuda, cuda:N or mps, got 'gpu'"),
    ("cuda:7", "device: "),
])
def test_device_errors_name_the_option(spec, words):
    """The library names its option `device`; the command line names the flag."""
    from mtkit.cli.options import flag_of

    if spec.startswith("cuda") and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    with pytest.raises(ConfigError, match="^" + words) as caught:
        inference_device(spec)
    assert caught.value.text(flag_of).startswith("--" + words)
    assert inference_device("cpu") == CPU


@pytest.mark.parametrize(("n", "words"), [(1, "translated 1 sentence, "),
                                          (2, "translated 2 sentences, ")])
def test_summary_counts_sentences_in_english(n, words):
    assert TranslateStats(sentences=n, tokens=3, seconds=1.0).summary().startswith(words)
