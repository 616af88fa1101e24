"""Training: loss, schedules, the update step, and whole (tiny) runs on the toy recipe.

Runs use recipes/toy.yaml (a 2+2-layer 64-wide Transformer reversing made-up words) on one CPU
thread. The kill-and-resume, SIGINT and DDP tests launch real processes.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from rich.console import Console

from mtkit.config import TrainConfig, load_recipe
from mtkit.data.batch import collate
from mtkit.device import Amp
from mtkit.errors import CheckpointError, ConfigError, MtkitError
from mtkit.models.build import build_model
from mtkit.models.vocab import PAD_ID
from mtkit.run import load_checkpoint
from mtkit.train import loop, session, step
from mtkit.train.checkpoint import weights_digest
from mtkit.train.distributed import Dist
from mtkit.train.loss import LossSums, label_smoothed_nll, perplexity
from mtkit.train.optim import Schedule, build_optimizer, optimizer_step
from mtkit.train.progress import TrainResult
from tests.helpers import REPO, TrainClock, default_signals, wait_for_training

TOY = REPO / "recipes" / "toy.yaml"


def _train(run_dir: Path, *sets: str, resume: bool = False) -> TrainResult:
    recipe = load_recipe(TOY, ["train.max_time=null", *sets])
    return session.train(recipe, run_dir, resume=resume, console=Console(file=io.StringIO()))


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _digest(path: Path) -> str:
    return weights_digest(load_checkpoint(path)["model"])


def _mtkit(*args: str) -> list[str]:
    return [sys.executable, "-m", "mtkit", *args]


# --------------------------------------------------------------------------- loss


@pytest.mark.parametrize("smoothing", [0.1, 0.0])
def test_loss_equals_torch_label_smoothed_cross_entropy(smoothing: float) -> None:
    """Values and gradient (the loss computes its own: `_SmoothedNLL`), scaled as the trainer
    scales the loss, against torch's cross-entropy."""
    logits = torch.randn(3, 5, 11, requires_grad=True)
    target = torch.randint(4, 11, (3, 5))
    target[0, 3:] = PAD_ID
    target[2, 1:] = PAD_ID
    sums = label_smoothed_nll(logits, target, smoothing=smoothing)
    ref = F.cross_entropy(logits.view(-1, 11), target.view(-1), label_smoothing=smoothing,
                          ignore_index=PAD_ID, reduction="sum")
    nll = F.cross_entropy(logits.view(-1, 11), target.view(-1), ignore_index=PAD_ID,
                          reduction="sum")
    torch.testing.assert_close(sums.loss, ref)
    torch.testing.assert_close(sums.nll, nll)
    assert not sums.nll.requires_grad
    (g_ours,) = torch.autograd.grad(sums.loss * 0.25, logits)
    (g_ref,) = torch.autograd.grad(ref * 0.25, logits)
    torch.testing.assert_close(g_ours, g_ref)
    assert g_ours[2, 1:].abs().sum() == 0  # padding gets no gradient


def test_loss_refuses_a_second_order_gradient() -> None:
    """The loss's hand-written backward is first-order only: differentiating it again is an
    error, not a silently missing term."""
    logits = torch.randn(2, 3, 7, requires_grad=True)
    sums = label_smoothed_nll(logits, torch.randint(4, 7, (2, 3)), smoothing=0.1)
    (g,) = torch.autograd.grad(sums.loss, logits, create_graph=True)
    with pytest.raises(RuntimeError, match="does not require grad|once_differentiable"):
        g.sum().backward()


