"""R-Drop's loss and update, and whole toy runs with the regularizers on: they change the
training, and a resumed run ends bitwise as the uninterrupted one."""

from __future__ import annotations

import io
import json
import math
import re
import shutil
from pathlib import Path

import pytest
import torch
from rich.console import Console

from mtkit.config import load_recipe
from mtkit.device import Amp
from mtkit.models.build import build_model
from mtkit.models.vocab import PAD_ID
from mtkit.run import load_checkpoint
from mtkit.train import session
from mtkit.train.checkpoint import weights_digest
from mtkit.train.loss import label_smoothed_nll, rdrop_loss
from mtkit.train.step import forward_backward
from tests.helpers import RECIPES, TrainClock, reversal_batch

TOY = RECIPES / "toy.yaml"


def test_rdrop_loss_equals_a_hand_computation() -> None:
    # one sentence of two target tokens (the second is padding) and a 3-piece vocabulary
    z1 = [[2.0, 0.0, -1.0], [0.3, 0.1, 0.2]]
    z2 = [[1.0, 0.5, 0.0], [9.0, 9.0, 9.0]]
    logits = torch.tensor([z1, z2])  # (2B, T, V), B = 1
    target = torch.tensor([[2, PAD_ID]])  # piece 2 (an id like any other here)
    eps, w = 0.1, 2.0

    def softmax(z: list[float]) -> list[float]:
        e = [math.exp(x) for x in z]
        return [x / sum(e) for x in e]

    p, q = softmax(z1[0]), softmax(z2[0])
    smoothed = [(1 - eps) * -math.log(d[2]) + eps * sum(-math.log(x) for x in d) / 3
                for d in (p, q)]
    kl = sum(a * math.log(a / b) for a, b in zip(p, q, strict=True)) + sum(
        b * math.log(b / a) for a, b in zip(p, q, strict=True))
    sums = rdrop_loss(logits, target, smoothing=eps, weight=w)
    assert sums.loss.item() == pytest.approx((smoothed[0] + smoothed[1]) / 2 + w / 4 * kl,
                                             rel=1e-5)
    assert sums.nll.item() == pytest.approx((-math.log(p[2]) - math.log(q[2])) / 2, rel=1e-5)


@pytest.mark.parametrize(("eps", "w"), [(0.0, 1.0), (0.1, 5.0)])
def test_rdrop_loss_gradient_is_the_hand_derived_one(eps: float, w: float) -> None:
    """The gradient autograd takes through `rdrop_loss` is the closed form: for pass 1's
    logits (p1 - (1 - eps) onehot - eps / V) / 2 + w / 4 (p1 (d - E_p1[d]) + p1 - p2), for
    pass 2's the same with the passes swapped (d = log p1 - log p2 changes sign), 0 on
    padding; finite where a softmax underflows."""
    g = torch.Generator().manual_seed(0)
    b, t, v = 5, 7, 50
    logits = torch.randn(2 * b, t, v, generator=g) * 4
    logits[0, 0, 3] = 200.0  # every other piece's probability underflows to 0 in float32
    target = torch.randint(4, v, (b, t), generator=g)
    target[1, 4:] = PAD_ID
    target[0, 0] = 3

    x = logits.clone().requires_grad_()
    (rdrop_loss(x, target, smoothing=eps, weight=w).loss * 1.7).backward()
    lp1, lp2 = torch.log_softmax(logits.double(), dim=-1).chunk(2)
    p1, p2, d = lp1.exp(), lp2.exp(), lp1 - lp2
    onehot = torch.nn.functional.one_hot(target, v).double()
    smoothed1, smoothed2 = (p - (1 - eps) * onehot - eps / v for p in (p1, p2))
    kl1 = p1 * (d - (p1 * d).sum(-1, keepdim=True)) + p1 - p2
    kl2 = p2 * (-d - (p2 * -d).sum(-1, keepdim=True)) + p2 - p1
    real = (target != PAD_ID).unsqueeze(-1)
    expected = torch.cat([(smoothed1 / 2 + w / 4 * kl1) * real,
                          (smoothed2 / 2 + w / 4 * kl2) * real]) * 1.7
    assert torch.isfinite(x.grad).all()
    torch.testing.assert_close(x.grad.double(), expected, rtol=1e-4, atol=1e-5)
    assert x.grad[1, 4:].abs().sum() == x.grad[b + 1, 4:].abs().sum() == 0  # padding


