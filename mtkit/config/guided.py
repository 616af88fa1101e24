"""The recipe's guided-alignment section (the rules that tie it to the data and the model,
`guided_problems`, are the recipe's: `mtkit.config.sections`).

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
from typing import Literal

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