def test_loss_gradient_comes_back_in_the_logits_dtype() -> None:
    """Under autocast the logits are bf16; the softmax runs in float32 and the gradient is
    handed back as bf16, as autograd's log-softmax of logits.float() did."""
    logits = torch.randn(2, 3, 9, dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(4, 9, (2, 3))
    sums = label_smoothed_nll(logits, target, smoothing=0.1)
    ref = F.cross_entropy(logits.float().view(-1, 9), target.view(-1), label_smoothing=0.1,
                          reduction="sum")
    (g_ours,) = torch.autograd.grad(sums.loss, logits)
    (g_ref,) = torch.autograd.grad(ref, logits)
    assert sums.loss.dtype == torch.float32 and g_ours.dtype == torch.bfloat16
    torch.testing.assert_close(g_ours, g_ref)


def test_loss_without_smoothing_is_the_nll_and_ppl_is_its_exp() -> None:
    logits = torch.randn(2, 4, 7)
    target = torch.randint(4, 7, (2, 4))
    sums = label_smoothed_nll(logits, target, smoothing=0.0)
    torch.testing.assert_close(sums.loss, sums.nll)
    assert perplexity(math.log(20.0)) == pytest.approx(20.0)
    assert perplexity(1e6) == math.inf


# --------------------------------------------------------------------------- schedules


def test_inverse_sqrt_peaks_at_lr_and_noam_scales_by_model_size() -> None:
    s = Schedule(TrainConfig(lr=1e-3, warmup=100, schedule="inverse_sqrt"), model_size=256)
    assert s.lr_at(1) == pytest.approx(1e-5)
    assert s.lr_at(50) == pytest.approx(5e-4)
    assert s.lr_at(100) == pytest.approx(1e-3)
    assert s.lr_at(400) == pytest.approx(5e-4)
    noam = Schedule(TrainConfig(lr=2.0, warmup=100, schedule="noam"), model_size=256)
    for u in (1, 7, 100, 101, 2500):  # Vaswani et al. 2017, eq. 3, times the factor 2
        assert noam.lr_at(u) == pytest.approx(2.0 * 256 ** -0.5 * min(u ** -0.5, u * 100 ** -1.5))
    assert noam.lr_at(100) == pytest.approx(0.0125)  # 2 / 16 / 10


def test_constant_and_plateau_schedules() -> None:
    constant = Schedule(TrainConfig(lr=2e-3, warmup=0, schedule="constant"), model_size=8)
    assert constant.lr_at(999) == 2e-3
    s = Schedule(TrainConfig(lr=1e-3, warmup=0, schedule="plateau", plateau_factor=0.5,
                             plateau_patience=1, min_lr=3e-4), model_size=8)
    assert not s.observe(10.0, higher_is_better=True)  # best
    assert not s.observe(9.0, higher_is_better=True)  # 1 bad: within patience
    assert s.observe(9.5, higher_is_better=True)  # 2 bad: lowered
    assert s.lr_at(5) == pytest.approx(5e-4)
    assert not s.observe(9.0, higher_is_better=True)
    assert s.observe(9.0, higher_is_better=True)
    assert s.lr_at(5) == pytest.approx(3e-4)  # floored at min_lr
    again = Schedule(TrainConfig(lr=1e-3, warmup=0, schedule="plateau"), model_size=8)
    again.load_state_dict(s.state_dict())
    assert again.lr_at(5) == s.lr_at(5) and again.best == 10.0


def test_linear_schedule_warms_up_then_falls_to_min_lr_at_its_horizon() -> None:
    cfg = TrainConfig(lr=1e-3, warmup=100, schedule="linear", min_lr=1e-5, max_updates=1100)
    s = Schedule(cfg, model_size=8)
    assert s.lr_at(50) == pytest.approx(5e-4)
    assert s.wants_horizon(99) is False and s.wants_horizon(100) is True
    assert s.lr_at(101) == pytest.approx(1e-3)  # no horizon yet: the peak
    s.set_horizon(1100, now=100)
    assert not s.wants_horizon(200)
    assert s.lr_at(100) == pytest.approx(1e-3)
    assert s.lr_at(600) == pytest.approx(1e-5 + (1e-3 - 1e-5) / 2)
    assert s.lr_at(1100) == pytest.approx(1e-5) and s.lr_at(5000) == pytest.approx(1e-5)
    again = Schedule(cfg, model_size=8)
    again.load_state_dict(s.state_dict())
    assert again.horizon == 1100 and again.lr_at(600) == s.lr_at(600)
    other = Schedule(TrainConfig(lr=1e-3, warmup=100), model_size=8)  # inverse_sqrt's state
    fresh = Schedule(cfg, model_size=8)
    fresh.load_state_dict(other.state_dict())
    assert fresh.horizon is None
    # sized after the warm-up (a time budget's pace took longer): the line starts there
    late = Schedule(cfg, model_size=8)
    late.set_horizon(620, now=120)
    assert late.lr_at(120) == pytest.approx(1e-3) and late.lr_at(121) < 1e-3
    assert late.lr_at(370) == pytest.approx(1e-5 + (1e-3 - 1e-5) / 2)


@pytest.mark.parametrize(("sets", "message"), [
    (["train.schedule=linear", "train.max_time=null", "train.max_updates=0"],
     "train.schedule: linear decays over the run's length: set train.max_updates"),
    (["train.schedule=linear", "train.warmup=50", "train.max_updates=50"],
     "train.warmup: 50 updates of warm-up leave linear none of train.max_updates (50)"),
    (["train.schedule=linear", "train.min_lr=0.01", "train.lr=0.001"],
     "train.min_lr: linear decays from train.lr (0.001) to min_lr: expected less than lr"),
])
def test_linear_schedule_settings_are_checked(sets: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_recipe(TOY, sets)


# --------------------------------------------------------------------------- the update step


@pytest.mark.parametrize("fused", [True, False])
def test_optimizer_step_skips_when_gradients_are_not_finite(fused: bool) -> None:
    p = torch.nn.Parameter(torch.ones(4))
    opt = torch.optim.Adam([p], lr=0.1, fused=fused)
    p.grad = torch.ones(4)
    optimizer_step(opt, torch.tensor(False))
    after_one = p.detach().clone()
    state = {k: v.clone() for k, v in opt.state[p].items()}
    p.grad = torch.full((4,), math.nan)
    optimizer_step(opt, torch.tensor(True))
    assert torch.equal(p.detach(), after_one)
    for k, v in opt.state[p].items():
        assert torch.equal(v, state[k]), k
    assert not torch.equal(after_one, torch.ones(4))  # the first step did move


def _tiny_model() -> torch.nn.Module:
    recipe = load_recipe(TOY, ["model.transformer.dropout=0.0"])
    torch.manual_seed(0)
    return build_model(recipe.model, 20, 20)


def test_gradient_accumulation_equals_one_larger_batch() -> None:
    """Two batches of different sizes accumulated = their union in one batch."""
    src = [[5, 6, 7], [8, 9], [10, 11, 12, 13, 14], [6], [7, 8, 9, 10]]
    tgt = [[7, 6, 5], [9, 8, 8, 9], [14, 13], [6, 6, 6], [10, 9]]
    b1 = collate(src[:2], tgt[:2], [0, 1])
    b2 = collate(src[2:], tgt[2:], [2, 3, 4])
    both = collate(src, tgt, range(5))
    grads = []
    for batches in ([b1, b2], [both]):
        model = _tiny_model()
        cpu = torch.device("cpu")
        norm = step.token_normalizer(sum(b.num_tgt_tokens for b in batches), dist=Dist(),
                                    device=cpu)
        step.forward_backward(model, batches, device=cpu, amp=Amp("cpu", None, None),
                              smoothing=0.1, normalizer=norm)
        grads.append([p.grad.clone() for p in model.parameters()])
    assert norm == 1.0 / sum(len(t) + 1 for t in tgt)
    for g1, g2 in zip(*grads, strict=True):
        torch.testing.assert_close(g1, g2, atol=1e-6, rtol=1e-5)


def _one_update(amp: Amp, *, poison: bool = False) -> tuple[torch.nn.Module, object]:
    model = _tiny_model()
    params = list(model.parameters())
    opt = build_optimizer(model, TrainConfig(lr=1e-2), torch.device("cpu"))
    batch = collate([[5, 6, 7], [8, 9]], [[7, 6, 5], [9, 8]], [0, 1])
    cpu = torch.device("cpu")
    loss, nll, _ = step.forward_backward(model, [batch], device=cpu, amp=amp, smoothing=0.1,
                                         normalizer=0.2)
    if poison:
        params[0].grad[0, 0] = math.inf
    sums = step.finish_update(params, opt, amp, clip_norm=1.0, loss_sum=loss, nll_sum=nll,
                              dist=Dist())
    return model, sums


def test_float16_grad_scaler_path_unscales_clips_skips_and_backs_off() -> None:
    """The GradScaler protocol the CUDA fp16 path uses, run on the CPU: the same update as
    without scaling; an inf gradient skips the step and halves the scale."""
    plain, sums = _one_update(Amp("cpu", None, None))
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 12)
    scaled, scaled_sums = _one_update(Amp("cpu", None, scaler))
    torch.testing.assert_close(scaled_sums.gnorm, sums.gnorm)
    for a, b in zip(plain.parameters(), scaled.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    assert scaler.get_scale() == 2.0 ** 12 and not scaled_sums.skipped
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 12)
    skipped, skipped_sums = _one_update(Amp("cpu", None, scaler), poison=True)
    assert skipped_sums.skipped and scaler.get_scale() == 2.0 ** 11
    for a, b in zip(_tiny_model().parameters(), skipped.parameters(), strict=True):
        assert torch.equal(a, b)


def test_adamw_does_not_decay_biases_and_norm_gains() -> None:
    model = _tiny_model()
    opt = build_optimizer(model, TrainConfig(optimizer="adamw", weight_decay=0.1),
                          torch.device("cpu"))
    decayed, plain = opt.param_groups
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decayed["params"])
    assert all(p.dim() < 2 for p in plain["params"]) and plain["params"]


