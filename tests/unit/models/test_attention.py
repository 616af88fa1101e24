"""Attention scoring modules on their own: gradients, masking, windows, hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from mtkit.config import RNNConfig
from mtkit.errors import MtkitError
from mtkit.models.attention import (
    AdditiveAttention,
    CosineAttention,
    DotAttention,
    GeneralAttention,
    LocalAttention,
    LocationAttention,
    masked_softmax,
)
from mtkit.models.build import _attention

torch.set_num_threads(1)

SCORED = ["dot", "general", "concat", "additive", "scaled_dot", "cosine", "location", "local-m",
          "local-p"]
B, T, S, HQ, HM = 2, 3, 6, 4, 6


def _inputs(dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    query = torch.randn(B, T, HQ, generator=g, dtype=dtype)
    memory = torch.randn(B, S, HM, generator=g, dtype=dtype)
    mask = torch.arange(S) < torch.tensor([[S], [4]])  # second row: 2 padded positions
    positions = torch.arange(T).expand(B, T) + torch.tensor([[0], [3]])  # row 2 runs past len
    return query, memory, mask, positions


def _module(name: str, window: int = 1):
    torch.manual_seed(0)
    cfg = RNNConfig(attention=name, attn_dim=5, local_window=window, max_positions=8)
    return _attention(cfg, HQ, HM)


def _weights(att, query, memory, mask, positions):
    keys = att.prepare(memory)
    return att(query, memory if keys is None else keys, mask, positions)


@pytest.mark.parametrize("name", SCORED)
def test_gradcheck_float64(name):
    att = _module(name, window=2).double()
    _, _, mask, positions = _inputs()
    query, memory, _, _ = _inputs()
    query.requires_grad_(True)
    memory.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda q, m: _weights(att, q, m, mask, positions),
                                    (query, memory), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("name", SCORED)
def test_gradients_reach_every_parameter(name):
    att = _module(name, window=2)
    query, memory, mask, positions = _inputs(torch.float32)
    w = _weights(att, query, memory, mask, positions)
    (w * torch.randn_like(w)).sum().backward()
    for pname, p in att.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname


@pytest.mark.parametrize("name", SCORED)
def test_rows_sum_to_one_and_padding_is_exactly_zero(name):
    att = _module(name, window=1)
    query, memory, mask, positions = _inputs(torch.float32)
    w = _weights(att, query, memory, mask, positions)
    assert w.shape == (B, T, S)
    torch.testing.assert_close(w.sum(-1), torch.ones(B, T))
    assert (w[1, :, 4:] == 0).all()
    assert torch.isfinite(w).all()


def test_dot_hand_computed():
    att = DotAttention(2, 2, scaled=False)
    q = torch.tensor([[[1.0, 0.0]]])
    keys = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]]])
    mask = torch.tensor([[True, True, False]])
    w = att(q, keys, mask)
    e = math.exp(1.0)
    torch.testing.assert_close(w, torch.tensor([[[e / (e + 1), 1 / (e + 1), 0.0]]]))
    scaled = DotAttention(2, 2, scaled=True)(q, keys, mask)
    e = math.exp(1 / math.sqrt(2))
    torch.testing.assert_close(scaled, torch.tensor([[[e / (e + 1), 1 / (e + 1), 0.0]]]))


def test_dot_projects_memory_only_when_sizes_differ():
    assert DotAttention(4, 4, scaled=False).proj is None
    assert CosineAttention(4, 4).proj is None
    att = DotAttention(4, 8, scaled=False)
    assert att.proj is not None and att.prepare(torch.randn(2, 3, 8)).shape == (2, 3, 4)


def test_general_is_bilinear():
    att = GeneralAttention(HQ, HM)
    query, memory, mask, _ = _inputs(torch.float32)
    want = torch.einsum("btq,qm,bsm->bts", query, att.W.weight, memory)
    want = want.masked_fill(~mask[:, None], float("-inf")).softmax(-1)
    torch.testing.assert_close(att(query, att.prepare(memory), mask), want)


def test_additive_equals_concat_form():
    """vᵀ tanh(W [s; h]) (Luong's concat) computed literally equals the split form."""
    att = AdditiveAttention(HQ, HM, 5)
    query, memory, mask, _ = _inputs(torch.float32)
    W = torch.cat([att.W_s.weight, att.W_h.weight], dim=1)  # (A, HQ + HM)
    pairs = torch.cat([query[:, :, None].expand(-1, -1, S, -1),
                       memory[:, None].expand(-1, T, -1, -1)], dim=-1)
    energies = (torch.tanh(pairs @ W.T) @ att.v.weight.T).squeeze(-1)
    want = energies.masked_fill(~mask[:, None], float("-inf")).softmax(-1)
    torch.testing.assert_close(att(query, att.prepare(memory), mask), want)


def test_cosine_ignores_key_norms():
    att = CosineAttention(HM, HM)
    query, memory, mask, _ = _inputs(torch.float32)
    query = torch.randn(B, T, HM)
    scale = torch.rand(B, S, 1) * 5 + 0.1
    a = att(query, att.prepare(memory), mask)
    b = att(query, att.prepare(memory * scale), mask)
    torch.testing.assert_close(a, b)


def test_location_ignores_content_and_rejects_long_sources():
    att = LocationAttention(HQ, 8)
    query, memory, mask, _ = _inputs(torch.float32)
    a = att(query, memory, mask)
    b = att(query, torch.randn_like(memory), mask)
    torch.testing.assert_close(a, b)
    with pytest.raises(MtkitError, match="max_positions"):
        att.prepare(torch.randn(1, 9, HM))


def test_local_m_window_follows_the_step_and_clamps_at_the_end():
    att = LocalAttention(HQ, HM, 1, predictive=False)
    query, memory, mask, _ = _inputs(torch.float32)
    lens = torch.tensor([S, 4])
    positions = torch.tensor([[0, 2, 9], [0, 2, 9]])
    w = att(query, att.prepare(memory), mask, positions)
    for b in range(B):
        for t in range(T):
            centre = min(int(positions[b, t]), int(lens[b]) - 1)
            inside = (torch.arange(S) - centre).abs() <= 1
            assert (w[b, t, ~inside] == 0).all()
            assert (w[b, t, inside & mask[b]] > 0).all()


def test_local_p_is_the_renormalised_gaussian_window():
    D = 2
    att = LocalAttention(HQ, HM, D, predictive=True)
    torch.nn.init.zeros_(att.content.W.weight)  # flat content scores: only the Gaussian left
    query, memory, mask, _ = _inputs(torch.float32)
    w = att(query, att.prepare(memory), mask)
    lens = mask.sum(1, keepdim=True).float()
    centre = lens * torch.sigmoid(att.v_p(torch.tanh(att.W_p(query)))).squeeze(-1)
    dist = torch.arange(S).float().view(1, 1, S) - centre.unsqueeze(-1)
    gauss = torch.exp(-dist.square() / (2 * (D / 2) ** 2))
    gauss = gauss * ((dist.abs() <= D) & mask[:, None])
    torch.testing.assert_close(w, gauss / gauss.sum(-1, keepdim=True))


def test_masked_softmax_zero_not_tiny():
    e = torch.tensor([[[100.0, -100.0, 3.0]]])
    w = masked_softmax(e, torch.tensor([[[True, True, False]]]))
    assert w[0, 0, 2].item() == 0.0
    torch.testing.assert_close(w[0, 0, :2], F.softmax(e[0, 0, :2], -1))
