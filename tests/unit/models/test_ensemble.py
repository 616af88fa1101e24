"""Ensemble: a Translator whose steps average its members' probabilities."""

from __future__ import annotations

import copy

import pytest
import torch

from mtkit.config import DecodeConfig, ModelConfig, RNNConfig, TransformerConfig
from mtkit.data.batch import collate
from mtkit.decode import decode_batch, forced
from mtkit.errors import MtkitError
from mtkit.models.base import reorder
from mtkit.models.ensemble import Ensemble
from tests.helpers import tiny_model

torch.set_num_threads(1)

V = 12
SOURCES = [[5, 6, 7], [4, 9, 10, 11, 5, 6, 7], [8], [11, 10, 9, 8, 7]]
TARGETS = [[4, 5], [6, 7, 8, 9], [], [10]]


def rnn(seed: int, **kw) -> torch.nn.Module:
    cfg = RNNConfig(**{"emb_dim": 16, "hidden_dim": 16, "attn_dim": 16, "dropout": 0.0, **kw})
    return tiny_model(ModelConfig(arch="rnn", rnn=cfg), V, seed=seed)


def transformer(seed: int, vocab: int = V) -> torch.nn.Module:
    cfg = TransformerConfig(d_model=16, heads=2, enc_layers=1, dec_layers=2, ffn_dim=32,
                            dropout=0.0)
    return tiny_model(ModelConfig(arch="transformer", transformer=cfg), vocab, seed=seed)


def batch(targets: bool = False):
    return collate(SOURCES, TARGETS if targets else None, range(len(SOURCES)))


@pytest.mark.parametrize("make", [lambda: rnn(0), lambda: transformer(0)])
def test_two_copies_of_a_model_translate_like_the_model(make):
    model = make()
    pair = Ensemble([model, copy.deepcopy(model)]).eval()
    for c in (DecodeConfig(beam_size=3, nbest=2, max_len_b=5), DecodeConfig(method="greedy")):
        alone, both = (decode_batch(m, batch(), c, need_attn=True) for m in (model, pair))
        assert [[h.tokens for h in hs] for hs in alone] == [[h.tokens for h in hs] for hs in both]
        for a, b in zip(sum(alone, []), sum(both, []), strict=True):
            assert b.score == pytest.approx(a.score, abs=1e-5)
            torch.testing.assert_close(b.attn, a.attn)
    for a, b in zip(forced(model, batch(True)), forced(pair, batch(True)), strict=True):
        assert b.token_logprobs == pytest.approx(a.token_logprobs, abs=1e-5)


@pytest.mark.parametrize("mode", ["prob", "logprob"])
def test_step_combines_members_and_averages_attention(mode):
    members = [rnn(1), transformer(2), rnn(3, attention="none", init="zeros")]
    ens = Ensemble(members, mode=mode)
    b = batch()
    enc, encs = ens.encode(b.src, b.src_lens), [m.encode(b.src, b.src_lens) for m in members]
    state = ens.init_state(enc)
    states = [m.init_state(e) for m, e in zip(members, encs, strict=True)]
    for tok in (2, 7, 9):
        prev = torch.full((4,), tok)
        out = ens.step(prev, state, enc)
        outs = [m.step(prev, s, e) for m, s, e in zip(members, states, encs, strict=True)]
        if mode == "prob":  # linear: log of the mean probability
            want = torch.stack([o.logits.softmax(-1) for o in outs]).mean(0).log()
        else:  # log-linear: the mean log-probability, renormalised
            mean_lp = torch.stack([o.logits.log_softmax(-1) for o in outs]).mean(0)
            want = mean_lp - mean_lp.logsumexp(-1, keepdim=True)
        torch.testing.assert_close(out.logits, want)
        torch.testing.assert_close(out.logits.exp().sum(-1), torch.ones(4))
        assert outs[2].attn is None  # the attention-free member is left out of the mean
        torch.testing.assert_close(out.attn, (outs[0].attn + outs[1].attn) / 2)
        assert ens.step(prev, state, enc, need_attn=False).attn is None
        state, states = out.state, [o.state for o in outs]
    assert ens.has_attention and not members[2].has_attention


def test_state_is_packed_batch_first_and_reorders():
    members = [rnn(1), transformer(2)]
    ens = Ensemble(members)
    b = batch()
    enc = ens.encode(b.src, b.src_lens)
    state = ens.init_state(enc)
    assert all(k.split(".", 1)[0] in ("0", "1") for k in state)
    assert all(v.size(0) == 4 for v in list(state.values()) + list(enc.extras.values()))
    idx = torch.tensor([3, 3, 0])
    prev = torch.tensor([2, 2, 2])
    moved = ens.step(prev, reorder(state, idx), enc.index_select(idx))
    fused = ens.step(prev, reorder(state, torch.arange(4)), enc.index_select(idx), order=idx)
    whole = ens.step(torch.full((4,), 2), state, enc)
    torch.testing.assert_close(moved.logits, whole.logits[idx])
    torch.testing.assert_close(fused.logits, moved.logits)


def test_forward_matches_steps_and_attention_maps_average():
    members = [rnn(1), transformer(2)]
    ens = Ensemble(members)
    b = batch(True)
    out = ens(b.src, b.src_lens, b.tgt_in, return_attn=True)
    enc = ens.encode(b.src, b.src_lens)
    state = ens.init_state(enc)
    for t in range(b.tgt_in.size(1)):
        step = ens.step(b.tgt_in[:, t], state, enc)
        state = step.state
        torch.testing.assert_close(step.logits, out.logits[:, t], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(step.attn, out.attn[:, t], atol=1e-5, rtol=1e-5)
    choice = ens.choose_attention()
    maps = ens.attention_maps(b.src, b.src_lens, b.tgt_in, choice)
    want = sum(m.attention_maps(b.src, b.src_lens, b.tgt_in, m.choose_attention())
               for m in members) / 2
    torch.testing.assert_close(maps, want)


def test_the_two_modes_differ_and_unknown_modes_are_refused():
    members = [rnn(1), transformer(2)]
    b = batch()
    outs = []
    for mode in ("prob", "logprob"):
        ens = Ensemble(members, mode=mode)
        enc = ens.encode(b.src, b.src_lens)
        outs.append(ens.step(torch.full((4,), 2), ens.init_state(enc), enc).logits)
    assert not torch.allclose(outs[0], outs[1])
    with pytest.raises(MtkitError,
                       match="^ensemble_mode: invalid choice .*; expected logprob or prob"):
        Ensemble(members, mode="geometric")


def test_members_must_share_the_target_vocabulary():
    ens = Ensemble([transformer(0), transformer(1, vocab=V + 1)])
    b = batch()
    with pytest.raises(MtkitError, match="different target vocabularies"):
        decode_batch(ens, b, DecodeConfig(method="greedy"))
    with pytest.raises(MtkitError, match="at least one"):
        Ensemble([])
