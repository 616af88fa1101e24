"""Forced (teacher-forced) decoding: the model's log-probabilities and attention for given
target sentences, e.g. for `align -t` and for scoring references.

Shapes: B batch, S source length, T target length (with EOS), V vocabulary.
"""

from __future__ import annotations

import torch

from mtkit.data.batch import Batch
from mtkit.decode.scoring import Hypothesis, to_hypotheses
from mtkit.models.base import Translator
from mtkit.models.vocab import EOS_ID, PAD_ID


@torch.no_grad()
def forced(model: Translator, batch: Batch, *, need_attn: bool = True) -> list[Hypothesis]:
    """Score each sentence pair of `batch` (which must hold targets) in one teacher-forced pass.

    Returns one Hypothesis per pair, in batch order: its target tokens, their and the EOS's
    log-probabilities, score = logprob (no length penalty: nothing is ranked), and attention
    (T, S) (T = target length + 1 for the EOS) when asked for and the model has it.
    """
    assert batch.tgt_in is not None and batch.tgt_out is not None, "forced() needs targets"
    out = model.forward(batch.src, batch.src_lens, batch.tgt_in, return_attn=need_attn)
    lp = torch.log_softmax(out.logits.float(), dim=-1)
    tgt = batch.tgt_out
    token_lps = lp.gather(2, tgt.unsqueeze(2)).squeeze(2).masked_fill(tgt == PAD_ID, 0.0)
    assert bool(((tgt == EOS_ID).sum(1) == 1).all()), "every target ends in one EOS"
    attn = out.attn if need_attn else None
    return to_hypotheses(tgt, token_lps, attn, batch.src_lens.tolist(), kind="none", alpha=0.0)