# --------------------------------------------------------------------------- runs


@pytest.mark.slow
def test_toy_run_learns_and_leaves_a_self_describing_run_dir(tmp_path: Path) -> None:
    run = tmp_path / "run"
    res = _train(run, "train.max_updates=200", "train.valid_every=100", "train.log_every=20",
                 "train.keep_last=2")
    assert res.reason == "max_updates" and res.update == 200
    for name in ("recipe.yaml", "data/spm.model", "metrics.jsonl", "train.log", "best.pt",
                 "last.pt", "checkpoint_100.pt", "checkpoint_200.pt"):
        assert (run / name).is_file(), name
    recs = _metrics(run)
    train = [r for r in recs if r["kind"] == "train"]
    valid = [r for r in recs if r["kind"] == "valid"]
    assert [r["update"] for r in train] == list(range(20, 201, 20))
    assert [r["update"] for r in valid] == [100, 200]
    for r in train:
        assert {"loss", "nll", "ppl", "lr", "gnorm", "tgt_tokens_per_s", "epoch"} <= set(r)
        assert r["ppl"] == pytest.approx(math.exp(r["nll"]))
    assert train[-1]["loss"] < 0.5 * train[0]["loss"]  # loss falls
    assert valid[-1]["bleu"] > valid[0]["bleu"] and valid[-1]["bleu"] > 50  # BLEU rises
    assert recs[-1]["kind"] == "end" and recs[-1]["reason"] == "max_updates"
    log = (run / "train.log").read_text()
    assert "update 200 |" in log and "stopped (max_updates)" in log
    # validations too (the console's table only, before): someone following the log sees them
    assert f"validation at update 200: loss {valid[-1]['loss']:.3f}, ppl " in log
    assert f"BLEU {valid[-1]['bleu']:.2f}, chrF {valid[-1]['chrf']:.2f} (best)" in log