def test_rdrop_without_dropout_is_the_plain_loss_and_with_it_adds_the_kl() -> None:
    g = torch.Generator().manual_seed(0)
    batch = reversal_batch(6, 20, g)
    for dropout in (0.0, 0.3):
        recipe = load_recipe(TOY, [f"model.transformer.dropout={dropout}"])
        model = build_model(recipe.model, 20, 20).train()
        plain = forward_backward(model, [batch], device=torch.device("cpu"), amp=Amp.for_device(
            torch.device("cpu"), "fp32"), smoothing=0.1, normalizer=1.0)
        torch.manual_seed(0)
        rd = forward_backward(model, [batch], device=torch.device("cpu"), amp=Amp.for_device(
            torch.device("cpu"), "fp32"), smoothing=0.1, normalizer=1.0, rdrop=1.0)
        if dropout == 0.0:
            torch.testing.assert_close(rd.loss, plain.loss)
        else:  # two masks: the passes disagree, so the loss holds a positive KL
            torch.manual_seed(0)
            out = model(torch.cat([batch.src] * 2), torch.cat([batch.src_lens] * 2),
                        torch.cat([batch.tgt_in] * 2))
            ce = label_smoothed_nll(out.logits, batch.tgt_out.repeat(2, 1), smoothing=0.1)
            assert rd.loss > ce.loss.detach() / 2


def _train(run_dir: Path, *sets: str, resume: bool = False):
    recipe = load_recipe(TOY, ["train.max_time=null", *sets])
    return session.train(recipe, run_dir, resume=resume, console=Console(file=io.StringIO()))


def _digest(path: Path) -> str:
    return weights_digest(load_checkpoint(path)["model"])


SETS = ["train.max_updates=16", "train.checkpoint_every=4", "train.valid_every=1000",
        "train.log_every=4", "model.transformer.dropout=0.2", "train.keep_last=10",
        "data.spm.vocab_size=51"]


def test_subword_sampling_and_rdrop_resume_bitwise_and_change_training(tmp_path: Path) -> None:
    levers = ["train.subword_sampling.alpha=0.1", "train.subword_sampling.target=true",
              "train.rdrop.weight=1.0", "train.update_freq=2"]
    _train(tmp_path / "whole", *SETS, *levers)
    log = (tmp_path / "whole" / "train.log").read_text()  # the README says they are logged
    assert ("train.subword_sampling: unigram sampling (alpha 0.1, nbest_size -1) of the source "
            "and target of each training batch") in log
    assert "train.rdrop: weight 1; each batch passes twice through the model" in log
    _train(tmp_path / "split", *SETS, *levers, "train.max_updates=8")
    _train(tmp_path / "split", *SETS, *levers, resume=True)
    assert _digest(tmp_path / "split" / "last.pt") == _digest(tmp_path / "whole" / "last.pt")
    for name, lever in (("sampling", levers[0]), ("rdrop", levers[2])):  # each changes it
        _train(tmp_path / name, *SETS, "train.update_freq=2", lever)
    _train(tmp_path / "off", *SETS, "train.update_freq=2")
    digests = {_digest(tmp_path / n / "last.pt") for n in ("off", "sampling", "rdrop")}
    assert len(digests) == 3


