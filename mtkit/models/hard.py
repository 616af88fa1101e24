"""Hard attention for the RNN decoders: one source position per target step as the context.

Shapes: B batch, T target steps scored at once (1 when stepping), S source length, Hm memory
size, V target vocabulary.

The attention distribution p(z_t | x, y_<t) (any score function, any normaliser) is the
prior over the position z_t; the context is the encoder state at z_t alone (Xu et al. 2015,
"Show, Attend and Tell", §4.1). Outside training z_t is the most probable position, and the
weights a step returns are its one-hot row, so search, alignment and heatmaps show the
position the word was made from; ancestral sampling (`--sample`) draws it from the prior
instead, from the search's own seeded generator (`HardAttention.drawing`). In training, by
`mtkit.config.attention.Estimator`:

- reinforce: z_t is drawn from the prior. The draw has no gradient, so the score function
  learns from the surrogate -(r_t - b) log p(z_t) - lambda_e H(p(. | x, y_<t)), whose
  gradient is REINFORCE's estimate (Williams 1992; Xu et al. eq. 12) of the gradient of
  E_z[log p(y_t | z_t, ...)]: the reward r_t is the target token's log-probability (its
  own step's: where the context also feeds later steps, Bahdanau placement or input
  feeding, its effect on them is left out), b a moving average of the reward, and the entropy
  bonus keeps the prior from collapsing early. With `soft_fraction`, that share of steps uses
  the soft context instead (Xu et al., §4.1), trained by ordinary back-propagation.
- exact: the decoder (see `LuongDecoder.marginal`) scores every position's context and
  returns the marginal log p(y_t) = log sum_z p(z_t = z) p(y_t | z, ...) as its logits (Deng
  et al. 2018, "Latent Alignment and Variational Attention", the "exact" model).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from mtkit.config.attention import HardAttentionConfig
from mtkit.models.vocab import PAD_ID


class Draw(NamedTuple):
    """The positions of T steps: prior (B, T, S) the attention distribution; index (B, T)
    the position used; drawn (B, T) bool, True where the context is that position's state
    (False: the soft context, on `soft_fraction` of the training steps)."""

    prior: torch.Tensor
    index: torch.Tensor
    drawn: torch.Tensor

    def shown(self) -> torch.Tensor:
        """(B, T, S): the one-hot row of each step's position; the prior where the step
        used the soft context."""
        one_hot = F.one_hot(self.index, self.prior.size(-1)).to(self.prior.dtype)
        return torch.where(self.drawn.unsqueeze(-1), one_hot, self.prior)

    @staticmethod
    def cat(draws: list[Draw]) -> Draw:
        """Draws of consecutive steps joined along T."""
        return Draw(*(torch.cat(parts, dim=1) for parts in zip(*draws, strict=True)))


def safe_log(p: torch.Tensor, zero: float = 0.0) -> torch.Tensor:
    """log p where p > 0, else `zero` (0 for p log p terms, -inf for a log-prior), with a
    zero gradient there: sparse normalisers put exact zeros, whose log's gradient is inf."""
    return torch.where(p > 0, p, 1.0).log().masked_fill(p <= 0, zero)


class HardAttention(nn.Module):
    """How a hard-attention decoder picks positions and what its training adds to the loss."""

    def __init__(self, cfg: HardAttentionConfig) -> None:
        super().__init__()
        assert cfg.enabled, "HardAttention with estimator none"
        self.estimator = cfg.estimator
        self.entropy = cfg.entropy
        self.decay = cfg.baseline_decay
        self.soft_fraction = cfg.soft_fraction
        # The moving-average reward; NaN until the first update, which then starts it at
        # that update's mean. Not saved: a resumed run starts it again.
        self.register_buffer("baseline", torch.full((), float("nan")), persistent=False)
        # Set while a sampling search decodes (`drawing`): its positions come from here.
        self.generator: torch.Generator | None = None

    @property
    def samples(self) -> bool:
        """True when positions are drawn (REINFORCE training), else they are the argmax."""
        return self.training and self.estimator == "reinforce"

    @contextmanager
    def drawing(self, generator: torch.Generator) -> Iterator[None]:
        """Outside training, draw each step's position from the prior with `generator`
        (ancestral sampling of the whole latent path, as of the words) instead of taking
        the argmax; the weights a step returns are still the drawn position's one-hot."""
        self.generator = generator
        try:
            yield
        finally:
            self.generator = None

    def context(self, prior: torch.Tensor, memory: torch.Tensor
                ) -> tuple[torch.Tensor, Draw]:
        """prior (B, T, S), memory (B, S, Hm) -> context (B, T, Hm), the draw."""
        b, t, s = prior.shape
        if self.samples:
            index = torch.multinomial(prior.detach().flatten(0, 1).float(), 1).view(b, t)
            drawn = torch.rand(b, t, device=prior.device) >= self.soft_fraction
        elif self.generator is not None and not self.training:
            index = torch.multinomial(prior.detach().flatten(0, 1).float(), 1,
                                      generator=self.generator).view(b, t)
            drawn = torch.ones(b, t, dtype=torch.bool, device=prior.device)
        else:
            index = prior.argmax(dim=-1)
            drawn = torch.ones(b, t, dtype=torch.bool, device=prior.device)
        ctx = memory.gather(1, index.unsqueeze(-1).expand(-1, -1, memory.size(-1)))
        if self.samples and self.soft_fraction > 0:
            ctx = torch.where(drawn.unsqueeze(-1), ctx, torch.bmm(prior, memory))
        return ctx, Draw(prior, index, drawn)

    def reinforce(self, logits: torch.Tensor, draw: Draw
                  ) -> Callable[[torch.Tensor], torch.Tensor]:
        """The REINFORCE term of a teacher-forced pass (logits (B, T, V) from the drawn
        contexts): a function of the targets (B, T), PAD where padded, to a 0-d sum over
        their tokens whose value is 0 and whose gradient is the surrogate's (module doc), so
        that the loss the trainer reports stays the translation loss. It advances the
        baseline once per call."""

        def term(target: torch.Tensor) -> torch.Tensor:
            real = target != PAD_ID
            with torch.no_grad():
                # log p(y_t) without a (B, T, V) log-softmax: the logit less the logsumexp
                z = logits.detach().float()
                reward = z.gather(-1, target.unsqueeze(-1)).squeeze(-1) - z.logsumexp(-1)
                used = real & draw.drawn
                mean = (reward * used).sum() / used.sum().clamp_min(1)
                base = torch.where(self.baseline.isnan(), mean, self.baseline)
                self.baseline.copy_(self.decay * base + (1 - self.decay) * mean)
            log_pz = safe_log(draw.prior.float()).gather(-1, draw.index.unsqueeze(-1))
            surrogate = -((reward - base) * log_pz.squeeze(-1) * used).sum()
            if self.entropy > 0:
                p = draw.prior.float()
                entropy = -(p * safe_log(p)).sum(-1)  # (B, T)
                surrogate = surrogate - self.entropy * (entropy * real).sum()
            return surrogate - surrogate.detach()

        return term