def test_kill_and_resume_ends_with_bitwise_identical_weights(tmp_path: Path) -> None:
    """SIGKILL a `mtkit train` process right after a checkpoint, resume it, and compare
    with an uninterrupted run (dropout on, gradient accumulation on)."""
    sets = ["train.max_updates=40", "train.checkpoint_every=5", "train.valid_every=1000",
            "train.update_freq=2", "model.transformer.dropout=0.2", "train.keep_last=20"]
    whole = _train(tmp_path / "whole", *sets)
    killed = tmp_path / "killed"
    args = [a for s in sets + ["train.max_time=null"] for a in ("--set", s)]
    proc = subprocess.Popen(_mtkit("train", str(TOY), "--run-dir", str(killed), *args),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (killed / "checkpoint_10.pt").exists() and proc.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint appeared"
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    stopped_at = load_checkpoint(killed / "last.pt")["progress"]["update"]
    # last.pt is pointed at checkpoint_10.pt just after that file appears: a kill in between
    # leaves it at update 5 (seen once under load), an equally good place to resume from
    assert proc.returncode == -signal.SIGKILL and 5 <= stopped_at < 40
    resumed = _train(killed, *sets, resume=True)
    assert resumed.update == whole.update == 40
    assert _digest(killed / "last.pt") == _digest(tmp_path / "whole" / "last.pt")
    a, b = load_checkpoint(killed / "last.pt"), load_checkpoint(tmp_path / "whole" / "last.pt")
    for k in a["optimizer"]["state"]:
        assert torch.equal(a["optimizer"]["state"][k]["exp_avg_sq"],
                           b["optimizer"]["state"][k]["exp_avg_sq"])
    updates = [r["update"] for r in _metrics(killed) if r["kind"] == "train"]
    assert updates == sorted(set(updates))  # records after the checkpoint were dropped


def test_sigint_saves_a_checkpoint_and_says_how_to_resume(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = subprocess.Popen(
        _mtkit("train", str(TOY), "--run-dir", str(run), "--set", "train.max_updates=100000",
               "--set", "train.max_time=null", "--set", "train.valid_every=20",
               "--set", "train.log_every=5"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
    deadline = time.monotonic() + 120

    def past_the_validation_checkpoint() -> bool:
        # Training went on after update 20's checkpoint: a signal sent while that checkpoint
        # was being written stopped the run at update 20, where no new one is due (flaky).
        if not (run / "last.pt").exists():
            return False
        for line in (run / "metrics.jsonl").read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:  # a line being written
                continue
            if rec["kind"] == "train" and rec["update"] > 20:
                return True
        return False

    try:
        while not past_the_validation_checkpoint() and proc.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:  # never an orphan training on the shared cores
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    state = load_checkpoint(run / "last.pt")
    update = state["progress"]["update"]
    assert update > 20  # a fresh checkpoint, not the validation one
    assert f"interrupted at update {update}" in err and "--resume" in err
    assert f"checkpoint_{update}.pt" in err
    end = _metrics(run)[-1]
    assert end["kind"] == "end" and end["reason"] == "interrupted"


def test_sighup_stops_with_a_checkpoint(tmp_path: Path) -> None:
    """SIGHUP (a closed terminal) killed training without a checkpoint."""
    run = tmp_path / "run"
    proc = subprocess.Popen(
        _mtkit("train", str(TOY), "--run-dir", str(run), "--set", "train.max_updates=100000",
               "--set", "train.max_time=null", "--set", "train.valid_every=100000"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=default_signals)
    try:
        deadline = time.monotonic() + 120
        while not (run / "metrics.jsonl").exists() or '"train"' not in (
                run / "metrics.jsonl").read_text():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)
        proc.send_signal(signal.SIGHUP)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()  # never an orphan training on the shared cores
    assert proc.returncode == 129, err  # 128 + SIGHUP, as a shell reports it
    assert "SIGHUP received" in err and "checkpoint saved" in err
    assert (run / "last.pt").is_file()


def test_a_second_signal_stops_at_once_as_its_own_kind(monkeypatch, terminal_signals) -> None:
    """A second SIGTERM raised KeyboardInterrupt: the command exited 130, as on Ctrl-C."""
    from mtkit.errors import Terminated
    from mtkit.process import signals
    from mtkit.process.signals import GracefulStop

    monkeypatch.setattr(signals, "REPEAT_WINDOW", 0.0)  # however soon: not an echo here
    for sig, kind in ((signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)):
        with GracefulStop() as stop:
            os.kill(os.getpid(), sig)
            assert stop.requested == sig.name
            with pytest.raises(kind) as e:
                os.kill(os.getpid(), sig)
                time.sleep(1)  # the handler runs in between
        assert (e.type is Terminated) == (sig == signal.SIGTERM)


def test_timeouts_echo_of_its_signal_does_not_stop_training_at_once(terminal_signals) -> None:
    """GNU timeout signals mtkit and then its process group: the second SIGTERM, microseconds
    after the first, interrupted training at once, without the checkpoint of a graceful stop.
    A second Ctrl-C is always meant."""
    from mtkit.process.signals import GracefulStop

    with GracefulStop() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)  # the handlers run in between
        assert stop.requested == "SIGTERM"
    with GracefulStop() as stop, pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)


def test_nonfinite_loss_skips_the_update_with_a_warning(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    calls = {"n": 0}
    real = step.label_smoothed_nll

    def nan_at_third(logits: torch.Tensor, target: torch.Tensor, **kw: float) -> LossSums:
        calls["n"] += 1
        sums = real(logits, target, **kw)
        return LossSums(sums.loss * math.nan, sums.nll) if calls["n"] == 3 else sums

    monkeypatch.setattr(step, "label_smoothed_nll", nan_at_third)
    caplog.set_level(logging.WARNING, logger="mtkit")
    res = _train(tmp_path / "run", "train.max_updates=6", "train.log_every=6",
                 "train.valid_every=1000")
    assert res.update == 6 and res.reason == "max_updates"
    assert "update 3: non-finite loss or gradient norm; update skipped (1 in a row)" \
        in caplog.text
    (rec,) = [r for r in _metrics(tmp_path / "run") if r["kind"] == "train"]
    assert rec["skipped"] == 1 and math.isfinite(rec["loss"])


def test_nonfinite_losses_in_a_row_abort_naming_update_and_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    real = step.label_smoothed_nll

    def nan_from_fifth(logits: torch.Tensor, target: torch.Tensor, **kw: float) -> LossSums:
        calls["n"] += 1
        sums = real(logits, target, **kw)
        return LossSums(sums.loss * math.inf, sums.nll) if calls["n"] >= 5 else sums

    monkeypatch.setattr(step, "label_smoothed_nll", nan_from_fifth)
    run = tmp_path / "run"
    with pytest.raises(MtkitError, match=r"update 7: 3 non-finite losses in a row.*"
                       r"last good checkpoint: .*checkpoint_4\.pt"):
        _train(run, "train.max_updates=50", "train.checkpoint_every=2",
               "train.valid_every=1000", "train.max_nonfinite=3", "train.keep_last=5")
    # the skipped updates left the weights alone: checkpoint_6 (after 2 skipped) = checkpoint_4
    assert _digest(run / "checkpoint_6.pt") == _digest(run / "checkpoint_4.pt")


def test_out_of_memory_on_a_batch_skips_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           caplog: pytest.LogCaptureFixture) -> None:
    calls = {"n": 0}
    real = loop.forward_backward

    def oom_once(*args: object, **kw: object) -> object:
        calls["n"] += 1
        if calls["n"] == 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(*args, **kw)

    monkeypatch.setattr(loop, "forward_backward", oom_once)
    caplog.set_level(logging.WARNING, logger="mtkit")
    res = _train(tmp_path / "run", "train.max_updates=4", "train.valid_every=1000")
    assert res.update == 4 and calls["n"] == 5
    assert "out of memory after update 1" in caplog.text and "batch skipped" in caplog.text
    progress = load_checkpoint(tmp_path / "run" / "last.pt")["progress"]
    assert progress["position"] == 5  # five batches consumed for four updates


def test_max_time_ends_with_a_checkpoint_and_a_final_validation(tmp_path: Path) -> None:
    recipe = load_recipe(TOY, ["train.max_time=2s", "train.max_updates=0",
                               "train.valid_every=100000"])
    run = tmp_path / "run"
    res = session.train(recipe, run, console=Console(file=io.StringIO()))
    assert res.reason == "max_time" and res.update > 0
    recs = _metrics(run)
    assert [r["update"] for r in recs if r["kind"] == "valid"] == [res.update]
    assert load_checkpoint(run / "last.pt")["progress"]["update"] == res.update
    assert (run / "best.pt").is_file()


def test_max_time_holds_the_closing_validation_and_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With updates of 1/32 s and validations of 1 s on the loop's clock, a 4 s budget ends
    (closing validation and checkpoint included) at 4 s, not 4 s plus a validation: updates
    1-40 and the validation at 40 take 2.25 s, and at update 64 (3 s) the 1 s the closing
    validation was seen to take is all that is left."""
    clock = TrainClock(per_update=1 / 32)
    clock.install(monkeypatch)
    real_validate = loop.validate

    def slow_validate(*args, **kwargs):
        clock.now += 1.0
        return real_validate(*args, **kwargs)

    monkeypatch.setattr(loop, "validate", slow_validate)
    recipe = load_recipe(TOY, ["train.max_time=4s", "train.max_updates=0",
                               "train.valid_every=40"])
    res = session.train(recipe, tmp_path / "run", console=Console(file=io.StringIO()))
    recs = _metrics(tmp_path / "run")
    assert (res.reason, res.update) == ("max_time", 64)
    assert [r["update"] for r in recs if r["kind"] == "valid"] == [40, 64]
    assert recs[-1]["kind"] == "end" and recs[-1]["elapsed"] == pytest.approx(4.0), recs[-1]


def test_a_model_too_big_for_memory_is_one_line(tmp_path: Path, monkeypatch) -> None:
    """d_model=1000000 was the CPU allocator's RuntimeError, a traceback."""
    from mtkit.train import setup

    def too_big(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't "
                           "allocate memory: you tried to allocate 4000000000000 bytes")

    monkeypatch.setattr(setup, "build_model", too_big)
    with pytest.raises(MtkitError, match=r"^model\.transformer: its weights do not fit in "
                       r"cpu's memory \(.*4000000000000 bytes\); lower its sizes"):
        _train(tmp_path / "run", "train.max_updates=1")


def test_a_resume_lists_the_settings_it_changes(tmp_path: Path) -> None:
    """A changed train.lr or max_updates on resume went unsaid."""
    run = tmp_path / "run"
    _train(run, "train.max_updates=2", "train.valid_every=100000")
    recipe = load_recipe(TOY, ["train.max_time=null", "train.max_updates=3",
                               "train.valid_every=100000", "train.lr=0.001", "decode.beam_size=2"])
    out = io.StringIO()
    session.train(recipe, run, resume=True, console=Console(file=out, width=400))
    assert ("resuming with settings changed since the last checkpoint: train.max_updates 2 -> "
            "3, train.lr 0.003 -> 0.001, decode.beam_size 4 -> 2") in out.getvalue()
    # and they apply: the optimizer's saved betas and eps gave way to the recipe's only now
    recipe = load_recipe(TOY, ["train.max_time=null", "train.max_updates=4",
                               "train.valid_every=100000", "train.betas=[0.5, 0.6]",
                               "train.eps=0.001"])
    session.train(recipe, run, resume=True, console=Console(file=io.StringIO()))
    groups = load_checkpoint(run / "last.pt")["optimizer"]["param_groups"]
    assert [(tuple(g["betas"]), g["eps"]) for g in groups] == [((0.5, 0.6), 0.001)] * len(groups)
    # weight decay on or off changes the optimizer's groups: refused (it was a traceback)
    recipe = load_recipe(TOY, ["train.max_time=null", "train.max_updates=5",
                               "train.weight_decay=0.5", "train.betas=[0.5, 0.6]",
                               "train.eps=0.001"])
    with pytest.raises(CheckpointError, match="weight decay cannot be turned on or off"):
        session.train(recipe, run, resume=True, console=Console(file=io.StringIO()))


def test_a_resume_drops_a_metrics_line_torn_by_a_kill(tmp_path: Path, caplog) -> None:
    """A line cut short by kill -9 or a full disk made the resume a JSONDecodeError."""
    run = tmp_path / "run"
    _train(run, "train.max_updates=2", "train.valid_every=100000", "train.log_every=1")
    lines = (run / "metrics.jsonl").read_text().count("\n")
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"kind": "train", "upd')
    with caplog.at_level(logging.INFO, logger="mtkit"):
        _train(run, "train.max_updates=3", "train.valid_every=100000", "train.log_every=1",
               resume=True)
    assert f"metrics.jsonl: dropped 1 unreadable line (line {lines + 1})" in caplog.text
    assert [r["update"] for r in _metrics(run) if r["kind"] == "train"][-1] == 3


def test_max_epochs_ends_after_that_epoch_and_says_so(tmp_path: Path, caplog) -> None:
    """The last line named the next epoch, not started ('epoch 2' after max_epochs 1)."""
    with caplog.at_level(logging.INFO, logger="mtkit"):
        res = _train(tmp_path / "run", "train.max_epochs=1", "train.max_updates=0",
                     "train.valid_every=100000")
    assert res.reason == "max_epochs" and res.update == 11  # the toy's 11 batches
    assert f"stopped (max_epochs) at update {res.update}, epoch 1," in caplog.text


def test_a_resume_with_its_time_spent_trains_no_update(tmp_path: Path, caplog) -> None:
    """It ran one more update (and wrote one more checkpoint) before looking at the clock."""
    recipe = load_recipe(TOY, ["train.max_time=1s", "train.max_updates=0",
                               "train.valid_every=100000"])
    run = tmp_path / "run"
    first = session.train(recipe, run, console=Console(file=io.StringIO()))
    with caplog.at_level(logging.INFO, logger="mtkit"):
        again = session.train(recipe, run, resume=True, console=Console(file=io.StringIO()))
    assert again.reason == "max_time" and again.update == first.update
    assert load_checkpoint(run / "last.pt")["progress"]["update"] == first.update
    assert "train.max_time was reached before this resume" in caplog.text
    # the end was recorded by the session that reached it, not again with another elapsed
    assert [r["kind"] for r in _metrics(run)].count("end") == 1


def test_patience_stops_early_and_average_last_averages(tmp_path: Path) -> None:
    # lr so small that BLEU stays 0: no validation after the first improves on it
    run = tmp_path / "run"
    res = _train(run, "train.lr=1e-9", "train.max_updates=100", "train.valid_every=2",
                 "train.patience=2", "train.keep_last=3", "train.average_last=3")
    assert res.reason == "patience" and res.update == 6
    assert res.averaged == run / "averaged.pt"
    avg = load_checkpoint(res.averaged)
    assert avg["averaged_from"] == ["checkpoint_2.pt", "checkpoint_4.pt", "checkpoint_6.pt"]
    (rec,) = [r for r in _metrics(run) if r["kind"] == "average"]
    assert rec["checkpoints"] == avg["averaged_from"] and "bleu" in rec
    # a resume trained valid_every more updates (and pruned a checkpoint) to stop again
    again = _train(run, "train.lr=1e-9", "train.max_updates=100", "train.valid_every=2",
                   "train.patience=2", "train.keep_last=3", "train.average_last=3", resume=True)
    assert again.reason == "patience" and again.update == 6
    assert (run / "checkpoint_2.pt").is_file()


def test_resume_and_fresh_start_refuse_what_would_lose_work(tmp_path: Path, caplog) -> None:
    run = tmp_path / "run"
    with pytest.raises(CheckpointError, match="nothing to resume"):
        _train(run, "train.max_updates=2", resume=True)
    _train(run, "train.max_updates=2", "train.valid_every=1000")
    with pytest.raises(CheckpointError, match="already holds a training run"):
        _train(run, "train.max_updates=2")
    # without last.pt too: a new run pruned the old run's numbered checkpoints as its own
    # and replaced its best.pt
    (run / "last.pt").rename(tmp_path / "last.pt")
    with pytest.raises(CheckpointError, match=r"already holds a training run \(best\.pt, "
                       r"checkpoint_2\.pt\)"):
        _train(run, "train.max_updates=2")
    (tmp_path / "last.pt").rename(run / "last.pt")
    with pytest.raises(CheckpointError,
                       match=r"`model` section differs .*at model\.transformer\.ffn_dim\)"):
        _train(run, "train.max_updates=4", "model.transformer.ffn_dim=64", resume=True)
    with pytest.raises(CheckpointError, match=r"train\.batch_tokens is 256 but .* with 512"):
        _train(run, "train.max_updates=4", "train.batch_tokens=256", resume=True)
    # the loss was compared with the best BLEU (never better), patience counting on
    with pytest.raises(CheckpointError, match=r"train\.valid_metric is loss but .* with bleu; "
                       "its best checkpoint, patience and plateau schedule count bleu"):
        _train(run, "train.max_updates=4", "train.valid_metric=loss", resume=True)
    with pytest.raises(CheckpointError, match=r"`data` section differs .*at data\.valid"):
        _train(run, "train.max_updates=4", f"data.valid.src={TOY.parent / 'toy/test.src'}",
               resume=True)
    # a test set added after training (prep allows it) was refused as a changed data section
    extra = [f"data.test.extra.src={TOY.parent / 'toy/valid.src'}",
             f"data.test.extra.tgt={TOY.parent / 'toy/valid.tgt'}"]
    assert _train(run, "train.max_updates=3", "train.valid_every=1000", *extra,
                  resume=True).update == 3
    shutil.rmtree(run / "data")  # prepared again, then said
    with caplog.at_level("WARNING"):
        assert _train(run, "train.max_updates=4", "train.valid_every=1000", *extra,
                      resume=True).update == 4
    assert "data was missing or damaged: prepared again from the recipe's inputs" in caplog.text


def test_two_process_ddp_run_ends_with_identical_weights_on_both_ranks(tmp_path: Path) -> None:
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.is_file() or not torch.distributed.is_gloo_available():
        pytest.skip("torchrun with gloo is not available")
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [str(torchrun), "--standalone", "--nproc_per_node=2", "-m", "mtkit", "train", str(TOY),
         "--run-dir", str(run), "--set", "train.max_updates=6", "--set", "train.valid_every=3",
         "--set", "train.log_every=3", "--set", "model.transformer.dropout=0.1"],
        capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    recs = _metrics(run)
    (check,) = [r for r in recs if r["kind"] == "ddp_check"]
    assert len(check["digests"]) == 2 and check["digests"][0] == check["digests"][1]
    assert check["digests"][0] == _digest(run / "last.pt")
    assert [r["update"] for r in recs if r["kind"] == "train"] == [3, 6]  # rank 0 only
    log = (run / "train.log").read_text()
    assert log.count("toy: training") == 1 and "per rank x 2" in log


def test_a_signal_under_torchrun_is_told_once_with_a_torchrun_resume(tmp_path: Path) -> None:
    """Every rank said 'interrupted' (rank 1's checkpoint 'None'), and the resume command
    dropped torchrun: resumed in one process, the epoch started afresh."""
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.is_file() or not torch.distributed.is_gloo_available():
        pytest.skip("torchrun with gloo is not available")
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [str(torchrun), "--standalone", "--nproc_per_node=2", "-m", "mtkit", "train", str(TOY),
         "--run-dir", str(run), "--set", "train.max_updates=100000", "--set",
         "train.max_time=null", "--set", "train.valid_every=100000", "--set",
         "train.log_every=2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True)
    try:  # however the test ends, no training is left running
        wait_for_training(run, proc)
        proc.send_signal(signal.SIGTERM)  # torchrun passes it on to both ranks
        _, err = proc.communicate(timeout=180)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert err.count("training interrupted at update") == 1, err[-3000:]
    assert "saved to None" not in err
    assert f"Resume with:\n  torchrun --nproc_per_node=2 -m mtkit train {TOY}" in err


def test_a_data_error_under_torchrun_is_rank_0s_line_without_tracebacks(tmp_path: Path
                                                                          ) -> None:
    """Rank 0 prepares the data while the others wait: its one-line error was followed by
    rank 1's 50-line traceback (gloo: 'Connection closed by peer')."""
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.is_file() or not torch.distributed.is_gloo_available():
        pytest.skip("torchrun with gloo is not available")
    short = tmp_path / "short.tgt"
    short.write_text("".join((TOY.parent / "toy" / "train.tgt").read_text().splitlines(
        keepends=True)[:-1]))
    out = subprocess.run(
        [str(torchrun), "--standalone", "--nproc_per_node=2", "-m", "mtkit", "train", str(TOY),
         "--run-dir", str(tmp_path / "run"), "--set", f"data.train.tgt={short}"],
        capture_output=True, text=True, timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode != 0
    ranks = [line for line in out.stderr.splitlines() if line.startswith("mtkit: error:")]
    assert len(ranks) == 2 and "short.tgt has 999" in ranks[0] + ranks[1], out.stderr[-3000:]
    assert "mtkit: error: rank 0 stopped before training (its error says why)" in ranks
    assert "Connection closed" not in out.stderr and "[rank1]" not in out.stderr
    # a run directory rank 0 cannot take (another process holds it): the same
    run = tmp_path / "held"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom mtkit.process.lock import run_lock\n"
         "with run_lock(sys.argv[1], 'prep'):\n    print('held', flush=True)\n"
         "    time.sleep(120)\n", str(run)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert holder.stdout.readline().strip() == "held"
        out = subprocess.run(
            [str(torchrun), "--standalone", "--nproc_per_node=2", "-m", "mtkit", "train",
             str(TOY), "--run-dir", str(run)], capture_output=True, text=True, timeout=240,
            env={**os.environ, "OMP_NUM_THREADS": "1"})
    finally:
        holder.kill()
        holder.wait()
    ranks = [line for line in out.stderr.splitlines() if line.startswith("mtkit: error:")]
    assert len(ranks) == 2 and f"in use by mtkit prep (pid {holder.pid}" in "".join(ranks)
    assert "mtkit: error: rank 0 cannot use the run directory (its error says why)" in ranks


@pytest.mark.parametrize("error", ["MemoryError", "KeyboardInterrupt"])
def test_a_validation_failing_on_rank_0_ends_every_rank(tmp_path: Path, error: str) -> None:
    """Rank 0 validates while the others wait for its result: a failure there (out of
    memory, say) left them waiting for the process group's one-hour timeout. Rank 0 decides
    whether the others save with it (an interrupt saves nothing: rank 1 saved alone and
    failed, 'Connection closed by peer')."""
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.is_file() or not torch.distributed.is_gloo_available():
        pytest.skip("torchrun with gloo is not available")
    script = tmp_path / "failing_validation.py"
    script.write_text(
        "import os, sys\n"
        "from mtkit.cli import main\n"
        "from mtkit.train import loop\n"
        "def failing(*args, **kwargs):\n"
        f"    raise {error}('validation failed')\n"
        "if os.environ['RANK'] == '0':\n"
        "    loop.validate = failing\n"
        "sys.argv[0] = 'mtkit'\n"
        "main()\n")
    run = tmp_path / "run"
    out = subprocess.run(
        [str(torchrun), "--standalone", "--nproc_per_node=2", str(script), "train", str(TOY),
         "--run-dir", str(run), "--set", "train.max_updates=6", "--set", "train.valid_every=3"],
        capture_output=True, text=True, timeout=240, cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)})
    assert out.returncode != 0
    assert "validation at update 3 failed on rank 0" in out.stderr, out.stderr[-3000:]
    assert "Connection closed" not in out.stderr
    saved = load_checkpoint(run / "last.pt")["progress"]["update"] if (
        run / "last.pt").exists() else None
    assert saved == (3 if error == "MemoryError" else None)


def test_rnn_recipe_is_a_bigru_with_bahdanau_attention_and_fully_commented() -> None:
    path = REPO / "recipes" / "en-de-rnn.yaml"
    r = load_recipe(path)
    rnn = r.model.rnn
    assert r.model.arch == "rnn" and rnn.cell == "gru" and rnn.bidirectional
    assert rnn.attention == "additive" and rnn.placement == "bahdanau"
    assert (rnn.emb_dim, rnn.hidden_dim) == (256, 256) and r.train.schedule == "plateau"
    assert r.data == load_recipe(REPO / "recipes" / "en-de.yaml").data
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip() and not line.lstrip().startswith("#"):
            assert " # " in line or "  #" in line, f"en-de-rnn.yaml:{i}: no comment: {line}"


def test_tensorboard_gets_every_number_when_the_package_is_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mtkit.train import report

    scalars: list[tuple[str, float, int]] = []

    class Writer:  # stands in for torch.utils.tensorboard.SummaryWriter
        def add_scalar(self, tag: str, value: float, step: int) -> None:
            scalars.append((tag, value, step))

        def close(self) -> None:
            scalars.append(("closed", 0, 0))

    monkeypatch.setattr(report, "_tensorboard", lambda run_dir, mode: Writer())
    _train(tmp_path / "run", "train.max_updates=4", "train.log_every=2", "train.valid_every=4")
    tags = {(tag, step) for tag, _, step in scalars}
    assert {("train/loss", 2), ("train/lr", 4), ("valid/bleu", 4), ("valid/ppl", 4)} <= tags
    assert scalars[-1][0] == "closed"


def test_train_speed_benchmark_runs_on_random_multi30k_like_batches(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(REPO / "bench" / "train_speed.py"), str(TOY),
                          "--steps", "2", "--warmup", "1", "--run-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "random Multi30k-like lengths" in out.stdout
    rate = float(out.stdout.split("throughput")[1].split("target")[0].replace(",", ""))
    assert rate > 0


def test_validation_scores_tokenized_text_silently(caplog) -> None:
    """sacreBLEU warned in three bare lines, into the progress display, at every validation
    of a tokenized corpus (100 lines or more ending in ' .'); the score is its BLEU's."""
    import sacrebleu

    from mtkit.train.validate import corpus_scores

    hyps = [f"a man sits on bench {i} ." for i in range(120)]
    refs = [f"a man sits on a bench {i} ." for i in range(120)]
    with caplog.at_level("WARNING", logger="sacrebleu"):
        bleu, chrf = corpus_scores(hyps, refs)
    assert not caplog.records  # outside pytest, logging's last resort prints them bare
    assert bleu == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], force=True).score)
    assert chrf == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score) and 0 < bleu < 100


