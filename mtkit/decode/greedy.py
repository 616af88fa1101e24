"""Greedy search: the most likely token at every step, for a whole batch at once.

Shapes: B batch, S source length, T output steps, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mtkit.config import DecodeConfig
from mtkit.data.vocab import BOS_ID, EOS_ID, PAD_ID
from mtkit.decode.hypothesis import (
    Hypothesis,
    as_lengths,
    source_lengths,
    step_logprobs,
    to_hypotheses,
)
from mtkit.models.base import Encoded, Translator

# Picks the next token of every row from masked log-probabilities: (B, V) -> (B,) long.
Chooser = Callable[[torch.Tensor], torch.Tensor]


@torch.no_grad()
def one_path_each(model: Translator, enc: Encoded, choose: Chooser, *,
                  max_len: torch.Tensor | int, min_len: int, need_attn: bool
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Decode one output per row of `enc`, the token at each step picked by `choose`.

    Returns tokens (B, T) with one EOS per row (PAD after it), their log-probabilities
    (B, T) (0 after the EOS) and attention (B, T, S) or None. Rows that have emitted EOS
    keep being fed to the model (as PAD) until every row is done: one model step per
    position for the whole batch; the only host sync per step is the termination check.
    """
    batch, device = enc.src_mask.size(0), enc.src_mask.device
    max_len = as_lengths(max_len, batch, device)
    state = model.init_state(enc)
    prev = torch.full((batch,), BOS_ID, dtype=torch.long, device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    toks, lps, attns = [], [], []
    for t in range(int(max_len.max()) + 1):
        out = model.step(prev, state, enc, need_attn=need_attn)
        lp = step_logprobs(out.logits, t, min_len, max_len)
        tok = choose(lp).masked_fill(done, PAD_ID)
        toks.append(tok)
        lps.append(lp.gather(1, tok.unsqueeze(1)).squeeze(1).masked_fill(done, 0.0))
        if need_attn and out.attn is not None:
            attns.append(out.attn.float())
        done = done | (tok == EOS_ID)
        if bool(done.all()):
            break
        state, prev = out.state, tok
    attn = torch.stack(attns, 1) if attns and len(attns) == len(toks) else None
    return torch.stack(toks, 1), torch.stack(lps, 1), attn


def greedy(model: Translator, enc: Encoded, cfg: DecodeConfig, *,
           max_len: torch.Tensor | int, need_attn: bool = False) -> list[list[Hypothesis]]:
    """Greedy search for every sentence of `enc` (B rows); max_len: int or (B,) limits.

    Uses cfg.min_len and the length penalty (cfg.length_penalty, cfg.alpha) for the score.
    Returns one single-hypothesis list per sentence, in batch order.
    """
    tokens, lps, attn = one_path_each(model, enc, lambda lp: lp.argmax(-1), max_len=max_len,
                                      min_len=cfg.min_len, need_attn=need_attn)
    hyps = to_hypotheses(tokens, lps, attn, source_lengths(enc.src_mask),
                         kind=cfg.length_penalty, alpha=cfg.alpha)
    return [[h] for h in hyps]
