"""`mtkit train --init-from` (fine-tuning) and `data.spm.from_run` on the toy recipe: what a
child run carries over from its parent and what starts afresh, and the one-line refusals."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import pytest
import torch
from rich.console import Console

from mtkit.config import dump_recipe, load_recipe
from mtkit.data.prep import prepare
from mtkit.errors import CheckpointError, ConfigError, DataError
from mtkit.run import load_checkpoint, recorded_init_from
from mtkit.train import loop, session
from mtkit.train.checkpoint import weights_digest
from tests.helpers import REPO, run_mtkit

TOY = REPO / "recipes" / "toy.yaml"


def _train(run_dir: Path, *sets: str, init_from: Path | None = None, resume: bool = False,
           init_fresh: tuple[str, ...] = ()):
    recipe = load_recipe(TOY, ["train.max_time=null", *sets])
    return session.train(recipe, run_dir, init_from=init_from, resume=resume,
                         init_fresh=init_fresh, console=Console(file=io.StringIO()))


@pytest.fixture(scope="module")
def parent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("init") / "parent"
    _train(run, "train.max_updates=20", "train.valid_every=10")
    return run


def _child_sets(parent: Path) -> list[str]:
    return [f"data.spm.from_run={parent}", "train.lr=0.0001", "train.warmup=5"]


def test_spm_from_run_reuses_the_parents_sentencepiece_model(parent: Path,
                                                             tmp_path: Path) -> None:
    child = tmp_path / "child"
    _train(child, *_child_sets(parent), "train.max_updates=1", "train.valid_every=1000",
           init_from=parent)
    assert (child / "data/spm.model").read_bytes() == (parent / "data/spm.model").read_bytes()
    # its other fields are the parent's, or refused: they would be accepted and mean nothing
    with pytest.raises(DataError, match=r"data\.spm\.vocab_size is 40 but .* trained with 51"):
        _train(tmp_path / "other", f"data.spm.from_run={parent}", "data.spm.vocab_size=40")


def test_init_from_carries_the_weights_only(parent: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    built = {}

    class Capture(loop.Trainer):
        def run(self):  # the state a child starts from, before its first update
            built["progress"], built["lr"] = dataclasses.replace(self.p), self.lr
            return super().run()

    monkeypatch.setattr(session, "Trainer", Capture)
    child = tmp_path / "child"
    _train(child, *_child_sets(parent), "train.max_updates=2", "train.valid_every=1000",
           init_from=parent)
    p, best = built["progress"], load_checkpoint(parent / "best.pt")
    assert p.update == 0 and p.best is None and p.bad == 0 and p.epoch == 1
    assert built["lr"] == pytest.approx(0.0001 / 5)  # the child's schedule, at update 1
    # the run has trained 2 updates since: the saved state proves what it started from
    first = load_checkpoint(child / "checkpoint_2.pt")
    assert first["progress"]["update"] == 2
    assert first["init_from"]["sha256"] and first["init_from"]["checkpoint"] == str(
        (parent / "best.pt").resolve())
    recs = [json.loads(line) for line in (child / "metrics.jsonl").read_text().splitlines()]
    init = next(r for r in recs if r["kind"] == "init_from")
    assert init["carried"] == ["model weights"] and "optimizer state" in init["fresh"]
    assert init["update"] == best["progress"]["update"]
    assert "--init-from" in (child / "train.log").read_text()


def test_the_parent_is_recorded_in_the_run_recipe_which_resumes(parent: Path,
                                                                tmp_path: Path) -> None:
    child, sets = tmp_path / "child", [*_child_sets(parent), "train.valid_every=1000"]
    _train(child, *sets, "train.max_updates=2", init_from=parent)
    record = load_checkpoint(child / "last.pt")["init_from"]
    assert recorded_init_from(child) == record
    assert record["update"] == load_checkpoint(parent / "best.pt")["progress"]["update"]
    text = (child / "recipe.yaml").read_text()
    assert text.splitlines()[1] == f"# init_from: {json.dumps(record)}"
    # it stays a recipe, compared on --resume as before; resuming and `mtkit prep` keep it
    assert dump_recipe(load_recipe(child / "recipe.yaml")) == text.split("\n", 2)[2]
    assert _train(child, *sets, "train.max_updates=3", resume=True).update == 3
    assert recorded_init_from(child) == record
    prepare(load_recipe(TOY, sets), child, batching=False)
    assert recorded_init_from(child) == record
    # a run started afresh in a folder prep made for a child records no parent
    fresh = tmp_path / "fresh"
    prepare(load_recipe(TOY, sets), fresh, batching=False, parent=record)
    _train(fresh, *sets, "train.max_updates=1")
    assert recorded_init_from(fresh) is None and "init_from" not in (
        fresh / "recipe.yaml").read_text()


def test_init_from_weights_equal_the_parents_and_optimizer_is_empty(
        parent: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}

    def capture(recipe, run_dir, setup, **kwargs):
        seen["digest"] = weights_digest(setup.model.state_dict())
        seen["optimizer"] = setup.optimizer.state_dict()["state"]
        seen["schedule"] = setup.schedule.state_dict()
        raise SystemExit(0)

    monkeypatch.setattr(session, "Trainer", capture)
    with pytest.raises(SystemExit):
        _train(tmp_path / "child", *_child_sets(parent), init_from=parent / "last.pt")
    assert seen["digest"] == weights_digest(load_checkpoint(parent / "last.pt")["model"])
    assert seen["optimizer"] == {}
    assert seen["schedule"] == {"kind": "inverse_sqrt", "scale": 1.0, "best": None, "bad": 0,
                                "horizon": None, "start": 5}  # start: the child's warm-up


def test_init_from_refuses_another_vocabulary_or_architecture(parent: Path,
                                                              tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"model\.transformer\.ffn_dim is 64 in this "
                       r"recipe but 128 in .*best\.pt's; the architecture must be"):
        _train(tmp_path / "a", *_child_sets(parent), "model.transformer.ffn_dim=64",
               init_from=parent)
    with pytest.raises(CheckpointError, match=r"data\.spm\.from_run is unset: prep would "
                       r"train a new sentencepiece model .*; set data\.spm\.from_run: "):
        _train(tmp_path / "b", "data.spm.vocab_size=40", init_from=parent)
    # refused from the plan, before prep trained a sentencepiece model and left data behind
    assert not (tmp_path / "b" / "data").exists()
    with pytest.raises(ConfigError, match="give one of them"):
        _train(parent, init_from=parent, resume=True)


def test_a_from_run_of_another_vocabulary_is_refused_before_prep(parent: Path,
                                                                  tmp_path: Path) -> None:
    """data.spm.from_run names a run whose sentencepiece model is not the parent's."""
    other = tmp_path / "other"
    prepare(load_recipe(TOY, ["data.spm.vocab_size=40"]), other, batching=False)
    with pytest.raises(CheckpointError, match=r"this run's .*/child/data holds other ones"):
        _train(tmp_path / "child", f"data.spm.from_run={other}", "data.spm.vocab_size=40",
               init_from=parent)
    assert not (tmp_path / "child" / "data").exists()


