"""Sparse attention normalisers: sparsemax and 1.5-entmax against the `entmax` package (values
and gradients), their zeros, and both architectures' cross-attention with each."""

from __future__ import annotations

import entmax
import pytest
import torch

from mtkit.config import ModelConfig, RNNConfig, TransformerConfig
from mtkit.models.normalizers import entmax15, normalize, sparsemax
from tests.helpers import reversal_batch, tiny_model

PAIRS = {"sparsemax": (sparsemax, entmax.sparsemax), "entmax15": (entmax15, entmax.entmax15)}


@pytest.mark.parametrize("name", PAIRS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_values_and_gradients_match_the_entmax_package(name, dtype):
    ours, ref = PAIRS[name]
    g = torch.Generator().manual_seed(0)
    z = (torch.randn(6, 5, 9, generator=g) * 3).to(dtype)
    mask = torch.rand(6, 5, 9, generator=g) < 0.3
    mask[..., 0] = False  # every row allows a position
    z_ours = z.masked_fill(mask, float("-inf")).requires_grad_()
    # The package has no -inf handling; a very negative score is the same excluded position.
    z_ref = z.masked_fill(mask, -1e4).requires_grad_()
    p, q = ours(z_ours), ref(z_ref, dim=-1)
    upstream = torch.randn(p.shape, generator=g).to(dtype)
    (p * upstream).sum().backward()
    (q * upstream).sum().backward()
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    torch.testing.assert_close(p, q, atol=tol, rtol=0)
    torch.testing.assert_close(z_ours.grad, z_ref.grad.masked_fill(mask, 0.0), atol=tol, rtol=0)
    assert p.dtype == dtype
    assert (p[mask] == 0).all()
    assert (p == 0).sum() > mask.sum()  # zeros beyond the excluded positions
    torch.testing.assert_close(p.sum(-1), torch.ones(6, 5, dtype=dtype))


@pytest.mark.parametrize("name", PAIRS)
def test_gradcheck(name):
    z = torch.randn(3, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    assert torch.autograd.gradcheck(PAIRS[name][0], (z.requires_grad_(),))


def test_sparsemax_of_a_clear_winner_is_one_hot_softmax_never_is():
    z = torch.tensor([[3.0, 1.0, 0.5, float("-inf")]])
    assert sparsemax(z).tolist() == [[1.0, 0.0, 0.0, 0.0]]
    assert (normalize(z, "softmax")[0, :3] > 0).all()


def _rnn(normalizer: str) -> ModelConfig:
    return ModelConfig(arch="rnn", attention_normalizer=normalizer, rnn=RNNConfig(
        emb_dim=8, hidden_dim=8, attn_dim=8, dropout=0.0))


def _transformer(normalizer: str) -> ModelConfig:
    return ModelConfig(arch="transformer", attention_normalizer=normalizer,
                       transformer=TransformerConfig(d_model=16, heads=2, enc_layers=1,
                                                     dec_layers=2, ffn_dim=16, dropout=0.0))


@pytest.mark.parametrize("arch", [_rnn, _transformer])
@pytest.mark.parametrize("name", ["sparsemax", "entmax15"])
def test_cross_attention_is_sparse_zero_on_padding_and_steps_equal_teacher(arch, name):
    b = reversal_batch(6, 20, torch.Generator().manual_seed(0))
    model = tiny_model(arch(name), 20)
    # Scores of an untrained model are near-equal: spread them so zeros appear.
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)
    with torch.no_grad():
        out = model(b.src, b.src_lens, b.tgt_in, return_attn=True)
        enc = model.encode(b.src, b.src_lens)
        state, rows = model.init_state(enc), []
        for t in range(b.tgt_in.size(1)):
            step = model.step(b.tgt_in[:, t], state, enc)
            state = step.state
            rows.append(step.attn)
    attn, pad = out.attn, ~enc.src_mask.unsqueeze(1).expand_as(out.attn)
    torch.testing.assert_close(torch.stack(rows, 1), attn, atol=1e-4, rtol=0)
    torch.testing.assert_close(attn.sum(-1), torch.ones(attn.shape[:2]))
    assert (attn[pad] == 0).all()
    assert (attn[~pad] == 0).any()  # exact zeros on real positions too
