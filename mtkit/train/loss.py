"""Label-smoothed cross-entropy over the real (non-pad) target tokens.

Shapes: B batch, T target length, V vocabulary.

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
    The softmax runs in float32 even under autocast.
    """
    lp = F.log_softmax(logits.float().flatten(0, 1), dim=-1)  # (B*T, V)
    tgt = target.flatten()
    nll = F.nll_loss(lp, tgt, ignore_index=PAD_ID, reduction="sum")
    if smoothing == 0.0:
        return LossSums(nll, nll.detach())
    uniform = -lp.sum(1).masked_fill(tgt == PAD_ID, 0.0).sum() / lp.size(1)
    loss = (1.0 - smoothing) * nll + smoothing * uniform
    return LossSums(loss, nll.detach())


def perplexity(nll_per_token: float) -> float:
    """exp of the mean NLL (nats per token), capped so a diverged run logs inf, not an error."""
    return math.exp(nll_per_token) if nll_per_token < 700 else math.inf
