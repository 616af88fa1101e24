"""`mtkit export`: a trained checkpoint to an inference engine's directory."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from mtkit.errors import ConfigError, OptionError, Problem
from mtkit.export.ct2_dir import QUANTIZATIONS, exported_decode, position_rows, write_export

# The engines `mtkit export` writes for: CTranslate2's directory, or Hugging Face transformers'
# folder (`mtkit.export.hf_export`).
Engine = Literal["ctranslate2", "hf"]
ENGINES: tuple[str, ...] = get_args(Engine)


@dataclass(frozen=True)
class ExportReport:
    """What was exported where; `note` says what of the recipe the engine could not keep."""

    checkpoint: Path
    out: Path
    quantization: str
    note: str | None


def check_request(engine: str, quantization: str) -> None:
    """The engine and quantization choices, validated before anything is loaded."""
    problems = []
    if engine not in ENGINES:
        problems.append(Problem("engine", f"invalid choice {engine!r}; expected one of "
                                f"{', '.join(ENGINES)}"))
    if engine == "hf" and quantization != "float32":
        problems.append(Problem("quantization", "the hf engine writes float32 weights "
                                "(quantize in transformers, or export for ctranslate2)",
                                value=quantization))
    elif quantization not in QUANTIZATIONS:
        problems.append(Problem("quantization", f"invalid choice {quantization!r}; expected one "
                                f"of {', '.join(QUANTIZATIONS)}"))
    if problems:
        raise OptionError(*problems)


def export_ctranslate2(source: Path, out: Path, *, quantization: str = "float32"
                       ) -> ExportReport:
    """Export the checkpoint `source` (or a run directory's best.pt, else last.pt) into the
    directory `out` for CTranslate2, with weights stored as `quantization`."""
    from mtkit.export.ct2_dir import check_destination
    from mtkit.export.ct2_spec import Vocabularies, transformer_spec
    from mtkit.export.engine import ctranslate2
    from mtkit.run import load_model, resolve_checkpoint

    check_request("ctranslate2", quantization)
    ctranslate2()  # a missing engine is reported before the model is loaded
    check_destination(out)
    ckpt = resolve_checkpoint(source)
    model, recipe, tok = load_model(ckpt, "cpu")
    if recipe.model.arch != "transformer":
        raise ConfigError(f"{ckpt}: model.arch is {recipe.model.arch}; CTranslate2 runs "
                          "Transformers only. Translate this model with `mtkit translate "
                          f"{source}` instead")
    if recipe.model.attention_normalizer != "softmax":  # CTranslate2's attention is softmax
        raise ConfigError(f"{ckpt}: model.attention_normalizer is "
                          f"{recipe.model.attention_normalizer}; CTranslate2 normalises "
                          f"attention by softmax only. Translate this model with `mtkit "
                          f"translate {source}` instead")
    vocab = Vocabularies(tok.src_pieces(range(tok.src_vocab_size)),
                         tok.tgt_pieces(range(tok.tgt_vocab_size)))
    spec = transformer_spec(model, recipe.model.transformer, vocab,
                            position_rows=position_rows(recipe))
    spec.validate()
    spec.optimize(quantization=None if quantization == "float32" else quantization)
    decode, note = exported_decode(recipe.decode)
    recipe = dataclasses.replace(recipe, decode=decode)
    write_export(out, spec, recipe, tok, quantization=quantization, checkpoint=ckpt, note=note)
    return ExportReport(ckpt, out, quantization, note)
