"""Shared by the learning tests: the short training loop that teaches a tiny model a
synthetic task (reversal, permutation) in seconds, with or without guided alignment."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from mtkit.config.guided import Readout
from mtkit.data.batch import Batch
from mtkit.models.base import Translator
from mtkit.models.vocab import PAD_ID
from mtkit.train.loss import alignment_ce


def fit(model: Translator, next_batch: Callable[[], Batch], *, updates: int, lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        guide: tuple[float, Readout] | None = None) -> Translator:
    """Adam, 50 updates of linear warm-up then linear decay to 0 (the decay matters: with a
    constant rate the Transformer stays a few points short of 95% and the GRU's attention
    wanders to neighbouring words), gradient norm clipped at 1. Returns the model in eval.

    guide: (weight, readout) of guided alignment: the batches carry gold links, and the loss
    adds weight x the alignment cross-entropy averaged over linked target pieces, as the
    trainer does (`mtkit.train.step.forward_backward`)."""
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=betas)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: min((i + 1) / 50, 1.0) * (1 - i / updates))
    for _ in range(updates):
        b = next_batch()
        out = model(b.src, b.src_lens, b.tgt_in, return_attn=guide is not None)
        loss = F.cross_entropy(out.logits.flatten(0, 1), b.tgt_out.flatten(),
                               ignore_index=PAD_ID)
        if out.aux is not None:  # hard attention's REINFORCE term, on the mean's scale
            loss = loss + out.aux(b.tgt_out) / (b.tgt_out != PAD_ID).sum()
        if guide is not None:
            ce = alignment_ce(out.attn, b.align, readout=guide[1])
            loss = loss + guide[0] * ce / max(b.num_linked_rows, 1)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    return model.eval()
