"""The recipe's choices about how cross-attention weights are made and used: the normaliser
(`model.attention_normalizer`, both architectures) and hard attention (`model.rnn.hard`).

Soft attention summarises the source by its weights and trains by gradient descent. Hard
attention (Xu et al. 2015, "Show, Attend and Tell", §4.1) draws one source position per
target step from those weights and uses that encoder state alone as the context; the draw has
no gradient, so the score function learns either by REINFORCE (Williams 1992), with the
target token's log-probability as the reward, a moving-average baseline and an entropy bonus
(Xu et al. eq. 12), or from the exact marginal likelihood, summed over every position the
model could attend to (Deng et al. 2018, "Latent Alignment and Variational Attention", the
"exact" model). Decoding uses the most probable position.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Literal

if typing.TYPE_CHECKING:
    from mtkit.config.loading import Valid

# softmax: dense weights; sparsemax (Martins & Astudillo 2016) and entmax15 (Peters et al.
# 2019): weights with exact zeros (see mtkit.models.normalizers).
Normalizer = Literal["softmax", "sparsemax", "entmax15"]
# none: soft attention; reinforce: sampled positions, score-function gradient; exact: the
# likelihood marginalised over positions.
Estimator = Literal["none", "reinforce", "exact"]


@dataclass(frozen=True)
class HardAttentionConfig:
    estimator: Estimator = "none"
    # REINFORCE: weight of the attention distribution's entropy in the loss (Xu et al.'s
    # lambda_e), which keeps it from collapsing early.
    entropy: float = field(default=0.0, metadata={"ge": 0.0})
    # REINFORCE: the baseline b <- decay * b + (1 - decay) * mean reward, per update.
    baseline_decay: float = field(default=0.9, metadata={"ge": 0.0, "lt": 1.0})
    # REINFORCE: share of training steps that use the soft context instead of a draw (Xu et
    # al. use 0.5).
    soft_fraction: float = field(default=0.0, metadata={"ge": 0.0, "le": 1.0})

    @property
    def enabled(self) -> bool:
        return self.estimator != "none"

    def _problems(self, valid: Valid) -> list[tuple[str, str]]:
        if not valid("estimator") or self.estimator == "reinforce":
            return []
        defaults = HardAttentionConfig()
        return [(name, f"applies to estimator: reinforce (this one is {self.estimator})")
                for name in ("entropy", "baseline_decay", "soft_fraction")
                if valid(name) and getattr(self, name) != getattr(defaults, name)]


def hard_problems(attention: str, placement: str, input_feeding: bool,
                  hard: HardAttentionConfig, valid: Valid) -> list[tuple[str, str]]:
    """model.rnn's rules for hard attention: something to draw from, and for the exact
    marginal a decoder whose steps do not feed the context forward (Luong placement without
    input feeding), so that the likelihood factorises over the target steps."""
    if not valid("hard.estimator") or not hard.enabled:
        return []
    out = []
    if valid("attention") and attention == "none":
        out.append(("hard.estimator", "needs attention to draw positions from (attention is "
                    "none)"))
    if hard.estimator == "exact" and valid("placement", "input_feeding") and (
            placement != "luong" or input_feeding):
        out.append(("hard.estimator", "exact needs placement: luong and input_feeding: false "
                    "(a context fed into later steps makes the marginal over positions "
                    "intractable)"))
    return out
