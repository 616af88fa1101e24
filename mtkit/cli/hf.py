"""`mtkit import`: a Hugging Face MarianMTModel (a folder, or a Hub id) as a run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mtkit.cli.options import HelpOpt


def import_(
    source: Annotated[str, typer.Argument(metavar="SOURCE", hidden=True, show_default=False)],
    output: Annotated[Path, typer.Option(
        "-o", "--output", metavar="RUN_DIR", show_default=False,
        help="Run directory to write: new or empty.")],
    _help: HelpOpt = False,
) -> None:
    """Import a Hugging Face MarianMTModel (the OPUS-MT models) as a run directory.

    The run is then translated, scored, aligned, served, exported and fine-tuned (train
    --init-from) as any other.

    SOURCE is a local folder (config.json, model.safetensors or pytorch_model.bin,
    source.spm, target.spm, vocab.json) or a Hub id such as Helsinki-NLP/opus-mt-en-de
    (optionally @REVISION), downloaded by huggingface_hub (pip install 'mtkit[hf]').

    Example: mtkit import Helsinki-NLP/opus-mt-en-de -o runs/opus-en-de
    """
    from mtkit.hf.importer import import_model

    done = import_model(source, output)
    origin = done.origin
    came = (f"{origin['hub_id']}@{origin['revision']}" if "hub_id" in origin
            else origin["folder"])
    tf = done.recipe.model.transformer
    typer.echo(f"mtkit: imported {came} into {done.run_dir} (Transformer {tf.enc_layers}+"
               f"{tf.dec_layers} layers, d_model {tf.d_model}, {tf.activation}; license: "
               f"{origin['license'] or 'not stated in the model card'})", err=True)
    if origin["generation_not_mapped"]:
        settings = ", ".join(f"{k}={v}" for k, v in origin["generation_not_mapped"].items())
        typer.echo(f"mtkit: note: generation settings mtkit has no field for, not used: "
                   f"{settings}", err=True)