def test_validation_on_a_fixed_sample_scores_those_sentences_only(toy_model: Path) -> None:
    import dataclasses

    import numpy as np
    import sacrebleu

    from mtkit.data.spm import Tokenizer
    from mtkit.data.store import ParallelData, text_path
    from mtkit.fileio import read_lines
    from mtkit.run import load_model
    from mtkit.train.validate import valid_batches, valid_sample, validate

    ids = valid_sample(60, 10)
    assert len(set(ids.tolist())) == 10 and list(ids) == sorted(ids)
    assert np.array_equal(ids, valid_sample(60, 10)) and not np.array_equal(ids, np.arange(10))
    assert np.array_equal(valid_sample(60, 0), np.arange(60))
    assert np.array_equal(valid_sample(60, 99), np.arange(60))
    model, recipe, tok = load_model(toy_model)
    ddir = toy_model / "data"
    refs = read_lines(text_path(ddir, "valid", "tgt"))
    sample = dataclasses.replace(recipe, train=dataclasses.replace(recipe.train,
                                                                   valid_sentences=10))
    batches = valid_batches(ParallelData.load(ddir, "valid"), sample)
    assert sorted(i for b in batches for i in b.ids.tolist()) == ids.tolist()
    res = validate(model, batches, refs, Tokenizer.load(ddir), recipe=sample,
                   device=torch.device("cpu"), amp=Amp.for_device(torch.device("cpu"), "fp32"))
    assert res.sentences == 10
    whole = validate(model, valid_batches(ParallelData.load(ddir, "valid"), recipe), refs, tok,
                     recipe=recipe, device=torch.device("cpu"),
                     amp=Amp.for_device(torch.device("cpu"), "fp32"))
    assert whole.sentences == 60 and res.bleu != whole.bleu
    assert res.bleu == pytest.approx(sacrebleu.corpus_bleu(
        [h for h in _greedy_lines(model, tok, batches)], [[refs[i] for i in ids]]).score)


def _greedy_lines(model, tok, batches) -> list[str]:
    """Greedy translations of `batches`' sentences, in sentence-id order."""
    from mtkit.config import DecodeConfig
    from mtkit.decode import decode_batch

    out = {}
    with torch.no_grad():
        for b in batches:
            for i, nbest in zip(b.ids.tolist(), decode_batch(
                    model, b, DecodeConfig(method="greedy", max_len_a=1.2, max_len_b=5)),
                    strict=True):
                out[i] = tok.decode_tgt(nbest[0].tokens)
    return [out[i] for i in sorted(out)]