def test_init_from_mismatch_is_one_line_with_exit_2(parent: Path, tmp_path: Path) -> None:
    proc = run_mtkit("train", str(TOY), "--run-dir", str(tmp_path / "c"), "--init-from",
                     str(parent), "--set", "data.spm.vocab_size=40", "--set",
                     "train.max_time=null", timeout=300)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("mtkit: error: --init-from: ") and "Traceback" not in proc.stderr
    assert "data.spm.from_run" in lines[-1]


def _weights_at_start(monkeypatch: pytest.MonkeyPatch, run: Path, *sets: str,
                      **kwargs) -> dict[str, torch.Tensor]:
    """The weights a run starts training from (it stops before its first update)."""
    seen = {}

    def capture(recipe, run_dir, setup, **_):
        seen.update(setup.model.state_dict())
        raise SystemExit(0)

    with monkeypatch.context() as m, pytest.raises(SystemExit):
        m.setattr(session, "Trainer", capture)
        _train(run, *sets, **kwargs)
    return seen


def test_init_fresh_output_takes_every_other_weight_from_the_parent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    untied = ["model.transformer.share_embeddings=false", "train.valid_every=1000"]
    parent = tmp_path / "parent"
    _train(parent, *untied, "train.max_updates=3")
    was = load_checkpoint(parent / "last.pt")["model"]
    child = [*untied, *_child_sets(parent)]
    fresh = _weights_at_start(monkeypatch, tmp_path / "fresh", *child)  # no parent
    now = _weights_at_start(monkeypatch, tmp_path / "child", *child, init_from=parent,
                            init_fresh=("output",))
    output = {"generator.weight", "generator.bias"}
    for name, value in now.items():
        torch.testing.assert_close(value, (fresh if name in output else was)[name])
    assert not torch.equal(was["generator.weight"], fresh["generator.weight"])
    # said at start and recorded
    _train(tmp_path / "run", *child, "train.max_updates=1", init_from=parent,
           init_fresh=("output",))
    said = (tmp_path / "run" / "train.log").read_text()
    assert "carried over: model weights but output; fresh: output (re-initialized), " in said
    assert load_checkpoint(tmp_path / "run" / "last.pt")["init_from"]["reinitialized"] == [
        "output"]
    assert recorded_init_from(tmp_path / "run")["reinitialized"] == ["output"]


def test_init_fresh_of_every_vocabulary_part_allows_another_vocabulary(
        parent: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    every = ("tgt_embeddings", "output", "src_embeddings")
    now = _weights_at_start(monkeypatch, tmp_path / "child", "data.spm.vocab_size=40",
                            init_from=parent, init_fresh=every)
    was = load_checkpoint(parent / "best.pt")["model"]
    assert now["src_embed.tokens.weight"].shape[0] == 40 != was["src_embed.tokens.weight"
                                                                 ].shape[0]
    torch.testing.assert_close(now["encoder.layers.0.self_attn.qkv.weight"],
                               was["encoder.layers.0.self_attn.qkv.weight"])
    # tied embeddings (the toy recipe's) are one tensor: all of them, or none
    with pytest.raises(ConfigError, match="init_fresh: output shares its weights with "
                       "src_embeddings"):
        _train(tmp_path / "tied", *_child_sets(parent), init_from=parent,
               init_fresh=("output",))
    with pytest.raises(ConfigError, match="init_fresh: re-initializes parts of the model "
                       "init_from loads"):
        _train(tmp_path / "alone", init_fresh=every)


def test_init_fresh_names_the_parts_on_the_command_line(parent: Path, tmp_path: Path) -> None:
    proc = run_mtkit("train", str(TOY), "--run-dir", str(tmp_path / "c"), "--init-from",
                     str(parent), "--init-fresh", "decoder")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1] == (
        "mtkit: error: --init-fresh decoder: not a part of a model; choose from "
        "src_embeddings, tgt_embeddings, output")
