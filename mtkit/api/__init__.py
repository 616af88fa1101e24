"""mtkit's Python API: load a trained model once, translate many times (`load`,
`TranslationModel`), with the typed results of `results`; several models routed by language
(`load_many`, `ModelSet`). Importing it does not import torch: that happens when a run or
checkpoint is loaded (an export never needs it)."""

from mtkit.api.many import ModelSet, Routed, load_many
from mtkit.api.model import (
    Extras,
    ModelInfo,
    TranslationModel,
    decode_options,
    load,
    open_model,
)
from mtkit.api.results import Attention, AttentionMatrix, Candidate, Translation

__all__ = ["Attention", "AttentionMatrix", "Candidate", "Extras", "ModelInfo", "ModelSet",
           "Routed", "Translation", "TranslationModel", "decode_options", "load", "load_many",
           "open_model"]
