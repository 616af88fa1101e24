"""The vocabulary shortlist on the toy task: counted from the training data it names every
reference piece of nearly every test line; decoding over it gives the toy model's own
translations; it is saved in the run, read back, and kept off the forced paths."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import mtkit
from mtkit.data.manifest import read_manifest
from mtkit.data.shortlist import build_shortlist, load_shortlist, save_shortlist
from mtkit.data.spm import Tokenizer
from mtkit.data.store import ParallelData, text_path
from mtkit.errors import ConfigError
from mtkit.run import SHORTLIST, data_dir
from tests.helpers import run_cli

pytestmark = pytest.mark.usefixtures("one_thread")
# Small lists, so that each batch's columns are a real part of the toy's 51 pieces.
PER_SOURCE, FREQUENT = 6, 4


@pytest.fixture(scope="module")
def shortlisted(toy_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the toy run with a small shortlist saved in it."""
    run = tmp_path_factory.mktemp("shortlisted") / "run"
    shutil.copytree(toy_model, run)
    tok = Tokenizer.load(data_dir(run))
    found = build_shortlist(ParallelData.load(data_dir(run), "train"), tok.src_vocab_size,
                            tok.tgt_vocab_size, read_manifest(run)["data_hash"],
                            per_source=PER_SOURCE, frequent=FREQUENT)
    save_shortlist(run / SHORTLIST, found)
    return run


def test_shortlist_holds_the_reference_pieces(shortlisted):
    found = load_shortlist(shortlisted / SHORTLIST)
    test = ParallelData.load(data_dir(shortlisted), "test")
    held = 0
    for i in range(len(test)):
        allowed = set(found.table[test.src(i)].ravel().tolist()) | set(found.frequent.tolist())
        held += set(test.tgt(i).tolist()) <= allowed
    assert held >= 0.99 * len(test), (held, len(test))
    # the lists are short: a batch's columns are a part of the vocabulary, not all of it
    assert len(set(found.table[test.src(0)].ravel().tolist())) < 30


def test_shortlisted_decoding_gives_the_same_translations(shortlisted):
    src = text_path(data_dir(shortlisted), "test", "src").read_text().splitlines()
    full = mtkit.load(shortlisted, device="cpu", threads=1)
    short = mtkit.load(shortlisted, device="cpu", threads=1, shortlist=True)
    for opts in ({}, {"beam_size": 1, "method": "greedy"}):
        a = full.translate_full(src, **opts)
        b = short.translate_full(src, **opts)
        assert [t.text for t in a] == [t.text for t in b]
        assert [t.candidates[0].tokens for t in a] == [t.candidates[0].tokens for t in b]
    # a prefix outside every list is still forced, and the search continues after it
    [res] = short.translate_full([src[0]], prefix=["mir lop"])
    assert res.text.startswith("mir lop")


def test_groups_of_a_batch_search_their_own_columns(shortlisted, monkeypatch):
    """A batch searched in groups of 7 sentences (each over its own, smaller union of lists)
    gives every sentence, in order, what the whole vocabulary gives it."""
    import mtkit.decode
    from mtkit.decode.shortlist import OutputShortlist

    src = text_path(data_dir(shortlisted), "test", "src").read_text().splitlines()
    full = mtkit.load(shortlisted, device="cpu", threads=1).translate(src)
    monkeypatch.setattr(mtkit.decode, "GROUP", 7)
    seen: list[int] = []
    rows = OutputShortlist.rows
    monkeypatch.setattr(OutputShortlist, "rows", lambda self, src, prefix=None: (
        seen.append(len(src)) or rows(self, src, prefix)))
    short = mtkit.load(shortlisted, device="cpu", threads=1, shortlist=True)
    assert short.translate(src) == full
    assert max(seen) == 7 and sum(seen) >= len(src)
    # each group takes its own sentences' prefixes (every third: its first word)
    prefixes = [t.split()[0] if i % 3 == 0 and t else "" for i, t in enumerate(full)]
    base = mtkit.load(shortlisted, device="cpu", threads=1)
    assert short.translate(src, prefix=prefixes) == base.translate(src, prefix=prefixes)


def test_shortlist_is_counted_saved_and_read_back(toy_model, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    assert not (run / SHORTLIST).exists()
    res = run_cli("translate", run, "--threads", "1", "--shortlist", input="sa gu\n")
    assert res.exit_code == 0, res.output
    saved = run / SHORTLIST
    assert load_shortlist(saved).data_hash == read_manifest(run)["data_hash"]
    before = saved.stat().st_mtime_ns
    again = run_cli("translate", run, "--threads", "1", "--shortlist", "--format", "jsonl",
                    input="sa gu\n")
    assert again.exit_code == 0 and saved.stat().st_mtime_ns == before
    assert json.loads(again.stdout)["hypothesis"] == res.stdout.strip()
    saved.write_text("not a shortlist")
    bad = run_cli("translate", run, "--threads", "1", "--shortlist", input="sa gu\n")
    assert bad.exit_code == 2 and "not a shortlist mtkit wrote" in bad.output
    assert saved.read_text() == "not a shortlist"  # not overwritten: mtkit did not write it


def test_shortlist_is_refused_for_an_export(tmp_path, monkeypatch):
    from mtkit.api import model as api

    monkeypatch.setattr(api, "exported_model", lambda paths: object())
    with pytest.raises(ConfigError, match="shortlist: mtkit's own decoder's"):
        mtkit.load(tmp_path, shortlist=True)
