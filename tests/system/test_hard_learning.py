"""Hard attention must learn too: the reversal task of test_learning.py (where the soft
Bahdanau GRU reaches >= 95% exact match in 400 updates), with each estimator, and the
position each step attends to must be the mirrored source word (the anti-diagonal)."""

from __future__ import annotations

import pytest
import torch

from mtkit.config import ModelConfig, RNNConfig
from mtkit.config.attention import HardAttentionConfig
from tests.system.test_learning import _attention_accuracy, _exact_match, _reversal, _train

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


def _gru(**kw) -> ModelConfig:
    return ModelConfig(arch="rnn", rnn=RNNConfig(
        cell="gru", emb_dim=32, hidden_dim=64, dropout=0.0, attention="additive", attn_dim=64,
        **kw))


def test_reinforce_bahdanau_gru_learns_reversal_attending_to_the_mirrored_word():
    model = _train(_gru(placement="bahdanau", hard=HardAttentionConfig(estimator="reinforce")),
                   updates=400, lr=3e-3)
    assert _exact_match(model) >= 0.95
    assert _attention_accuracy(model) >= 0.90  # the argmax position's one-hot rows


def test_exact_marginal_luong_gru_learns_reversal_and_its_posterior_aligns():
    model = _train(_gru(placement="luong", input_feeding=False,
                        hard=HardAttentionConfig(estimator="exact")), updates=300, lr=3e-3)
    assert _exact_match(model) >= 0.95
    assert _attention_accuracy(model) >= 0.90
    b = _reversal(300, torch.Generator().manual_seed(99))
    choice = model.choose_view(model.choose_attention(), "posterior")
    with torch.no_grad():
        best = model.attention_maps(b.src, b.src_lens, b.tgt_in, choice).argmax(-1)
    n = b.src_lens - 1
    want = (n.view(-1, 1) - 1 - torch.arange(best.size(1))).clamp_min(0)
    real = torch.arange(best.size(1)) < n.view(-1, 1)
    assert (best == want)[real].float().mean() >= 0.95
