"""Greedy search: the most likely token at every step, for a whole batch at once.

Shapes: B batch, S source length, T output steps, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mtkit.config import DecodeConfig
from mtkit.decode.scoring import (
    Hypothesis,
    Prefix,
    Scratch,
    as_lengths,
    force_prefix,
    source_lengths,
    step_logprobs,
    to_hypotheses,
)
from mtkit.models.base import Encoded, Translator
from mtkit.models.vocab import BOS_ID, EOS_ID, PAD_ID

# Picks the next token of every row from masked log-probabilities: (B, V) -> (B,) long.
Chooser = Callable[[torch.Tensor], torch.Tensor]


@torch.no_grad()
def one_path_each(model: Translator, enc: Encoded, choose: Chooser, *,
                  max_len: torch.Tensor | int, min_len: int, need_attn: bool,
                  prefix: Prefix | None = None, continuing: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Decode one output per row of `enc`, the token at each step picked by `choose`; a row's
    first tokens are its prefix's (prefix: the B rows'; continuing: (V,), see
    `force_prefix`).

    Returns tokens (B, T) with one EOS per row (PAD after it), their log-probabilities
    (B, T) (0 after the EOS) and attention (B, T, S) or None. One model step per position
    for all unfinished rows together; rows that emit EOS leave the batch (their state and
    encoder rows are dropped, the state's by the next step: `order`), and the only host
    sync per step counts them.
    """
    batch, device = enc.src_mask.size(0), enc.src_mask.device
    limit = as_lengths(max_len, batch, device)
    steps, shortest = int(limit.max()) + 1, int(limit.min())
    tokens = torch.full((batch, steps), PAD_ID, dtype=torch.long, device=device)
    lps = torch.zeros(batch, steps, device=device)
    attn = None
    rows = torch.arange(batch, device=device)  # the original rows still decoding
    state, order, scratch = model.init_state(enc), None, Scratch(device)
    prev = torch.full((batch,), BOS_ID, dtype=torch.long, device=device)
    for t in range(steps):
        out = model.step(prev, state, enc, need_attn=need_attn, order=order)
        lp = step_logprobs(out.logits, t, min_len, limit, shortest=shortest, scratch=scratch)
        tok = choose(force_prefix(lp, t, prefix, continuing))
        tokens[rows, t] = tok
        lps[rows, t] = lp.gather(1, tok.unsqueeze(1)).squeeze(1)
        if need_attn and out.attn is not None:
            if t == 0:
                attn = torch.zeros(batch, steps, out.attn.size(1), device=device)
            attn[rows, t] = out.attn.float()
        ended = tok == EOS_ID
        n_ended = int(ended.sum())
        if n_ended == rows.numel():
            break
        state, prev, order = out.state, tok, None
        if n_ended:
            keep = (~ended).nonzero().squeeze(1)
            rows, limit, prev = rows[keep], limit[keep], prev[keep]
            prefix = None if prefix is None else prefix.select(keep)
            enc, order = enc.index_select(keep), keep
    return tokens[:, : t + 1], lps[:, : t + 1], None if attn is None else attn[:, : t + 1]


def greedy(model: Translator, enc: Encoded, cfg: DecodeConfig, *,
           max_len: torch.Tensor | int, need_attn: bool = False,
           prefix: Prefix | None = None, continuing: torch.Tensor | None = None
           ) -> list[list[Hypothesis]]:
    """Greedy search for every sentence of `enc` (B rows); max_len: int or (B,) limits;
    prefix: the target ids each output starts with, and continuing (V,) (`force_prefix`).

    Uses cfg.min_len and the length penalty (cfg.length_penalty, cfg.alpha) for the score.
    Returns one single-hypothesis list per sentence, in batch order.
    """
    tokens, lps, attn = one_path_each(model, enc, lambda lp: lp.argmax(-1), max_len=max_len,
                                      min_len=cfg.min_len, need_attn=need_attn,
                                      prefix=prefix, continuing=continuing)
    hyps = to_hypotheses(tokens, lps, attn, source_lengths(enc.src_mask),
                         kind=cfg.length_penalty, alpha=cfg.alpha)
    return [[h] for h in hyps]