def _records(run: Path, kind: str) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def test_linear_schedule_resumes_bitwise_with_its_horizon(tmp_path: Path) -> None:
    linear = ["train.schedule=linear", "train.warmup=6", "train.min_lr=0"]
    whole = tmp_path / "whole"
    _train(whole, *SETS, *linear)
    (horizon,) = _records(whole, "horizon")
    assert horizon["update"] == 6 and horizon["horizon"] == 16  # train.max_updates
    lrs = {r["update"]: r["lr"] for r in _records(whole, "train")}
    assert lrs[4] == pytest.approx(3e-3 * 4 / 6)  # toy.yaml: lr 3e-3
    assert lrs[8] == pytest.approx(3e-3 * 8 / 10) and lrs[16] == 0.0
    assert load_checkpoint(whole / "checkpoint_8.pt")["schedule"]["horizon"] == 16
    # runs stopped (as a kill would leave them) before the horizon was set and after it
    # resume to the same weights
    for stop in (4, 8):
        split = tmp_path / f"split{stop}"
        shutil.copytree(whole, split)
        for later in range(stop + 4, 17, 4):
            (split / f"checkpoint_{later}.pt").unlink()
        (split / "last.pt").unlink()
        shutil.copy(split / f"checkpoint_{stop}.pt", split / "last.pt")
        _train(split, *SETS, *linear, resume=True)
        assert _digest(split / "last.pt") == _digest(whole / "last.pt"), stop
    # a resume with another limit keeps the horizon, and says so
    _train(whole, *SETS, *linear, "train.max_updates=20", resume=True)
    assert "keeps the horizon it was sized with" in (whole / "train.log").read_text()
    assert [r["lr"] for r in _records(whole, "train")][-1] == 0.0  # update 20: min_lr


def test_linear_schedule_sizes_a_time_budget_by_the_pace(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """At 1/8 s an update on the loop's clock, the 6 s budget has 3.5 s left at update 20,
    when the pace is taken: 28 updates more."""
    TrainClock(per_update=1 / 8).install(monkeypatch)
    run = tmp_path / "run"
    _train(run, "train.schedule=linear", "train.warmup=0", "train.max_updates=0",
           "train.max_time=6s", "train.valid_every=100000", "train.log_every=1",
           "data.spm.vocab_size=51")
    (horizon,) = _records(run, "horizon")
    assert horizon["update"] == 20 and horizon["pace"] == 1 / 8  # HORIZON_PACE updates timed
    end = _records(run, "end")[-1]["update"]
    assert horizon["horizon"] == 48 and end == 48
    lrs = [r["lr"] for r in _records(run, "train")]
    assert lrs[19] == pytest.approx(3e-3)  # the peak until the horizon is set, then falling
    assert all(b <= a for a, b in zip(lrs[19:], lrs[20:], strict=False)) and lrs[-1] < 3e-3


def test_a_linear_horizon_the_pace_outran_is_said_at_the_end(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """On a shared machine the pace changes after the horizon is sized: the lr sat at its
    minimum for a third of a run, unsaid. Here updates take 1/8 s until update 20, then
    1/16 s: the horizon of 48 is reached with 1.75 s left, 28 updates early."""
    TrainClock(per_update=lambda u: 1 / 8 if u <= 20 else 1 / 16).install(monkeypatch)
    run = tmp_path / "run"
    _train(run, "train.schedule=linear", "train.warmup=0", "train.max_updates=0",
           "train.max_time=6s", "train.valid_every=100000", "train.log_every=1",
           "data.spm.vocab_size=51")
    assert _records(run, "horizon")[0]["horizon"] == 48
    assert _records(run, "end")[-1]["update"] == 76
    assert ("train.schedule linear: training went on 28 updates past the horizon of 48 it was "
            "sized for (the pace changed): the lr sat at train.min_lr for 37% of the run"
            ) in (run / "train.log").read_text()


@pytest.mark.parametrize(("sets", "message"), [
    (["train.subword_sampling.target=true"], "train.subword_sampling.target: set, but alpha is 0"),
    (["train.subword_sampling.alpha=0.1", "train.subword_sampling.nbest_size=1"],
     "expected -1 (the whole lattice) or more than 1, got 1"),
    (["train.subword_sampling.alpha=0.1", "data.spm.model_type=bpe",
      "train.subword_sampling.nbest_size=8"], "applies to unigram models"),
    (["train.subword_sampling.alpha=1.0", "data.spm.model_type=bpe"], "expected < 1"),
    (["train.rdrop.weight=-1"], "train.rdrop.weight: out of range"),
])
def test_bad_settings_are_named(sets: list[str], message: str) -> None:
    from mtkit.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape(message)):
        load_recipe(TOY, sets)
