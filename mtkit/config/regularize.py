"""The recipe's training regularizers that change what a batch is or how it is scored:
subword regularization (`train.subword_sampling`) and R-Drop (`train.rdrop`).

Subword regularization (Kudo 2018) trains on a different segmentation of each sentence each
time it is seen, sampled by sentencepiece from the unigram model's lattice (``alpha`` the
smoothing exponent, ``nbest_size`` -1 for the whole lattice, l > 1 for the l-best); with a BPE
model the same setting is BPE-dropout (Provilkov et al. 2020: ``alpha`` the probability of
dropping a merge). R-Drop (Liang et al. 2021) passes each batch through the model twice, with
two dropout masks, and adds the symmetric KL divergence between the two predictions.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field

if typing.TYPE_CHECKING:
    from mtkit.config.loading import Valid
    from mtkit.config.sections import Recipe


@dataclass(frozen=True)
class SubwordSamplingConfig:
    # 0 = off. Unigram: the smoothing exponent on the segmentation probabilities (lower
    # flattens them: 0.1 with the whole lattice doubles the pieces of Multi30k, 0.5 adds ~5%);
    # BPE: the probability of dropping each merge (Provilkov et al. 2020 use 0.1).
    alpha: float = field(default=0.0, metadata={"ge": 0.0})
    # Unigram only: -1 samples from the whole lattice, l > 1 from the l best segmentations.
    nbest_size: int = -1
    target: bool = False  # sample the target side too (Kudo 2018 samples both)

    @property
    def enabled(self) -> bool:
        return self.alpha > 0


@dataclass(frozen=True)
class RDropConfig:
    # Weight of the symmetric KL between the two passes (Liang et al. 2021, eq. 3's alpha;
    # they use 0.3-5 for NMT, 5 on IWSLT); 0 = off. A batch then costs two forward and
    # backward passes and twice the activation memory.
    weight: float = field(default=0.0, metadata={"ge": 0.0})

    @property
    def enabled(self) -> bool:
        return self.weight > 0


def regularize_problems(recipe: Recipe, valid: Valid) -> list[tuple[str, str]]:
    """Cross-field rules of the two sections."""
    out: list[tuple[str, str]] = []
    sw = recipe.train.subword_sampling
    if not valid("train.subword_sampling.alpha", "train.subword_sampling.nbest_size",
                 "train.subword_sampling.target", "data.spm.model_type"):
        return out
    if not sw.enabled:
        out += [(f"train.subword_sampling.{key}", "set, but alpha is 0 (sampling off): set "
                 "alpha too, or leave it out") for key, used in
                (("nbest_size", sw.nbest_size != -1), ("target", sw.target)) if used]
        return out
    if recipe.data.spm.model_type == "bpe" and sw.nbest_size != -1:
        out.append(("train.subword_sampling.nbest_size", "applies to unigram models; "
                    "BPE-dropout has alpha alone"))
    if recipe.data.spm.model_type == "bpe" and sw.alpha >= 1.0:
        out.append(("train.subword_sampling.alpha", f"{sw.alpha:g} with a BPE model is the "
                    "probability of dropping a merge: expected < 1 (0.1 is usual)"))
    if recipe.data.spm.model_type == "unigram" and not (sw.nbest_size == -1
                                                        or sw.nbest_size > 1):
        out.append(("train.subword_sampling.nbest_size", f"expected -1 (the whole lattice) or "
                    f"more than 1, got {sw.nbest_size}"))
    if recipe.train.guided_alignment.enabled and valid("train.guided_alignment.weight"):
        out.append(("train.subword_sampling.alpha", "guided alignment's links index the "
                    "prepared pieces, which sampling changes: use one of the two"))
    return out
