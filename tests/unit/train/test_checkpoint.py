"""Checkpoints: RNG states, safe loading, keeping, averaging, `load_model`, `mtkit average`."""

from __future__ import annotations

import io
import os
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from mtkit import run as run_files
from mtkit.cli import app
from mtkit.config import load_recipe
from mtkit.errors import CheckpointError
from mtkit.train import checkpoint as ckpt
from mtkit.train.session import train
from tests.helpers import REPO

TOY = REPO / "recipes" / "toy.yaml"


@pytest.fixture(scope="module")
def toy_trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A toy run of 6 updates with checkpoints at 2, 4 and 6 (read-only: copy to modify)."""
    run = tmp_path_factory.mktemp("toy-trained")
    recipe = load_recipe(TOY, ["train.max_updates=6", "train.checkpoint_every=2",
                               "train.valid_every=4", "train.keep_last=3", "train.max_time=null"])
    train(recipe, run, console=Console(file=io.StringIO()))
    return run


def _draws() -> tuple:
    return random.random(), np.random.rand(), torch.rand(3).tolist()


def test_rng_states_restore_every_generator() -> None:
    _draws()
    state = ckpt.capture_rng()
    first = _draws()
    _draws()
    ckpt.restore_rng(state)
    assert _draws() == first


def test_a_checkpoint_is_tensors_and_primitives_only(toy_trained: Path) -> None:
    state = torch.load(toy_trained / "last.pt", weights_only=True)
    assert state["format"] == run_files.CHECKPOINT_FORMAT
    assert {"recipe", "vocab", "model", "optimizer", "schedule", "progress", "rng"} <= set(state)
    progress = state["progress"]
    assert (progress["update"], progress["epoch"], progress["saved_update"]) == (6, 1, 6)
    assert progress["position"] == 6 and progress["world_size"] == 1
    assert {"python", "numpy", "torch"} <= set(state["rng"][0])
    assert "name: toy" in state["recipe"]


def test_loading_refuses_pickled_code_and_garbage(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self) -> tuple:
            return (os.system, ("echo pwned",))

    torch.save({"format": run_files.CHECKPOINT_FORMAT, "recipe": "", "vocab": {}, "model": Evil()},
               tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match="evil.pt: not a readable checkpoint"):
        run_files.load_checkpoint(tmp_path / "evil.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="junk.pt: not a readable checkpoint"):
        run_files.load_checkpoint(tmp_path / "junk.pt")
    torch.save({"weights": torch.ones(1)}, tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match="not an mtkit checkpoint"):
        run_files.load_checkpoint(tmp_path / "foreign.pt")


def test_a_checkpoint_that_cannot_be_read_is_not_called_foreign(tmp_path: Path,
                                                                monkeypatch) -> None:
    """An I/O error (EIO, EACCES) was reported as 'not a readable checkpoint (expected a .pt
    file written by mtkit train ...)', blaming the file."""
    torch.save({"x": 1}, tmp_path / "best.pt")

    def failing(*args, **kwargs):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(torch, "load", failing)
    with pytest.raises(CheckpointError, match=r"best\.pt: cannot be read: Input/output error$"):
        run_files.load_checkpoint(tmp_path / "best.pt")


def test_memory_mapped_loading_reads_legacy_files_too(tmp_path: Path) -> None:
    """Inference maps checkpoints (mmap=True); a file in torch's pre-1.6 format cannot be
    mapped and is read whole instead of being called unreadable."""
    state = {"format": run_files.CHECKPOINT_FORMAT, **_state(3.0)}
    torch.save(state, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    run_files.save_checkpoint(tmp_path / "zip.pt", _state(3.0))
    for name in ("legacy.pt", "zip.pt"):
        loaded = run_files.load_checkpoint(tmp_path / name, mmap=True)
        torch.testing.assert_close(loaded["model"]["w"], torch.full((2,), 3.0))
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="junk.pt: not a readable checkpoint"):
        run_files.load_checkpoint(tmp_path / "junk.pt", mmap=True)


def _state(value: float) -> dict:
    return {"recipe": "", "vocab": {"src": 1, "tgt": 1}, "model": {"w": torch.full((2,), value)}}


def test_run_checkpoints_keep_the_last_k_and_best_survives_pruning(tmp_path: Path) -> None:
    for update, best in ((10, True), (20, False), (30, False), (40, False)):
        ckpt.write_run_checkpoint(tmp_path, _state(update), update=update, is_best=best,
                                  keep_last=2)
    assert [p.name for p in ckpt.numbered_checkpoints(tmp_path)] == \
        ["checkpoint_30.pt", "checkpoint_40.pt"]
    assert run_files.load_checkpoint(tmp_path / "last.pt")["model"]["w"][0] == 40
    assert run_files.load_checkpoint(tmp_path / "best.pt")["model"]["w"][0] == 10
    assert not list(tmp_path.glob(".*tmp"))  # no temporary files left behind


def test_average_is_the_mean_and_keeps_tied_weights_tied(tmp_path: Path) -> None:
    paths = []
    for i, v in enumerate((1.0, 2.0, 6.0)):
        shared = torch.full((2, 2), v)
        state = {"recipe": "", "vocab": {"src": 1, "tgt": 1},
                 "model": {"emb": shared, "out": shared, "steps": torch.tensor(7)}}
        paths.append(run_files.save_checkpoint(tmp_path / f"c{i}.pt", state))
    avg = ckpt.average_checkpoints(paths)
    torch.testing.assert_close(avg["emb"], torch.full((2, 2), 3.0))
    assert avg["emb"] is avg["out"] and avg["steps"].item() == 7
    bad = run_files.save_checkpoint(tmp_path / "bad.pt", {
        "recipe": "", "vocab": {}, "model": {"emb": torch.ones(3), "out": torch.ones(3),
                                             "steps": torch.tensor(7)}})
    with pytest.raises(CheckpointError, match=r"bad.pt: `emb` has shape \(3,\)"):
        ckpt.average_checkpoints(paths[:1] + [bad])


