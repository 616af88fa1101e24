"""Training that a restarted job continues without a human: `--resume auto` and checkpoints
every `train.checkpoint_every_time` of wall-clock, on the toy recipe."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from rich.console import Console

from mtkit.config import load_recipe
from mtkit.errors import CheckpointError, ConfigError
from mtkit.run import load_checkpoint
from mtkit.train import loop, session
from tests.conftest import REPO
from tests.helpers import run_mtkit

TOY = REPO / "recipes" / "toy.yaml"


def _train(run_dir: Path, *sets: str, resume=False):
    out = io.StringIO()
    recipe = load_recipe(TOY, ["train.max_time=null", "train.valid_every=1000", *sets])
    res = session.train(recipe, run_dir, resume=resume, console=Console(file=out))
    return res, out.getvalue()


def test_resume_auto_starts_an_empty_run_and_resumes_a_started_one(tmp_path: Path) -> None:
    run = tmp_path / "run"
    res, said = _train(run, "train.max_updates=2", resume="auto")
    assert res.update == 2 and f"--resume auto: no checkpoint in {run}, starting" in said
    res, said = _train(run, "train.max_updates=4", resume="auto")
    assert res.update == 4 and f"--resume auto: {run / 'last.pt'} found, resuming" in said


def test_resume_auto_refuses_a_run_of_another_recipe(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _train(run, "train.max_updates=2")
    with pytest.raises(CheckpointError, match=r"`model` section differs .*ffn_dim"):
        _train(run, "train.max_updates=4", "model.transformer.ffn_dim=64", resume="auto")
    # numbered checkpoints without last.pt: another run's, not one to start over
    (run / "last.pt").unlink()
    with pytest.raises(CheckpointError, match="already holds a training run"):
        _train(run, "train.max_updates=4", resume="auto")


def test_resume_auto_on_the_command_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = ("train", str(TOY), "--run-dir", str(run), "--set", "train.max_updates=2",
            "--set", "train.valid_every=1000", "--set", "train.max_time=null")
    first = run_mtkit(*args, "--resume", "auto")
    assert first.returncode == 0, first.stderr
    again = run_mtkit(*args, "--resume", "auto", "--set", "train.max_updates=3")
    assert again.returncode == 0 and "resuming at update 2" in (run / "train.log").read_text()
    bad = run_mtkit(*args, "--resume=sometimes")
    assert bad.returncode == 2 and "expected no value or `auto`" in bad.stderr


def test_checkpoint_every_time_saves_by_the_clock(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(loop.time, "monotonic", lambda: now[0])
    step = loop.Trainer._update

    def update(self, group):  # each update takes 25 s of the clock
        now[0] += 25.0
        return step(self, group)

    monkeypatch.setattr(loop.Trainer, "_update", update)
    run = tmp_path / "run"
    _train(run, "train.max_updates=9", "train.checkpoint_every_time=1m", "train.keep_last=9")
    assert sorted(p.name for p in run.glob("checkpoint_*.pt")) == [
        "checkpoint_3.pt", "checkpoint_6.pt", "checkpoint_9.pt"]
    with pytest.raises(ConfigError, match="checkpoint_every_time"):
        load_recipe(TOY, ["train.checkpoint_every_time=soon"])


def test_a_two_process_run_resumed_in_one_keeps_the_global_batch(tmp_path: Path) -> None:
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.is_file() or not torch.distributed.is_gloo_available():
        pytest.skip("torchrun with gloo is not available")
    run = tmp_path / "run"
    sets = ["--set", "train.max_time=null", "--set", "train.valid_every=100000", "--set",
            "train.log_every=5"]
    two = subprocess.run(
        [str(torchrun), "--standalone", "--nproc_per_node=2", "--max-restarts=1", "-m",
         "mtkit", "train", str(TOY), "--run-dir", str(run), "--resume", "auto", *sets,
         "--set", "train.max_updates=10"], capture_output=True, text=True, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert two.returncode == 0, two.stderr[-3000:]
    one = run_mtkit("train", str(TOY), "--run-dir", str(run), "--resume", "auto", *sets,
                    "--set", "train.max_updates=14")
    assert one.returncode == 0, one.stderr[-3000:]
    log = (run / "train.log").read_text()
    assert "global batch: 2 process(es) x update_freq 1 x 512 tokens" in log
    assert ("resuming 1 process(es) from a run of 2: update_freq 2 (was 1) keeps the global "
            "batch at 2 x 512 tokens") in log
    assert "global batch: 1 process(es) x update_freq 2 x 512 tokens" in log
    # and a resume on the same single process keeps it (the checkpoint records update_freq 2)
    again = run_mtkit("train", str(TOY), "--run-dir", str(run), "--resume", "auto", *sets,
                      "--set", "train.max_updates=16")
    assert again.returncode == 0, again.stderr[-3000:]
    assert (run / "train.log").read_text().count(
        "global batch: 1 process(es) x update_freq 2 x 512 tokens") == 2


def test_sigterm_to_the_torchrun_agent_leaves_a_checkpoint_that_resumes(tmp_path: Path
                                                                        ) -> None:
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.is_file() or not torch.distributed.is_gloo_available():
        pytest.skip("torchrun with gloo is not available")
    run = tmp_path / "run"
    cmd = [str(torchrun), "--standalone", "--nproc_per_node=2", "-m", "mtkit", "train",
           str(TOY), "--run-dir", str(run), "--resume", "auto", "--set", "train.max_time=null",
           "--set", "train.valid_every=100000", "--set", "train.log_every=2", "--set",
           "train.max_updates=100000"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env, start_new_session=True)
    try:  # however the test ends, no training is left running
        deadline = time.monotonic() + 180
        while not ((run / "metrics.jsonl").exists() and '"train"' in (
                run / "metrics.jsonl").read_text()) and proc.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=180)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    saved = load_checkpoint(run / "last.pt")["progress"]["update"]
    assert saved >= 2
    again = subprocess.run(cmd[:-1] + [f"train.max_updates={saved + 2}"], capture_output=True,
                           text=True, timeout=300, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming at update {saved}" in (run / "train.log").read_text()
