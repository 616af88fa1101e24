"""Label-smoothed cross-entropy over the real (non-pad) target tokens, and the guided-alignment
cross-entropy between attention and gold links.

Shapes: B batch, T target length, S source length, V vocabulary.

Label smoothing (Szegedy et al. 2016, §7; used for NMT by Vaswani et al. 2017, §5.4) spreads
`smoothing` of the target mass uniformly over the vocabulary. The loss is returned as a *sum*
over tokens: the trainer divides by the number of target tokens of the whole update (every
accumulated batch, every rank), so that gradient accumulation gives the same update as one
larger batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from mtkit.config.guided import Readout
from mtkit.data.vocab import PAD_ID


@dataclass(frozen=True)
class LossSums:
    """Token sums of one batch (0-d tensors on the logits' device; no host sync).

    loss: the label-smoothed loss (what is optimised); nll: the plain negative
    log-likelihood of the references (what perplexity is computed from)."""

    loss: torch.Tensor
    nll: torch.Tensor


def label_smoothed_nll(logits: torch.Tensor, target: torch.Tensor, *,
                       smoothing: float) -> LossSums:
    """logits: (B, T, V); target: (B, T) ids, PAD where padded -> summed losses.

    Equal to ``F.cross_entropy(..., label_smoothing=smoothing, ignore_index=PAD_ID,
    reduction="sum")`` (tested), computed from one log-softmax so that the NLL for perplexity
    comes for free: per token, loss = (1 - eps) * nll + eps * mean_v(-log p_v).
    The softmax runs in float32 even under autocast; see `_SmoothedNLL` for the gradient.
    """
    loss, nll = _SmoothedNLL.apply(logits.flatten(0, 1), target.flatten(), smoothing)
    return LossSums(loss, nll.detach())


class _SmoothedNLL(torch.autograd.Function):
    """The label-smoothed loss and the NLL of (N, V) logits, keeping one (N, V) tensor for
    the backward pass: the softmax, which the gradient is made of in place,
    d loss / d logits = p - (1 - eps) * onehot(target) - eps / V on real tokens, 0 on PAD.
    Through autograd's log-softmax, NLL and sum, a batch held several such tensors at once,
    each over 100 MB for 8,000 pieces (bench/RESULTS.md, "Figures behind the code's
    comments"). Backward may run once
    (the graph is never retained in training)."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, smoothing: float
                ) -> tuple[torch.Tensor, torch.Tensor]:
        lp = F.log_softmax(logits.float(), dim=-1)
        real = target != PAD_ID
        loss, nll = _smoothed_sums(lp, target, real, smoothing)
        if ctx.needs_input_grad[0]:  # not in validation
            ctx.save_for_backward(lp.exp_(), target, real)  # lp is not needed any more
        ctx.smoothing, ctx.dtype = smoothing, logits.dtype
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    @once_differentiable  # a second-order gradient would be silently wrong: refused
    def backward(ctx, grad_loss: torch.Tensor, _grad_nll: torch.Tensor | None
                 ) -> tuple[torch.Tensor, None, None]:
        grad, target, real = ctx.saved_tensors
        _smoothed_grad_(grad, target, ctx.smoothing)
        grad.mul_((real * grad_loss).unsqueeze(1))
        return grad.to(ctx.dtype), None, None


def _smoothed_sums(lp: torch.Tensor, target: torch.Tensor, real: torch.Tensor,
                   smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(label-smoothed loss, NLL), each summed over the real rows of log-probabilities
    lp (N, V) with targets (N,)."""
    nll = F.nll_loss(lp, target, ignore_index=PAD_ID, reduction="sum")
    if smoothing == 0.0:
        return nll.clone(), nll  # two outputs: the loss is differentiable, the NLL is not
    uniform = -lp.sum(1).masked_fill(~real, 0.0).sum() / lp.size(1)
    return (1.0 - smoothing) * nll + smoothing * uniform, nll


def _smoothed_grad_(p: torch.Tensor, target: torch.Tensor, smoothing: float) -> None:
    """Turn the softmax p (N, V) into the label-smoothed loss's gradient of every row, in
    place: p - (1 - eps) * onehot(target) - eps / V (PAD rows are for the caller to zero)."""
    if smoothing != 0.0:
        p.sub_(smoothing / p.size(1))
    # At every row's target, PAD rows included: selecting the real rows first (`nonzero`)
    # would make every update wait for the GPU.
    p.scatter_add_(1, target.unsqueeze(1), p.new_full((p.size(0), 1), smoothing - 1.0))


def rdrop_loss(logits: torch.Tensor, target: torch.Tensor, *, smoothing: float,
               weight: float) -> LossSums:
    """R-Drop (Liang et al. 2021): logits (2B, T, V) of one batch passed twice through the
    model, rows b and B + b the same sentence under two dropout masks; target (B, T), PAD
    where padded -> summed losses.

    Per real token, with p1, p2 the two predicted distributions and l1, l2 their
    label-smoothed losses: loss = (l1 + l2) / 2 + weight / 4 * (KL(p1||p2) + KL(p2||p1)), the
    paper's eq. 3 halved, so that the translation term is on the scale of one pass (the
    learning rate keeps its meaning) and `weight` is the paper's alpha. nll: the mean of the
    two passes' NLL. See `_RDrop` for how it is computed."""
    loss, nll = _RDrop.apply(logits.flatten(0, 1), target.flatten(), smoothing, weight)
    return LossSums(loss, nll.detach())


class _RDrop(torch.autograd.Function):
    """`rdrop_loss` of (2N, V) logits (rows i and N + i: one target token, two passes) from one
    log-softmax, with the gradient written out, as `_SmoothedNLL` does for one pass. Through
    autograd (a second log-softmax, the exps, the differences, each a new (N, V) tensor kept
    for backward), a batch of 3,072 target positions over 8,000 pieces took 6.2 times the plain
    loss of its two passes on 2 CPU cores; this takes 2.0 times (bench/RESULTS.md, "R-Drop's
    loss").

    With d = log p1 - log p2, KL(p1||p2) + KL(p2||p1) = sum_v (p1 - p2) d, whose gradient is
    p1 (d - E_p1[d]) + p1 - p2 for pass 1's logits and -p2 (d - E_p2[d]) - (p1 - p2) for pass
    2's. Kept for backward: the log-softmax (the softmax alone would give d = -inf - -inf
    where both underflow), made into the gradient in place. The (N, V) terms are computed
    `_rows_at_once` rows at a time. Backward may run once."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, smoothing: float,
                weight: float) -> tuple[torch.Tensor, torch.Tensor]:
        lp = F.log_softmax(logits.float(), dim=-1)
        n, real = target.size(0), target != PAD_ID
        ce, nll = _smoothed_sums(lp, target.repeat(2), real.repeat(2), smoothing)
        kl, rows = lp.new_zeros(()), _rows_at_once(lp)
        for s in range(0, n, rows):
            e = min(s + rows, n)
            a, b = lp[s:e], lp[n + s:n + e]
            sym = torch.linalg.vecdot(a.exp() - b.exp(), a - b)
            kl += sym.masked_fill(~real[s:e], 0.0).sum()
        ctx.save_for_backward(lp, target, real)
        ctx.smoothing, ctx.weight, ctx.dtype = smoothing, weight, logits.dtype
        ctx.mark_non_differentiable(nll)
        return ce / 2 + weight / 4 * kl, nll / 2

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss: torch.Tensor, _grad_nll: torch.Tensor | None
                 ) -> tuple[torch.Tensor, None, None, None]:
        grad, target, real = ctx.saved_tensors  # the log-softmax, becoming the gradient
        n, c, rows = target.size(0), ctx.weight / 4, _rows_at_once(grad)
        for s in range(0, n, rows):
            e = min(s + rows, n)
            a, b = grad[s:e], grad[n + s:n + e]
            d = a - b
            a.exp_()
            b.exp_()  # a, b: p1, p2 from here on
            e1 = torch.linalg.vecdot(a, d).unsqueeze(1)
            e2 = torch.linalg.vecdot(b, d).unsqueeze(1)
            diff = a - b
            kl1 = (d - e1).mul_(a).add_(diff)  # pass 1's KL gradient
            kl2 = d.sub_(e2).mul_(b).add_(diff)  # minus pass 2's
            _smoothed_grad_(a, target[s:e], ctx.smoothing)
            _smoothed_grad_(b, target[s:e], ctx.smoothing)
            a.mul_(0.5).add_(kl1, alpha=c)
            b.mul_(0.5).sub_(kl2, alpha=c)
        grad.mul_((real.repeat(2) * grad_loss).unsqueeze(1))
        return grad.to(ctx.dtype), None, None, None


# R-Drop's (N, V) terms are computed in blocks of rows of this many elements. On a CPU, a fresh
# (N, V) tensor costs more in page faults than its arithmetic; blocks of 1 MB of float32 are
# reused by the allocator and held by the cache (3,072 target positions over 8,000 pieces, 2
# cores: 1.9-2.0 times the plain loss in blocks of 32 or 256 rows, 2.6 times in blocks of
# 1,024; bench/RESULTS.md, "R-Drop's loss"). On a GPU, 256 MB bound the temporaries of a big
# batch in a few launches.
BLOCK = {"cpu": 1 << 18, "other": 1 << 26}


def _rows_at_once(lp: torch.Tensor) -> int:
    """How many rows of `lp` (N, V) `_RDrop` computes at once."""
    return max(1, BLOCK["cpu" if lp.device.type == "cpu" else "other"] // lp.size(1))


def perplexity(nll_per_token: float) -> float:
    """exp of the mean NLL (nats per token), capped so a diverged run logs inf, not an error."""
    return math.exp(nll_per_token) if nll_per_token < 700 else math.inf


# Added inside the log (as fairseq's alignment loss for Garg et al. 2019 does): attention that
# is exactly 0 where a gold link points (a local attention's window, a softmax underflow) then
# costs -log(1e-6) ~ 13.8 instead of an infinite loss, and keeps a gradient.
ALIGN_EPS = 1e-6


def alignment_ce(attn: torch.Tensor, gold: torch.Tensor, *, readout: Readout) -> torch.Tensor:
    """Guided alignment (Garg et al. 2019): the summed cross-entropy between attention
    rows and the gold links, each row's links normalised to sum to 1; target pieces without a
    link add nothing, so dividing by their count gives the mean over linked pieces.

    attn: (B, T, S) attention of the decoder steps, row t the step whose input is tgt_in[:, t]
    (rows sum to 1 over the real source pieces, EOS included); gold: (B, T, S) bool,
    gold[b, j, i] when target piece j is linked to source piece i (`Batch.align`). readout
    `current`: piece j supervises row j, the step that predicts it; `shift`: row j + 1, the
    step whose input it is (Chen et al. 2020). Returns a 0-d float32 sum."""
    if readout == "shift":
        attn, gold = attn[:, 1:], gold[:, :-1]
    g = gold.to(torch.float32)
    target = g / g.sum(dim=-1, keepdim=True).clamp_min(1.0)
    return -(target * (attn.float() + ALIGN_EPS).log()).sum()
