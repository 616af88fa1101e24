"""Attention scoring for the RNN encoder-decoders: every score function of the seq2seq
literature behind one small interface.

Shapes: B batch, T decoder queries scored at once (1 when stepping), S source length,
Hq query (decoder hidden) size, Hm memory (encoder output) size, K key size.

An `Attention` does two things:

- ``prepare(memory)`` -> keys (B, S, K) or None: the query-independent part of the score,
  computed once per sentence (in ``encode``) and kept batch-first in ``Encoded.extras`` so beam
  search tiles and reorders it with everything else. None means "score the memory itself".
- ``forward(query, keys, src_mask, positions)`` -> weights (B, T, S): each row sums to 1 over
  real source tokens and is exactly 0 on padding (masked with -inf before the normaliser:
  `normalizer`, softmax unless the builder sets a sparse one, which puts zeros elsewhere too).

The context vector is always ``weights @ memory``, so the value side is the unprojected memory.

`dot`, `scaled_dot` and `cosine` compare the query with the memory directly, which needs equal
sizes. When they differ (a bidirectional encoder gives Hm = 2H against a decoder of H), the
memory is projected to the query size by a bias-free linear map, once per sentence in
``prepare``; with equal sizes no projection (and no parameter) is added.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mtkit.config.attention import Normalizer
from mtkit.errors import MtkitError
from mtkit.models.normalizers import normalize


def masked_softmax(energies: torch.Tensor, mask: torch.Tensor,
                   normalizer: Normalizer = "softmax") -> torch.Tensor:
    """energies (B, T, S), mask (B, 1|T, S) bool True on allowed positions -> (B, T, S),
    normalised by `normalizer` (softmax by default).

    Excluded positions get exactly 0; every row must allow at least one position.
    """
    return normalize(energies.masked_fill(~mask, float("-inf")), normalizer)


class Attention(nn.Module):
    """Base class: subclasses implement `energies` and, when useful, `prepare`."""

    # True when the scores depend on the decoder step index (Luong local-m).
    uses_positions: bool = False
    # How the scores become weights; `build_model` sets it from model.attention_normalizer.
    normalizer: Normalizer = "softmax"

    def prepare(self, memory: torch.Tensor) -> torch.Tensor | None:
        """memory (B, S, Hm) -> keys (B, S, K) computed once per sentence, or None."""
        return None

    def energies(self, query: torch.Tensor, keys: torch.Tensor, src_mask: torch.Tensor,
                 positions: torch.Tensor | None) -> torch.Tensor:
        """query (B, T, Hq), keys (B, S, K) -> unnormalised scores (B, T, S); -inf marks
        positions the score function itself excludes (local windows)."""
        raise NotImplementedError

    def forward(self, query: torch.Tensor, keys: torch.Tensor, src_mask: torch.Tensor,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        """query (B, T, Hq); keys (B, S, K) from `prepare` (or the memory when it returns
        None); src_mask (B, S) True on real tokens; positions (B, T) the decoder step index of
        each query (only local-m reads it) -> weights (B, T, S)."""
        return masked_softmax(self.energies(query, keys, src_mask, positions),
                              src_mask.unsqueeze(1), self.normalizer)


def _match(memory_dim: int, query_dim: int) -> nn.Linear | None:
    """The memory projection that makes dot-style scores possible (see the module doc)."""
    return None if memory_dim == query_dim else nn.Linear(memory_dim, query_dim, bias=False)


class DotAttention(Attention):
    """score(s, h) = sᵀh (Luong et al. 2015, eq. 8 `dot`); with ``scaled`` sᵀh / √Hq
    (Vaswani et al. 2017, eq. 1), which keeps the softmax out of saturation for large Hq."""

    def __init__(self, query_dim: int, memory_dim: int, *, scaled: bool) -> None:
        super().__init__()
        self.proj = _match(memory_dim, query_dim)
        self.scale = 1.0 / math.sqrt(query_dim) if scaled else 1.0

    def prepare(self, memory: torch.Tensor) -> torch.Tensor | None:
        return None if self.proj is None else self.proj(memory)

    def energies(self, query, keys, src_mask, positions):
        return torch.bmm(query, keys.transpose(1, 2)) * self.scale


class GeneralAttention(Attention):
    """score(s, h) = sᵀ W h, bilinear (Luong et al. 2015, eq. 8 `general`). W h is the key,
    computed once per sentence."""

    def __init__(self, query_dim: int, memory_dim: int) -> None:
        super().__init__()
        self.W = nn.Linear(memory_dim, query_dim, bias=False)

    def prepare(self, memory: torch.Tensor) -> torch.Tensor:
        return self.W(memory)

    def energies(self, query, keys, src_mask, positions):
        return torch.bmm(query, keys.transpose(1, 2))


class AdditiveAttention(Attention):
    """score(s, h) = vᵀ tanh(W [s; h]) = vᵀ tanh(W_s s + W_h h), Bahdanau et al. 2015 (eq. 6,
    `additive`) and Luong et al. 2015 (eq. 8, `concat`): the same function under two names.
    The split form lets W_h h be the key, computed once per sentence."""

    def __init__(self, query_dim: int, memory_dim: int, attn_dim: int) -> None:
        super().__init__()
        self.W_s = nn.Linear(query_dim, attn_dim, bias=False)
        self.W_h = nn.Linear(memory_dim, attn_dim, bias=False)
        self.v = nn.Linear(attn_dim, 1, bias=False)

    def prepare(self, memory: torch.Tensor) -> torch.Tensor:
        return self.W_h(memory)

    def energies(self, query, keys, src_mask, positions):
        # (B, T, 1, A) + (B, 1, S, A) -> (B, T, S, A) -> (B, T, S)
        return self.v(torch.tanh(self.W_s(query).unsqueeze(2) + keys.unsqueeze(1))).squeeze(-1)


class CosineAttention(Attention):
    """Content-based addressing (Graves et al. 2014, Neural Turing Machines, §3.3.1):
    score(s, h) = β(s) · cos(s, h), with the key strength β(s) = softplus(wᵀs + b) ≥ 0
    emitted from the query. Without β the scores lie in [-1, 1] and the softmax stays
    near-uniform. Keys are the (projected) memory, normalised once per sentence."""

    def __init__(self, query_dim: int, memory_dim: int) -> None:
        super().__init__()
        self.proj = _match(memory_dim, query_dim)
        self.strength = nn.Linear(query_dim, 1)

    def prepare(self, memory: torch.Tensor) -> torch.Tensor:
        return F.normalize(memory if self.proj is None else self.proj(memory), dim=-1)

    def energies(self, query, keys, src_mask, positions):
        beta = F.softplus(self.strength(query))  # (B, T, 1)
        return beta * torch.bmm(F.normalize(query, dim=-1), keys.transpose(1, 2))


class LocationAttention(Attention):
    """score(s_t) = W_a s_t over source positions (Luong et al. 2015, eq. 8 `location`): the
    weights depend on the decoder state only, never on the source content. W_a has one row per
    source position up to ``max_positions``; scores past the sentence are masked."""

    def __init__(self, query_dim: int, max_positions: int) -> None:
        super().__init__()
        self.W = nn.Linear(query_dim, max_positions)

    def prepare(self, memory: torch.Tensor) -> None:
        if memory.size(1) > self.W.out_features:
            raise MtkitError(f"source of {memory.size(1)} tokens is longer than "
                             f"model.rnn.max_positions ({self.W.out_features}), the positions "
                             "location attention can score")
        return None

    def energies(self, query, keys, src_mask, positions):
        return self.W(query)[..., : keys.size(1)]


class LocalAttention(Attention):
    """Luong et al. 2015, §3.2: attend within a window [p_t - D, p_t + D] around an aligned
    source position p_t, with `general` content scores inside the window.

    monotonic (local-m): p_t = t, the decoder step (clamped to the last source token, so the
    window never falls wholly on padding).
    predictive (local-p): p_t = S_x · sigmoid(v_pᵀ tanh(W_p s_t)) (eq. 9), S_x the source
    length, and a Gaussian exp(-(s - p_t)² / 2σ²), σ = D/2, favours positions near p_t
    (eq. 10). We add its log to the scores before the softmax, i.e. renormalise Luong's
    product so that rows still sum to 1; p_t stays differentiable through the Gaussian.
    """

    def __init__(self, query_dim: int, memory_dim: int, window: int, *,
                 predictive: bool) -> None:
        super().__init__()
        self.content = GeneralAttention(query_dim, memory_dim)
        self.window = window
        self.predictive = predictive
        self.uses_positions = not predictive
        if predictive:
            self.W_p = nn.Linear(query_dim, query_dim, bias=False)
            self.v_p = nn.Linear(query_dim, 1, bias=False)

    def prepare(self, memory: torch.Tensor) -> torch.Tensor:
        return self.content.prepare(memory)

    def energies(self, query, keys, src_mask, positions):
        scores = self.content.energies(query, keys, src_mask, positions)  # (B, T, S)
        # Positions in at least float32: bf16 cannot tell position 255 from 256.
        dtype = torch.promote_types(query.dtype, torch.float32)
        lens = src_mask.sum(dim=1, keepdim=True).to(dtype)  # (B, 1)
        if self.predictive:
            gate = torch.sigmoid(self.v_p(torch.tanh(self.W_p(query))).squeeze(-1).to(dtype))
            centre = lens * gate
        else:
            assert positions is not None, "local-m attention needs the decoder step index"
            centre = torch.minimum(positions.to(dtype), lens - 1)  # (B, T)
        src_pos = torch.arange(keys.size(1), device=query.device, dtype=dtype)
        dist = src_pos.view(1, 1, -1) - centre.unsqueeze(-1)  # (B, T, S)
        if self.predictive:
            sigma = self.window / 2
            scores = scores - dist.square() / (2 * sigma * sigma)
        return scores.masked_fill(dist.abs() > self.window, float("-inf"))
