"""Training that a restarted job continues without a human: `--resume auto` and checkpoints
every `train.checkpoint_every_time` of wall-clock, on the toy recipe."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
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
from mtkit.train.distributed import shared_store_warning
from tests.helpers import REPO, run_mtkit, wait_for_training

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


# torchrun's environment for the tests: one thread per process (two share this machine), and
# the rendezvous store made afresh for each attempt, as README's multi-node section says
# (the agent's shared one keeps the previous attempt's gloo addresses: `shared_store_warning`);
# a worker that crashes (SIGABRT, SIGSEGV) prints every thread's Python stack
TORCHRUN_ENV = {"OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
                "PYTHONFAULTHANDLER": "1"}


def _torchrun() -> Path:
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.is_file() or not torch.distributed.is_gloo_available():
        pytest.skip("torchrun with gloo is not available")
    return torchrun


def _workers(agent: int) -> list[int]:
    """The pids of torchrun agent `agent`'s workers."""
    return [int(pid) for task in Path(f"/proc/{agent}/task").iterdir()
            for pid in (task / "children").read_text().split()]


def _worker_pid(agent: int, rank: int) -> int | None:
    """The pid of torchrun agent `agent`'s worker of `rank`, or None (not started yet)."""
    for pid in _workers(agent):
        with contextlib.suppress(OSError):  # a worker that ended meanwhile
            if f"RANK={rank}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(
                    b"\0"):
                return pid
    return None


def _end(agent: subprocess.Popen) -> None:
    """Kill a torchrun agent that is still running, then its workers: each is in a session of
    its own, out of the agent's process group, and a worker waiting for a peer would wait for
    the process group's timeout (an hour)."""
    if agent.poll() is None:
        workers = _workers(agent.pid) if Path("/proc/self/task").is_dir() else []
        with contextlib.suppress(ProcessLookupError):
            os.killpg(agent.pid, signal.SIGKILL)  # first: it restarts no worker after this
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    agent.wait()


def _trained_to(run: Path) -> int:
    """The latest update metrics.jsonl has a train record of (0 before the first)."""
    path = run / "metrics.jsonl"
    lines = path.read_text().split("\n")[:-1] if path.exists() else []  # whole lines only
    return max((json.loads(line)["update"] for line in lines if '"kind": "train"' in line),
               default=0)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds workers in /proc")
def test_a_killed_worker_is_restarted_and_resumed_and_one_process_keeps_the_global_batch(
        tmp_path: Path) -> None:
    """The elastic test: SIGKILL to one of two workers mid-training; torchrun restarts both,
    `--resume auto` continues from the last checkpoint to the planned update. Then the run,
    resumed on one process, keeps its global batch."""
    run = tmp_path / "run"
    sets = ["--set", "train.max_time=null", "--set", "train.valid_every=100000", "--set",
            "train.log_every=1", "--set", "train.checkpoint_every=4"]
    output = tmp_path / "torchrun.out"
    with open(output, "w") as out:
        agent = subprocess.Popen(
            [str(_torchrun()), "--standalone", "--nproc_per_node=2", "--max-restarts=1", "-m",
             "mtkit", "train", str(TOY), "--run-dir", str(run), "--resume", "auto", *sets,
             "--set", "train.max_updates=20"], stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, **TORCHRUN_ENV}, start_new_session=True)
    try:  # however the test ends, no training is left running
        deadline = time.monotonic() + 120
        while _trained_to(run) < 6:  # past the checkpoint of update 4
            assert agent.poll() is None and time.monotonic() < deadline, output.read_text()
            time.sleep(0.02)
        os.kill(_worker_pid(agent.pid, rank=1), signal.SIGKILL)
        agent.wait(timeout=180)
    finally:
        _end(agent)
    assert agent.returncode == 0, output.read_text()[-3000:]
    log = (run / "train.log").read_text()
    resumed = [int(u) for u in re.findall(r"resuming at update (\d+)", log)]
    assert len(resumed) == 1 and 4 <= resumed[0] < 20 and resumed[0] % 4 == 0, log
    assert load_checkpoint(run / "last.pt")["progress"]["update"] == 20

    # in this process (one, without torchrun's environment), as a restart on one node would
    _, said = _train(run, *sets[1::2], "train.max_updates=24", resume="auto")
    log = (run / "train.log").read_text()
    assert log.count("global batch: 2 process(es) x update_freq 1 x 512 tokens") == 2
    assert ("resuming 1 process(es) from a run of 2: update_freq 2 (was 1) keeps the global "
            "batch at 2 x 512 tokens") in log
    assert "global batch: 1 process(es) x update_freq 2 x 512 tokens" in log
    # and a resume on the same single process keeps it (the checkpoint records update_freq 2)
    _train(run, *sets[1::2], "train.max_updates=26", resume="auto")
    assert (run / "train.log").read_text().count(
        "global batch: 1 process(es) x update_freq 2 x 512 tokens") == 2