def test_average_keeps_two_views_of_one_storage_apart(tmp_path: Path) -> None:
    """Rows 0 and 1 of one tensor share a storage but are different weights."""
    paths = []
    for i, v in enumerate((1.0, 3.0)):
        both = torch.tensor([[v, v], [10 * v, 10 * v]])
        paths.append(run_files.save_checkpoint(tmp_path / f"v{i}.pt", {
            "recipe": "", "vocab": {}, "model": {"a": both[0], "b": both[1]}}))
    avg = ckpt.average_checkpoints(paths)
    torch.testing.assert_close(avg["a"], torch.full((2,), 2.0))
    torch.testing.assert_close(avg["b"], torch.full((2,), 20.0))


def test_load_model_takes_best_then_last_and_rebuilds_the_trained_model(
        toy_trained: Path, tmp_path: Path) -> None:
    model, recipe, tok = run_files.load_model(toy_trained, "cpu")
    assert recipe.name == "toy" and not model.training
    assert tok.tgt_vocab_size == 51
    saved = run_files.load_checkpoint(toy_trained / "best.pt")["model"]
    assert ckpt.weights_digest(model.state_dict()) == ckpt.weights_digest(saved)
    run = tmp_path / "run"
    shutil.copytree(toy_trained, run)
    (run / "best.pt").unlink()
    model, _, _ = run_files.load_model(run, "cpu")
    assert ckpt.weights_digest(model.state_dict()) == \
        ckpt.weights_digest(run_files.load_checkpoint(run / "last.pt")["model"])
    (run / "last.pt").unlink()
    with pytest.raises(CheckpointError, match="no best.pt or last.pt"):
        run_files.load_model(run, "cpu")
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(toy_trained / "last.pt", alone / "model.pt")
    with pytest.raises(CheckpointError, match="needs its run directory's data/ folder"):
        run_files.load_model(alone / "model.pt", "cpu")


def test_average_command_on_a_run_directory(toy_trained: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(toy_trained, run)
    result = CliRunner().invoke(app, ["average", str(run), "--last", "2"])
    assert result.exit_code == 0, result.output
    assert "averaged 2 checkpoints (checkpoint_4.pt, checkpoint_6.pt)" in result.output
    avg = run_files.load_checkpoint(run / "averaged.pt")["model"]
    c4 = run_files.load_checkpoint(run / "checkpoint_4.pt")["model"]
    c6 = run_files.load_checkpoint(run / "checkpoint_6.pt")["model"]
    for k in avg:
        if avg[k].is_floating_point():
            torch.testing.assert_close(avg[k], (c4[k] + c6[k]) / 2)
    model, _, _ = run_files.load_model(run / "averaged.pt", "cpu")  # translate/score accept it
    assert ckpt.weights_digest(model.state_dict()) == ckpt.weights_digest(avg)
    result = CliRunner().invoke(app, ["average", str(run / "checkpoint_2.pt"),
                                      str(run / "checkpoint_6.pt"), "-o", str(run / "a.pt")])
    assert result.exit_code == 0 and (run / "a.pt").is_file()
    # where no data/ folder is beside it, nothing could load the average: refused
    result = CliRunner().invoke(app, ["average", str(run / "checkpoint_2.pt"),
                                      str(run / "checkpoint_6.pt"), "-o", str(tmp_path / "a.pt")])
    assert result.exit_code == 2 and "no data/ folder" in result.output
    assert not (tmp_path / "a.pt").exists()


def test_average_of_more_than_training_wrote_does_not_advise_keep_last(toy_trained: Path,
                                                                       tmp_path: Path) -> None:
    """`make demo`'s run writes two checkpoints under train.keep_last 3: `average --last 3`
    advised raising keep_last, which was 3 already."""
    run = tmp_path / "run"
    shutil.copytree(toy_trained, run)
    (run / "checkpoint_2.pt").unlink()  # as if training had saved at updates 4 and 6 only
    result = CliRunner().invoke(app, ["average", str(run), "--last", "3"])
    assert result.exit_code == 2
    said = " ".join(result.output.split())
    assert ("2 checkpoint_<update>.pt file(s) kept, cannot average 3 (training wrote no more "
            "(one at each validation, train.valid_every, or every train.checkpoint_every "
            "updates): average --last 2, or train with checkpoints closer together)") in said
    assert "keep_last" not in said


def test_average_command_errors_are_one_line(toy_trained: Path) -> None:
    result = CliRunner().invoke(app, ["average", str(toy_trained), "--last", "5"])
    assert result.exit_code == 2
    assert ("3 checkpoint_<update>.pt file(s) kept, cannot average 5 (train.keep_last (3) "
            "keeps no more: raise it for the next run)") in " ".join(result.output.split())
    result = CliRunner().invoke(app, ["average", str(toy_trained / "last.pt")])
    assert result.exit_code == 2 and "at least two different checkpoint files" in result.output
    # a file named twice (under two names) would count twice: A A B is not (A + B) / 2
    first, other = sorted(toy_trained.glob("checkpoint_*.pt"))[:2]
    twice = Path(os.path.relpath(first))  # the same file by another name
    assert str(twice) != str(first)
    result = CliRunner().invoke(app, ["average", str(first), str(twice), str(other),
                                      "-o", str(toy_trained / "x.pt")])
    assert result.exit_code == 2, result.output
    assert f"{twice}: given twice (as {first}, the same file)" in result.output
    assert not (toy_trained / "x.pt").exists()
