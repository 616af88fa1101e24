"""Hard attention: REINFORCE's gradient against its expectation by enumeration, the exact
marginal and the posterior against enumerated sums, decoding from the argmax position, and
the recipe's rules."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from mtkit.config import DecodeConfig, ModelConfig, RNNConfig, recipe_from_dict
from mtkit.config.attention import HardAttentionConfig
from mtkit.decode import decode_batch
from mtkit.errors import ConfigError, OptionError
from mtkit.models.base import AttentionChoice
from mtkit.models.hard import Draw
from mtkit.models.rnn import PositionMarginal
from mtkit.models.vocab import PAD_ID
from tests.helpers import reversal_batch, tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = 12


def _cfg(estimator: str, *, placement: str = "luong", input_feeding: bool = False,
         normalizer: str = "softmax", **hard) -> ModelConfig:
    return ModelConfig(arch="rnn", attention_normalizer=normalizer, rnn=RNNConfig(
        emb_dim=6, hidden_dim=6, attn_dim=6, dropout=0.0, placement=placement,
        input_feeding=input_feeding, hard=HardAttentionConfig(estimator=estimator, **hard)))


def _batch(n: int = 3, seed: int = 0):
    return reversal_batch(n, VOCAB, torch.Generator().manual_seed(seed), lo=2, hi=5)


def _per_position(model, b) -> tuple[torch.Tensor, torch.Tensor]:
    """By enumeration through the model's own step-by-step decoding path, with the context
    forced to each position z in turn: the prior (B, T, S) and log p(y_t | z) (B, T, S)."""
    hard = model.decoder.hard
    real_context = hard.context
    s = b.src.size(1)
    log_lik = []
    for z in range(s):
        def forced(prior, memory, z=z):
            index = torch.full(prior.shape[:2], z, dtype=torch.long)
            ctx = memory[:, z : z + 1].expand(-1, prior.size(1), -1)
            return ctx, Draw(prior, index, torch.ones_like(index, dtype=torch.bool))
        hard.context = forced
        out = model(b.src, b.src_lens, b.tgt_in)
        lp = out.logits.log_softmax(-1).gather(-1, b.tgt_out.unsqueeze(-1)).squeeze(-1)
        log_lik.append(lp)
    hard.context = real_context
    choice = model.choose_view(model.choose_attention(), "prior")
    prior = model.attention_maps(b.src, b.src_lens, b.tgt_in, choice)
    return prior, torch.stack(log_lik, dim=-1)


def _expected_loglik(model, b) -> torch.Tensor:
    """sum over real steps of E_{z_t ~ prior} log p(y_t | z_t): what REINFORCE ascends."""
    prior, log_lik = _per_position(model, b)
    real = (b.tgt_out != PAD_ID).unsqueeze(-1)
    return (prior * log_lik.masked_fill(~real, 0.0)).sum()


def _grads(model) -> torch.Tensor:
    g = torch.cat([torch.zeros(p.numel()) if p.grad is None else p.grad.flatten()
                   for p in model.parameters()])
    model.zero_grad()
    return g


@pytest.mark.parametrize("with_term", [True, False])
def test_reinforce_gradient_equals_its_expectation_by_enumeration(with_term):
    """Luong placement without feeding: steps are independent given the target, so the
    expectation is a sum over steps and positions. K batches of N copies of one pair give K
    independent estimates of the gradient; their mean's squared distance to the enumerated
    gradient must be within twice its expected value, the summed squared standard errors
    (over a few hundred parameters that sum is near its mean). Without the REINFORCE term it
    is not: the draw alone gives the score function no gradient."""
    torch.manual_seed(0)
    model = tiny_model(_cfg("reinforce", baseline_decay=0.5), VOCAB)
    b = _batch(1, seed=3)
    (-_expected_loglik(model, b)).backward()
    exact = _grads(model)
    model.train()
    n, k = 500, 16
    src, src_lens, tgt_in, tgt_out = (t.repeat(n, *[1] * (t.dim() - 1))
                                      for t in (b.src, b.src_lens, b.tgt_in, b.tgt_out))
    estimates = []
    for i in range(k + 1):
        out = model(src, src_lens, tgt_in)
        loss = F.cross_entropy(out.logits.flatten(0, 1), tgt_out.flatten(),
                               ignore_index=PAD_ID, reduction="sum")
        if with_term:
            loss = loss + out.aux(tgt_out)
        (loss / n).backward()
        g = _grads(model)
        if i > 0:  # the first pass starts the baseline (from its own rewards)
            estimates.append(g)
    est = torch.stack(estimates)
    error = (est.mean(0) - exact).square().sum()
    noise = (est.var(0) / k).sum()
    assert bool(error <= 2 * noise) == with_term, (error, noise)
    assert exact.norm() > 100 * noise.sqrt()  # the test has something to find


def test_reinforce_term_is_zero_valued_and_advances_the_baseline():
    model = tiny_model(_cfg("reinforce", entropy=0.1), VOCAB, eval=False)
    b = _batch()
    out = model(b.src, b.src_lens, b.tgt_in)
    assert torch.isnan(model.decoder.hard.baseline)
    term = out.aux(b.tgt_out)
    assert term.item() == 0.0 and term.requires_grad
    lp = out.logits.log_softmax(-1).gather(-1, b.tgt_out.unsqueeze(-1)).squeeze(-1)
    mean = lp[b.tgt_out != PAD_ID].mean()
    torch.testing.assert_close(model.decoder.hard.baseline, mean.detach())
    assert model.eval()(b.src, b.src_lens, b.tgt_in).aux is None


def test_exact_marginal_loss_equals_the_enumerated_sum():
    model = tiny_model(_cfg("exact"), VOCAB)
    b = _batch()
    prior, log_lik = _per_position(model, b)
    want = (prior.log() + log_lik).logsumexp(-1)  # (B, T)
    model.train()
    logits = model(b.src, b.src_lens, b.tgt_in).logits
    torch.testing.assert_close(logits.exp().sum(-1), torch.ones(logits.shape[:2]))
    got = logits.gather(-1, b.tgt_out.unsqueeze(-1)).squeeze(-1)
    real = b.tgt_out != PAD_ID
    torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=1e-5)
    # The backward pass goes through the recomputed blocks.
    F.nll_loss(logits.flatten(0, 1), b.tgt_out.flatten(), ignore_index=PAD_ID).backward()
    assert model.decoder.attention.W_s.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("steps", [1, 2, 5])
def test_position_marginal_gradient_is_autograds(steps):
    g = torch.Generator().manual_seed(0)
    b, t, s, d, v = 2, 5, 4, 3, 7
    h = torch.randn(b, t, s, d, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(v, d, generator=g, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(v, generator=g, dtype=torch.float64, requires_grad=True)
    prior = torch.rand(b, t, s, generator=g, dtype=torch.float64)
    prior[0, :, -1] = 0  # off the support: no mass, no gradient
    lp = torch.where(prior > 0, prior, 1).log().masked_fill(prior == 0, float("-inf"))
    lp = (lp - lp.logsumexp(-1, keepdim=True)).requires_grad_()
    upstream = torch.randn(b, t, v, generator=g, dtype=torch.float64)
    want = (F.linear(h, w, bias).log_softmax(-1) + lp.unsqueeze(-1)).logsumexp(2)
    want_grads = torch.autograd.grad((want * upstream).sum(), (h, w, bias, lp))
    got = PositionMarginal.apply(h, w, bias, lp, steps)
    torch.testing.assert_close(got, want)
    for x, y in zip(torch.autograd.grad((got * upstream).sum(), (h, w, bias, lp)),
                    want_grads, strict=True):
        torch.testing.assert_close(x, y)


@pytest.mark.parametrize("normalizer", ["softmax", "sparsemax"])
def test_posterior_is_bayes_rule_over_the_enumerated_positions(normalizer):
    model = tiny_model(_cfg("exact", normalizer=normalizer), VOCAB)
    b = _batch()
    prior, log_lik = _per_position(model, b)
    want = (prior * log_lik.exp())
    want = want / want.sum(-1, keepdim=True)
    choice = model.choose_view(model.choose_attention(), "posterior")
    assert choice.describe() == "cross-attention, posterior"
    got = model.attention_maps(b.src, b.src_lens, b.tgt_in, choice)
    real = b.tgt_out != PAD_ID
    torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=1e-5)
    assert (got[real][prior[real] == 0] == 0).all()


@pytest.mark.parametrize("placement,feeding", [("bahdanau", True), ("luong", True),
                                               ("luong", False)])
def test_decoding_attends_to_the_argmax_position_one_hot(placement, feeding):
    model = tiny_model(_cfg("reinforce", placement=placement, input_feeding=feeding), VOCAB)
    b = _batch()
    choice = model.choose_attention()
    chosen = model.attention_maps(b.src, b.src_lens, b.tgt_in, choice)
    prior = model.attention_maps(b.src, b.src_lens, b.tgt_in,
                                 model.choose_view(choice, "prior"))
    assert ((chosen == 0) | (chosen == 1)).all()
    assert torch.equal(chosen.argmax(-1), prior.argmax(-1))
    assert (prior < 1).any()  # the distribution is not the one-hot
    with torch.no_grad():  # stepping reproduces the teacher-forced rows
        enc = model.encode(b.src, b.src_lens)
        state, rows = model.init_state(enc), []
        for t in range(b.tgt_in.size(1)):
            step = model.step(b.tgt_in[:, t], state, enc)
            state, rows = step.state, [*rows, step.attn]
    torch.testing.assert_close(torch.stack(rows, 1), chosen)
    if placement == "bahdanau" or feeding:
        with pytest.raises(OptionError, match="posterior"):
            model.choose_view(choice, "posterior")


@pytest.mark.parametrize("placement,feeding", [("bahdanau", True), ("luong", False)])
def test_sampling_draws_the_position_too_reproducibly(placement, feeding):
    model = tiny_model(_cfg("reinforce", placement=placement, input_feeding=feeding), VOCAB)
    b = _batch(n=4, seed=3)
    cfg = DecodeConfig(method="sample", nbest=16, max_len_b=4, max_len_a=0.0, seed=11)

    def decode(c):
        hyps = decode_batch(model, b, c, need_attn=True)
        return [[(h.tokens, h.attn) for h in hs] for hs in hyps]

    def first_positions(out):  # the position of each sample's first step, per sentence
        return [{int(attn[0].argmax()) for _, attn in hs} for hs in out]

    greedy = decode(dataclasses.replace(cfg, method="greedy", nbest=1))
    sampled = decode(cfg)
    for hs in sampled:
        for _, attn in hs:
            assert ((attn == 0) | (attn == 1)).all() and (attn.sum(-1) == 1).all()
    # The first step's prior depends on no drawn token: only drawing positions varies it.
    assert all(len(p) == 1 for p in first_positions(greedy))
    assert sum(len(p) > 1 for p in first_positions(sampled)) >= 3
    again = decode(cfg)
    assert [[t for t, _ in hs] for hs in again] == [[t for t, _ in hs] for hs in sampled]
    for hs, hs2 in zip(sampled, again, strict=True):
        for (_, a1), (_, a2) in zip(hs, hs2, strict=True):
            assert torch.equal(a1, a2)
    def paths(out):  # every sample's positions, in order
        return [[attn.argmax(-1).tolist() for _, attn in hs] for hs in out]

    assert paths(decode(dataclasses.replace(cfg, seed=12))) != paths(sampled)
    # Outside the sampling search the position is the argmax again.
    assert [[t for t, _ in hs] for hs in decode(
        dataclasses.replace(cfg, method="greedy", nbest=1))] == [[t for t, _ in hs]
                                                                 for hs in greedy]


def test_views_of_a_soft_model():
    model = tiny_model(ModelConfig(arch="rnn", rnn=RNNConfig(emb_dim=6, hidden_dim=6)), VOCAB)
    choice = model.choose_attention()
    assert model.choose_view(choice, "prior") == AttentionChoice("cross", view="prior")
    with pytest.raises(OptionError, match="hard-attention"):
        model.choose_view(choice, "posterior")
    with pytest.raises(OptionError, match="expected one of chosen, prior, posterior"):
        model.choose_view(choice, "sampled")


DATA = {"train": {"src": "a.src", "tgt": "a.tgt"}, "valid": {"src": "v.src", "tgt": "v.tgt"}}


def _recipe(**rnn) -> dict:
    return {"name": "x", "data": DATA, "model": {"arch": "rnn", "rnn": rnn}}


@pytest.mark.parametrize("rnn,message", [
    ({"attention": "none", "hard": {"estimator": "reinforce"}}, "needs attention"),
    ({"hard": {"estimator": "exact"}}, "exact needs placement: luong and input_feeding: false"),
    ({"placement": "luong", "hard": {"estimator": "exact"}}, "exact needs placement"),
    ({"hard": {"estimator": "exact", "entropy": 0.1}}, "hard.entropy: applies to estimator"),
    ({"hard": {"soft_fraction": 0.5}}, "hard.soft_fraction: applies to estimator: reinforce"),
    ({"hard": {"estimator": "sample"}}, "expected one of none, reinforce, exact"),
    ({"hard": {"estimator": "reinforce", "soft_fraction": 1.5}}, "soft_fraction"),
])
def test_recipe_rules(rnn, message):
    with pytest.raises(ConfigError, match=message):
        recipe_from_dict(_recipe(**rnn))


def test_recipe_accepts_hard_and_sparse_choices():
    r = recipe_from_dict({"name": "x", "data": DATA, "model": {
        "arch": "rnn", "attention_normalizer": "entmax15",
        "rnn": {"placement": "luong", "input_feeding": False, "hard": {"estimator": "exact"}}}})
    assert r.model.attention_normalizer == "entmax15"
    assert r.model.rnn.hard == dataclasses.replace(HardAttentionConfig(), estimator="exact")
    with pytest.raises(ConfigError, match="expected one of softmax, sparsemax, entmax15"):
        recipe_from_dict({"name": "x", "data": DATA, "model": {"attention_normalizer": "relu"}})


def test_guided_alignment_of_hard_attention_is_refused():
    raw = _recipe(hard={"estimator": "reinforce"})
    raw["data"] = {**DATA, "train": {**DATA["train"], "align": "a.align"}}
    raw["train"] = {"guided_alignment": {"weight": 0.05}}
    with pytest.raises(ConfigError, match="hard-attention step attends to one drawn position"):
        recipe_from_dict(raw)
