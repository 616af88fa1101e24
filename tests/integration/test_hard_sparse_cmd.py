"""Every search and `mtkit align` on a hard-attention RNN and on sparse-attention models
(untrained toy checkpoints: the machinery, not the quality): greedy, beam, n-best, sampling,
--align, heatmaps and the cross-attention views (chosen, prior, posterior)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_cli
from tests.integration.test_align_cmd import _RNN, _cli, _untrained, pairs  # noqa: F401

pytestmark = pytest.mark.usefixtures("one_thread")

EXACT = [*_RNN, "model.rnn.placement=luong", "model.rnn.input_feeding=false",
         "model.rnn.hard.estimator=exact"]
MODELS = {
    "hard-exact": EXACT,
    "hard-reinforce": [*_RNN, "model.rnn.hard.estimator=reinforce"],
    "rnn-entmax15": [*_RNN, "model.attention_normalizer=entmax15"],
    "transformer-sparsemax": ["model.attention_normalizer=sparsemax"],
}


@pytest.fixture(scope="module", params=list(MODELS))
def model_run(request, toy_run: Path, tmp_path_factory: pytest.TempPathFactory):
    return request.param, _untrained(toy_run, tmp_path_factory.mktemp(request.param),
                                     MODELS[request.param])


@pytest.mark.parametrize("search", [["--greedy"], ["--beam", "3", "--nbest", "2"],
                                    ["--sample"]])
def test_every_search_with_alignments(model_run, pairs, search):  # noqa: F811
    name, run = model_run
    res = run_cli("translate", run, "-i", pairs["src"], "--format", "jsonl", "--align",
                  "--max-len-a", "0", "--max-len-b", "6", *search)
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert len(lines) == len(pairs["src"].read_text().splitlines())
    for rec in lines:
        assert "alignment" in rec
        if "--nbest" in search:
            assert len(rec["nbest"]) == 2


def test_align_writes_links_and_heatmaps_for_each_view(model_run, pairs, tmp_path):  # noqa: F811
    name, run = model_run
    views = ["chosen", "prior", "posterior"] if name == "hard-exact" else ["chosen", "prior"]
    for view in views:
        out = tmp_path / view
        out.mkdir()
        maps = ["--heatmap", out / "maps"] if view == "chosen" else []  # images are slow
        res = _cli(run, "-s", pairs["src"], "-t", pairs["tgt"], "--view", view, "--pharaoh",
                   out / "links.txt", "--json", out / "a.json", *maps)
        assert res.exit_code == 0, res.output
        assert len((out / "links.txt").read_text().splitlines()) == 8
        assert len(list((out / "maps").glob("*.png"))) == (8 if maps else 0)
        record = json.loads((out / "a.json").read_text())
        assert record["settings"]["attention"].get("view", "chosen") == view
        rows = [row for m in record["sentences"] for row in m["weights"]]
        if name.startswith("hard") and view == "chosen":  # one position per target word (a
            # row that chose the source EOS, which is dropped, is left empty)
            assert all(sorted(set(row)) in ([0, 1], [1], [0]) for row in rows)
            assert sum(1 in row for row in rows) > len(rows) / 2
    # and without -t: the search's own output, aligned
    res = _cli(run, "-s", pairs["src"], "--beam", "2", "--pharaoh", "-", "--view", views[-1])
    assert res.exit_code == 0, res.output


def test_posterior_of_a_model_without_it_is_one_clear_error(model_run, pairs):  # noqa: F811
    name, run = model_run
    if name == "hard-exact":
        pytest.skip("this one has a posterior")
    res = _cli(run, "-s", pairs["src"], "-t", pairs["tgt"], "--view", "posterior", "--pharaoh",
               "-")
    assert res.exit_code == 2, res.output
    assert "--view" in res.stderr and "hard-attention" in res.stderr
    assert "Traceback" not in res.stderr


def test_export_refuses_a_sparse_transformer(toy_run, tmp_path):
    pytest.importorskip("ctranslate2")
    run = _untrained(toy_run, tmp_path / "sparse", MODELS["transformer-sparsemax"])
    res = run_cli("export", run, "-o", tmp_path / "out")
    assert res.exit_code == 2, res.output
    assert "model.attention_normalizer is sparsemax" in res.stderr
    assert "mtkit translate" in res.stderr and not (tmp_path / "out").exists()
