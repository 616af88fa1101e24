"""Guided alignment in training: the loss by hand, its place in the update, every RNN
attention, and whole toy runs (logged, resumed bit for bit, averaged, read back by `align`)."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from rich.console import Console

from mtkit.align import files as ar
from mtkit.config import ModelConfig, RNNConfig, TransformerConfig, load_recipe
from mtkit.config.guided import Readout
from mtkit.data.batch import collate
from mtkit.device import Amp
from mtkit.models.build import build_model
from mtkit.run import load_checkpoint, load_model
from mtkit.train import session, step
from mtkit.train.checkpoint import save_average, weights_digest
from mtkit.train.loss import ALIGN_EPS, alignment_ce
from tests.helpers import REPO, run_cli

TOY = REPO / "recipes" / "toy.yaml"
GUIDED = ["data.train.align=toy/train.align", "train.guided_alignment.weight=0.05",
          "train.max_time=null"]


# --------------------------------------------------------------------------- the loss

# Attention of one pair, 3 decoder steps (rows) over 3 source pieces (EOS last):
ATTN = torch.tensor([[[0.2, 0.7, 0.1],
                      [0.5, 0.25, 0.25],
                      [0.1, 0.1, 0.8]]])
# Target piece 0 is linked to source piece 1; target piece 1 to source pieces 0 and 2 (a
# one-to-many link: each gets half); row 2 is the EOS step, never linked.
GOLD = torch.tensor([[[False, True, False],
                      [True, False, True],
                      [False, False, False]]])


@pytest.mark.parametrize(("readout", "expected"), [
    # current: row j for piece j: -ln .7 - (ln .5 + ln .25) / 2
    ("current", 0.356675 + 0.346574 + 0.693147),
    # shift: row j + 1 for piece j: -ln .25 - (ln .1 + ln .8) / 2
    ("shift", 1.386294 + 1.151293 + 0.111572),
])
def test_alignment_cross_entropy_by_hand(readout: Readout, expected: float) -> None:
    got = alignment_ce(ATTN, GOLD, readout=readout)
    assert got.dtype == torch.float32 and got.shape == ()
    assert got.item() == pytest.approx(expected, abs=1e-4)


def test_zero_attention_on_a_gold_link_costs_a_finite_amount_and_keeps_a_gradient() -> None:
    attn = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]], requires_grad=True)
    gold = torch.tensor([[[False, True], [False, False]]])
    ce = alignment_ce(attn, gold, readout="current")
    assert ce.item() == pytest.approx(-math.log(ALIGN_EPS), rel=1e-5)
    ce.backward()
    assert attn.grad[0, 0, 1] < 0 and attn.grad[0, 1].abs().sum() == 0  # unlinked row: none


# --------------------------------------------------------------------------- in the update


def _batch():
    links = [np.array([[0, 2], [1, 1], [2, 0]]), np.array([[0, 1], [1, 0]])]
    return collate([[5, 6, 7], [8, 9]], [[7, 6, 5], [9, 8]], [0, 1], links=links)


def _tf() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(ModelConfig(arch="transformer", transformer=TransformerConfig(
        d_model=16, heads=2, enc_layers=1, dec_layers=2, ffn_dim=32, dropout=0.0,
        align_layer=0, align_head=1)), 12, 12)


def test_the_update_adds_weight_times_the_mean_over_linked_pieces() -> None:
    """forward_backward's gradient is that of token-mean NLL + w * CE / linked pieces, the CE
    taken on the attention the model designates (here layer 0, head 1)."""
    b, cpu = _batch(), torch.device("cpu")
    rows = b.num_linked_rows
    assert rows == 5
    model = _tf().train()
    guide = step.Guide(0.3, "shift", 1.0 / rows)
    sums = step.forward_backward(model, [b], device=cpu, amp=Amp("cpu", None, None),
                                 smoothing=0.0, normalizer=1.0 / b.num_tgt_tokens, guide=guide)
    got = [p.grad.clone() for p in model.parameters()]
    manual = _tf().train()
    out = manual(b.src, b.src_lens, b.tgt_in, return_attn=True)
    enc = manual.encode(b.src, b.src_lens)
    _, _, cw = manual.decoder(manual.tgt_embed(b.tgt_in), enc, cross_layer=0)
    torch.testing.assert_close(out.attn, cw[:, 1])  # head 1 of layer 0
    nll = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), b.tgt_out.flatten(),
                                            ignore_index=0, reduction="sum")
    ce = alignment_ce(out.attn, b.align, readout="shift")
    (nll / b.num_tgt_tokens + 0.3 * ce / rows).backward()
    assert sums.align.item() == pytest.approx(ce.item(), rel=1e-6)
    for g, p in zip(got, manual.parameters(), strict=True):
        torch.testing.assert_close(g, p.grad)


RNN_ATTENTIONS = [("dot", "bahdanau"), ("general", "bahdanau"), ("additive", "bahdanau"),
                  ("concat", "luong"), ("scaled_dot", "luong"), ("cosine", "luong"),
                  ("location", "luong"), ("local-m", "luong"), ("local-p", "luong")]


@pytest.mark.parametrize(("attention", "placement"), RNN_ATTENTIONS)
def test_every_rnn_attention_takes_the_alignment_loss(attention: str, placement: str) -> None:
    """A few guided updates on one batch lower the alignment cross-entropy of every RNN
    attention (local windows included: a link outside the window costs -log(eps), finitely)."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(arch="rnn", rnn=RNNConfig(
        emb_dim=8, hidden_dim=8, attn_dim=8, dropout=0.0, attention=attention,
        placement=placement, local_window=1, max_positions=16)), 12, 12).train()
    b, cpu = _batch(), torch.device("cpu")
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    before = []
    for _ in range(15):
        sums = step.forward_backward(
            model, [b], device=cpu, amp=Amp("cpu", None, None), smoothing=0.0,
            normalizer=0.0, guide=step.Guide(1.0, "current", 1.0 / b.num_linked_rows))
        before.append(sums.align.item())
        opt.step()
        opt.zero_grad()
    assert all(math.isfinite(v) for v in before)
    assert before[-1] < before[0]


