"""Attention normalisers: softmax, sparsemax and 1.5-entmax over the last dimension.

Shapes: any (..., S); -inf marks excluded positions (padding, a local window's outside), which
get exactly 0 whatever the normaliser. Every row must allow at least one position.

- softmax: exp(z) / sum exp(z), never exactly 0 on an allowed position.
- sparsemax (Martins & Astudillo 2016, "From softmax to sparsemax"): the Euclidean projection
  of z onto the simplex, p = max(z - tau, 0); exactly 0 below the threshold tau.
- entmax15 (Peters, Niculae & Martins 2019, "Sparse sequence-to-sequence models"): alpha-entmax
  with alpha = 1.5, p = max(z / 2 - tau, 0)^2; sparse like sparsemax, smoother near the top.

Both sparse maps are computed exactly by sorting (the papers' Algorithm 1 and eq. 11) in at
least float32, and differentiated in closed form (Martins & Astudillo, §2.5; Peters et al.,
Prop. 2): sparsemax's gradient is the incoming one centred on the support, entmax15's
weights it by sqrt(p).
"""

from __future__ import annotations

import typing

import torch

from mtkit.config.attention import Normalizer

# Excluded positions are set to this, relative to the row's maximum, before sorting: far below
# any threshold (tau >= max - 1 for sparsemax, max / 2 - 1 for entmax15), and finite, so the
# prefix sums of the sorted row stay finite.
_FAR = -1.0e6


def _sorted(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """z (..., S) -> z - max with excluded positions at _FAR (float32 or wider), and that
    sorted in descending order."""
    z = torch.nan_to_num(z.to(torch.promote_types(z.dtype, torch.float32)), neginf=-torch.inf)
    z = z - z.amax(dim=-1, keepdim=True)
    z = z.masked_fill(z.isneginf(), _FAR)
    return z, z.sort(dim=-1, descending=True).values


class _Sparsemax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z: torch.Tensor) -> torch.Tensor:
        x, srt = _sorted(z)
        rho = torch.arange(1, x.size(-1) + 1, device=x.device, dtype=x.dtype)
        cum = srt.cumsum(dim=-1) - 1
        support = (rho * srt > cum).sum(dim=-1, keepdim=True)  # k(z), at least 1
        tau = cum.gather(-1, support - 1) / support.to(x.dtype)
        p = (x - tau).clamp_min(0)
        ctx.save_for_backward(p)
        return p.to(z.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (p,) = ctx.saved_tensors
        on = p > 0
        g = grad.to(p.dtype).masked_fill(~on, 0.0)
        g = g - g.sum(-1, keepdim=True) / on.sum(-1, keepdim=True)
        return g.masked_fill(~on, 0.0).to(grad.dtype)


class _Entmax15(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z: torch.Tensor) -> torch.Tensor:
        x, srt = _sorted(z)
        x, srt = x / 2, srt / 2
        rho = torch.arange(1, x.size(-1) + 1, device=x.device, dtype=x.dtype)
        mean = srt.cumsum(dim=-1) / rho
        mean_sq = srt.square().cumsum(dim=-1) / rho
        ss = rho * (mean_sq - mean.square())
        tau = mean - ((1 - ss) / rho).clamp_min(0).sqrt()  # threshold if k = rho
        support = (tau <= srt).sum(dim=-1, keepdim=True)
        p = (x - tau.gather(-1, support - 1)).clamp_min(0).square()
        ctx.save_for_backward(p)
        return p.to(z.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (p,) = ctx.saved_tensors
        s = p.sqrt()
        g = grad.to(p.dtype) * s
        g = g - s * (g.sum(-1, keepdim=True) / s.sum(-1, keepdim=True))
        return g.to(grad.dtype)


def sparsemax(z: torch.Tensor) -> torch.Tensor:
    """z (..., S) -> sparsemax over the last dimension, same shape and dtype."""
    return _Sparsemax.apply(z)


def entmax15(z: torch.Tensor) -> torch.Tensor:
    """z (..., S) -> 1.5-entmax over the last dimension, same shape and dtype."""
    return _Entmax15.apply(z)


def normalize(energies: torch.Tensor, normalizer: Normalizer) -> torch.Tensor:
    """energies (..., S), -inf where excluded -> weights (..., S), rows summing to 1."""
    if normalizer == "softmax":
        return energies.softmax(dim=-1)
    elif normalizer == "sparsemax":
        return sparsemax(energies)
    elif normalizer == "entmax15":
        return entmax15(energies)
    raise AssertionError(f"unchecked normalizer {normalizer!r}")


NORMALIZERS: tuple[str, ...] = typing.get_args(Normalizer)
