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
from mtkit.models.vocab import PAD_ID


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
    two passes' NLL. With d = log p1 - log p2, KL(p1||p2) + KL(p2||p1) = sum_v (p1 - p2) d,
    from log-probabilities (probabilities alone would give d = -inf - -inf where both
    underflow)."""
    # Autograd through the formula: a hand-written gradient made this loss 3 times cheaper
    # (bench/RESULTS.md, "R-Drop's loss"), not worth 70 lines for a lever that is off in every
    # recipe and cost 10 BLEU at the CPU budget.
    both = label_smoothed_nll(logits, target.repeat(2, 1), smoothing=smoothing)
    lp1, lp2 = F.log_softmax(logits.float(), dim=-1).chunk(2)
    sym = ((lp1.exp() - lp2.exp()) * (lp1 - lp2)).sum(-1)
    kl = sym.masked_fill(target == PAD_ID, 0.0).sum()
    return LossSums(both.loss / 2 + weight / 4 * kl, both.nll / 2)


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