# Run by each rank of the test below: `session.train`, then the names of the threads left in
# the process, into threads-RANK.txt. The collector only runs when asked (as it may not have
# run by the end of a real run).
_THREADS_LEFT = """
import gc
gc.disable()
import os, sys
from pathlib import Path
from rich.console import Console
from mtkit.config import load_recipe
from mtkit.errors import DataError
from mtkit.train import loop, session
out, toy, run, ending = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
if ending == "fail":  # an error after training, raised where the frames hold the DDP wrapper
    trained = session.Trainer.run
    def run_then_fail(self):
        trained(self)
        raise RuntimeError("after training")
    session.Trainer.run = run_then_fail
if ending == "valid" and os.environ["RANK"] == "0":  # raised in a closure over the Trainer
    def failing(*args, **kwargs):
        raise DataError("the validation data went bad")
    loop.validate = failing
recipe = load_recipe(toy, ["train.max_time=null", "train.valid_every=2",
                           "train.max_updates=3"])
try:
    session.train(recipe, run, console=Console(file=open(os.devnull, "w")))
except Exception as e:  # kept, with its traceback, as a caller may keep it
    assert ending != "ok", e
    kept = e
names = [Path(f"/proc/self/task/{t}/comm").read_text().strip() for t in os.listdir(
    "/proc/self/task")]
(out / f"threads-{os.environ['RANK']}.txt").write_text("\\n".join(sorted(names)))
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads thread names in /proc")
@pytest.mark.parametrize("ending", ["ok", "fail", "valid"])
def test_a_rank_ends_its_process_group_threads_before_the_interpreter_exits(
        tmp_path: Path, ending: str) -> None:
    """gloo's threads (and rank 0's store's) outlived destroy_process_group, held by the DDP
    wrapper and by torch.distributed.nn.functional's default arguments; one that took the GIL
    while the interpreter exited aborted rank 0 (SIGABRT, 'terminate called without an
    active exception') after a finished run. Once `train` returns or raises (after training,
    or in rank 0's validation), they are gone."""
    script = tmp_path / "threads_left.py"
    script.write_text(_THREADS_LEFT)
    done = subprocess.run(
        [str(_torchrun()), "--standalone", "--nproc_per_node=2", str(script), str(tmp_path),
         str(TOY), str(tmp_path / "run"), ending], capture_output=True, text=True,
        timeout=300, env={**os.environ, **TORCHRUN_ENV, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        names = (tmp_path / f"threads-{rank}.txt").read_text().split("\n")
        assert not [n for n in names if "gloo" in n or "tcpstore" in n], (rank, names)


def test_sigterm_to_the_torchrun_agent_leaves_a_checkpoint_that_resumes(tmp_path: Path
                                                                        ) -> None:
    run = tmp_path / "run"
    cmd = [str(_torchrun()), "--standalone", "--nproc_per_node=2", "-m", "mtkit", "train",
           str(TOY), "--run-dir", str(run), "--resume", "auto", "--set", "train.max_time=null",
           "--set", "train.valid_every=100000", "--set", "train.log_every=2", "--set",
           "train.max_updates=100000"]
    env = {**os.environ, **TORCHRUN_ENV}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env, start_new_session=True)
    try:  # however the test ends, no training is left running
        wait_for_training(run, proc)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=180)
    finally:
        _end(proc)
    saved = load_checkpoint(run / "last.pt")["progress"]["update"]
    assert saved >= 2
    again = subprocess.run(cmd[:-1] + [f"train.max_updates={saved + 2}"], capture_output=True,
                           text=True, timeout=300, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming at update {saved}" in (run / "train.log").read_text()


def test_restarts_over_the_agents_shared_store_are_warned_of(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "1")
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in shared_store_warning()
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "0")  # never restarted: nothing to fear
    assert shared_store_warning() is None
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "3")  # a store of each attempt's own
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "False")
    assert shared_store_warning() is None
