"""The recipe's guided-alignment section and the rules that tie it to the data and the model.

Guided alignment (Garg et al. 2019, "Jointly learning to align and translate with Transformer
models"; OpenNMT-py's and Marian's `guided_alignment`) adds to the translation loss a
cross-entropy between one attention distribution and word links given with the training data
(``data.train.align``, a Pharaoh file). The supervised attention is the one the model already
designates as its alignment: a Transformer's ``model.transformer.align_layer`` and
``align_head`` (the cross-attention `translate --align` returns and `mtkit export` writes as
CTranslate2's alignment layer, so what is trained is what every read-out shows), an RNN's one
attention.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Any, Literal

if typing.TYPE_CHECKING:
    from mtkit.config.loading import Valid
    from mtkit.config.sections import Recipe

# Which decoder step's attention a gold link (source word i, target word j) supervises:
# `current`, the step that predicts y_j (its input is y_{j-1}; the read-out `translate
# --align` shows as each word is emitted); `shift`, the step whose input is y_j (Chen et al.
# 2020, "Accurate word alignment induction from neural machine translation": a decoder that
# has read y_j attends to its source). The same names as `mtkit align --readout`.
Readout = Literal["current", "shift"]
READOUTS: tuple[Readout, ...] = typing.get_args(Readout)


@dataclass(frozen=True)
class GuidedAlignmentConfig:
    # Weight of the alignment cross-entropy against the (token-mean) translation loss; 0 = off.
    # Garg et al. 2019 use 0.05; Marian's default is 0.1.
    weight: float = field(default=0.0, metadata={"ge": 0.0})
    readout: Readout = "current"

    @property
    def enabled(self) -> bool:
        return self.weight > 0


def guided_problems(recipe: Recipe, valid: Valid) -> list[tuple[str, str]]:
    """Cross-field rules: alignments belong to the training split, to every corpus of it or to
    none, and exactly when guided alignment is on; the model must have attention to guide."""
    from mtkit.config.sections import split_corpora

    out: list[tuple[str, str]] = []
    data, guide = recipe.data, recipe.train.guided_alignment
    others: list[tuple[str, Any]] = [("data.valid", data.valid),
                                     *((f"data.test.{n}", t) for n, t in data.test.items())]
    if valid("data.valid", "data.test"):
        for name, split in others:
            for suffix, corpus in split_corpora(split) if split else []:
                if corpus.align is not None:
                    out.append((f"{name}{suffix}.align", "alignments are read for the "
                                "training split only (guided alignment trains on them)"))
    if not valid("data.train", "train.guided_alignment.weight") or not data.train:
        return out
    corpora = split_corpora(data.train)
    missing = [f"data.train{suffix}.align" for suffix, c in corpora if c.align is None]
    if guide.enabled and missing:
        out += [(key, "missing: train.guided_alignment.weight > 0 needs the word alignment of "
                 "every training corpus (a Pharaoh file of i-j links, one line per pair)")
                for key in missing]
    elif missing and len(missing) < len(corpora):
        out += [(key, "missing: some training corpora name an alignment, so every one must")
                for key in missing]
    elif not guide.enabled and not missing:  # the keys named: a --set of one is blamed
        named = ", ".join(f"data.train{suffix}.align" for suffix, _ in corpora)
        out.append(("train.guided_alignment.weight", f"is 0 (off), but the training split "
                    f"names alignments ({named}): set a weight (Garg et al. 2019 use 0.05) or "
                    "drop `align`"))
    if not (guide.enabled and valid("model.arch") and recipe.model.arch == "rnn"):
        return out
    if valid("model.rnn.attention") and recipe.model.rnn.attention == "none":
        out.append(("train.guided_alignment.weight", "model.rnn.attention is none: the model "
                    "has no attention to guide"))
    if valid("model.rnn.hard") and recipe.model.rnn.hard.enabled:
        out.append(("train.guided_alignment.weight", "model.rnn.hard.estimator is "
                    f"{recipe.model.rnn.hard.estimator}: a hard-attention step attends to one "
                    "drawn position, whose one-hot row gives the scores no gradient to guide"))
    # An RNN's one attention is the context of the word its step predicts: pulled to the
    # previous word's source it either does not learn that (Bahdanau GRU, synthetic
    # permutation task: AER 0.26) or leaves the model nothing to translate with (Luong GRU:
    # exact match 0.5% against 99.5% unguided).
    if valid("train.guided_alignment.readout") and guide.readout == "shift":
        out.append(("train.guided_alignment.readout", "shift needs a Transformer: an RNN's one "
                    "attention gives the context of the word its step predicts; use current"))
    return out
