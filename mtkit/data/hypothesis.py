"""What every search returns, mtkit's own (`mtkit.decode`) and an exported model's engine
(`mtkit.export.ct2_translate`).

Free of torch at import, like everything `mtkit translate EXPORTED_DIR` loads: importing torch
takes 2.5-3.5 s on a 2-core machine, longer than the engine needs to translate a sentence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Hypothesis:
    """One output sentence.

    tokens: target ids without BOS and without the final EOS;
    token_logprobs: the model's log-probability of each token *and of the final EOS*, so
    ``len(token_logprobs) == len(tokens) + 1`` (at temperature 1, before any top-k/top-p
    filtering, so the numbers are the model's even for sampled output);
    logprob: their sum; score: logprob divided by the length penalty of
    ``len(token_logprobs)`` tokens (the value n-best lists are sorted by);
    attn: (T, S) float CPU tensor with T = len(token_logprobs) (the last row is the EOS step)
    and S the sentence's real source length (its EOS included), or None when not asked for
    or when the model has no attention. Row t is the attention of the step that produced
    token t of *this* hypothesis, followed through every beam reordering.
    """

    tokens: list[int]
    score: float
    logprob: float
    token_logprobs: list[float]
    attn: torch.Tensor | None = None