# --------------------------------------------------------------------------- toy runs


def _train(run_dir: Path, *sets: str, resume: bool = False):
    recipe = load_recipe(TOY, [*GUIDED, *sets])
    return session.train(recipe, run_dir, resume=resume, console=Console(file=io.StringIO()))


def _digest(path: Path) -> str:
    return weights_digest(load_checkpoint(path)["model"])


def test_guided_toy_run_logs_the_alignment_loss_and_resumes_bit_for_bit(tmp_path: Path) -> None:
    sets = ["train.max_updates=24", "train.checkpoint_every=6", "train.valid_every=1000",
            "train.log_every=6", "model.transformer.dropout=0.2", "train.keep_last=10",
            "model.transformer.align_layer=0", "model.transformer.align_head=2"]
    _train(tmp_path / "whole", *sets)
    recs = [json.loads(line) for line in (tmp_path / "whole" / "metrics.jsonl").open()]
    train = [r for r in recs if r["kind"] == "train"]
    assert [r["update"] for r in train] == [6, 12, 18, 24]
    assert all(r["align_loss"] > 0 for r in train)
    assert train[-1]["align_loss"] < train[0]["align_loss"]
    assert "| align " in (tmp_path / "whole" / "train.log").read_text()
    _train(tmp_path / "split", *sets[1:], "train.max_updates=12")
    _train(tmp_path / "split", *sets, resume=True)
    assert _digest(tmp_path / "split" / "last.pt") == _digest(tmp_path / "whole" / "last.pt")
    # An average of the run's checkpoints keeps its recipe, so `align` still reads layer 0,
    # head 2 by default (the attention that was trained), unless told otherwise.
    paths = [tmp_path / "whole" / f"checkpoint_{u}.pt" for u in (18, 24)]
    avg = save_average(paths, tmp_path / "whole" / "averaged.pt")
    model, recipe, _ = load_model(avg)
    assert recipe.train.guided_alignment.weight == 0.05
    assert model.choose_attention() == ar.AttentionChoice("cross", 0, 2)
    assert model.choose_attention("cross", 1, "mean") == ar.AttentionChoice("cross", 1, "mean")
    # without guided alignment too: the attention `translate --align` reads (it read -1)
    unguided = load_recipe(TOY, ["model.transformer.align_layer=0"])
    plain = build_model(unguided.model, 50, 50)
    assert plain.choose_attention() == ar.AttentionChoice("cross", 0, "mean")
    assert plain.choose_attention("encoder") == ar.AttentionChoice("encoder", -1, "mean")
    test_src = TOY.parent / "toy" / "test.src"
    shown = run_cli("align", avg, "-s", test_src, "-t", TOY.parent / "toy" / "test.tgt",
                    "--print")
    assert shown.exit_code == 0, shown.output
    assert "cross-attention, layer 0, head 2" in shown.stdout


def test_an_export_of_a_guided_run_aligns_with_the_trained_head(tmp_path: Path) -> None:
    """The exported model's attention (CTranslate2's alignment layer and head) is the head
    guided training supervised, and its recipe keeps the setting."""
    pytest.importorskip("ctranslate2")
    _train(tmp_path / "run", "train.max_updates=6", "train.valid_every=1000",
           "model.transformer.align_layer=0", "model.transformer.align_head=2")
    out = run_cli("export", tmp_path / "run", "-o", tmp_path / "ct2")
    assert out.exit_code == 0, out.output
    assert load_recipe(tmp_path / "ct2" / "recipe.yaml").train.guided_alignment.weight == 0.05
    test_src = TOY.parent / "toy" / "test.src"
    want = run_cli("translate", tmp_path / "run", "--greedy", "--align", "-i", test_src)
    got = run_cli("translate", tmp_path / "ct2", "--greedy", "--align", "-i", test_src)
    assert want.exit_code == 0 and got.exit_code == 0, (want.output, got.output)
    assert got.stdout == want.stdout


def test_an_unguided_run_logs_no_alignment_loss(tmp_path: Path) -> None:
    recipe = load_recipe(TOY, ["train.max_updates=2", "train.log_every=2",
                               "train.valid_every=1000", "train.max_time=null"])
    session.train(recipe, tmp_path / "run", console=Console(file=io.StringIO()))
    (rec,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()
              if '"train"' in line]
    assert "align_loss" not in rec
    assert not (tmp_path / "run" / "data" / "train.align.ids.npy").exists()
