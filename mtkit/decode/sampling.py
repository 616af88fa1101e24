"""Ancestral sampling with temperature, top-k and nucleus (top-p) filtering, batched.

Shapes: B batch, n samples per sentence (cfg.nbest), S source length, V vocabulary.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from mtkit.config import DecodeConfig
from mtkit.decode.greedy import Chooser, one_path_each
from mtkit.decode.scoring import Hypothesis, Prefix, as_lengths, source_lengths, to_hypotheses
from mtkit.models.base import Encoded, Translator


def filter_logprobs(lp: torch.Tensor, *, temperature: float, top_k: int,
                    top_p: float) -> torch.Tensor:
    """The sampling distribution's logits: lp (B, V) -> (B, V), removed tokens at -inf.

    Temperature divides the log-probabilities (same as dividing the logits); top-k keeps the
    k likeliest tokens (Fan et al. 2018); top-p keeps the smallest set of likeliest tokens
    whose probability reaches p (Holtzman et al. 2020), always at least one.
    """
    x = lp / temperature
    if 0 < top_k < x.size(-1):
        kth = x.topk(top_k, dim=-1).values[:, -1:]
        x = x.masked_fill(x < kth, -math.inf)
    if top_p < 1.0:
        sorted_x, order = x.sort(dim=-1, descending=True)
        probs = sorted_x.softmax(-1)
        # drop a token when the tokens ranked above it already reach top_p
        drop = (probs.cumsum(-1) - probs) >= top_p
        drop[:, 0] = False
        x = x.masked_fill(drop.scatter(1, order, drop), -math.inf)
    return x


def sampler(cfg: DecodeConfig, generator: torch.Generator) -> Chooser:
    """A Chooser drawing each row's next token from the filtered distribution."""
    def choose(lp: torch.Tensor) -> torch.Tensor:
        x = filter_logprobs(lp, temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p)
        return torch.multinomial(x.softmax(-1), 1, generator=generator).squeeze(1)

    return choose


def batch_seed(seed: int, stream: int) -> int:
    """The generator seed of a batch's stream: `seed` itself for the first (stream 0; any
    integer torch takes), else one mixed from both by numpy's SeedSequence, the same in every
    Python and numpy version (unlike hash()) and within 63 bits."""
    if stream == 0 and -(2**63) <= seed < 2**63:
        return seed
    state = np.random.SeedSequence([seed % 2**64, stream]).generate_state(1, np.uint64)[0]
    return int(state) >> 1


def sample(model: Translator, enc: Encoded, cfg: DecodeConfig, *,
           max_len: torch.Tensor | int, need_attn: bool = False,
           stream: int = 0, prefix: Prefix | None = None,
           continuing: torch.Tensor | None = None) -> list[list[Hypothesis]]:
    """cfg.nbest independent samples per sentence of `enc` (B rows), sorted by score.

    Reproducible: the draws come from a torch.Generator on the model's device seeded from
    cfg.seed and `stream` (e.g. the batch's first line in the input), so the same batch with
    the same seed gives the same samples (a batch composed differently consumes the random
    stream differently), and batches of one run draw different streams: seeded with cfg.seed
    alone, the k-th sentence of every batch got the same draws (repeated input lines the
    same samples). A hard-attention model's attended positions are drawn from the same
    generator (`Translator.drawing_positions`). max_len: int or (B,) limits; prefix: the
    target ids every sample of a sentence starts with, and continuing (V,) (`force_prefix`):
    its tokens are not drawn.
    """
    batch, device, n = enc.src_mask.size(0), enc.src_mask.device, cfg.nbest
    rows = torch.arange(batch, device=device).repeat_interleave(n)  # (B*n,) sentence of row
    generator = torch.Generator(device=device).manual_seed(batch_seed(cfg.seed, stream))
    with model.drawing_positions(generator):  # hard attention's positions are drawn too
        tokens, lps, attn = one_path_each(
            model, enc.index_select(rows), sampler(cfg, generator),
            max_len=as_lengths(max_len, batch, device).index_select(0, rows),
            min_len=cfg.min_len, need_attn=need_attn,
            prefix=None if prefix is None else prefix.select(rows), continuing=continuing)
    src_lens = [s for s in source_lengths(enc.src_mask) for _ in range(n)]
    hyps = to_hypotheses(tokens, lps, attn, src_lens, kind=cfg.length_penalty, alpha=cfg.alpha)
    return [sorted(hyps[i * n:(i + 1) * n], key=lambda h: -h.score) for i in range(batch)]
