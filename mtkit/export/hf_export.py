"""`mtkit export --engine hf`: a run's checkpoint as a Hugging Face transformers folder, which
`from_pretrained` loads and `mtkit import` reads back. Only this module knows its layout:

  model.safetensors, config.json      the model, in the class `hf_layout` chose for it
  generation_config.json              the run's decoding defaults in transformers' terms
  source.spm, target.spm, vocab.json  MarianTokenizer's files (target_vocab.json too for
  tokenizer_config.json               separate vocabularies): sentencepiece pieces to ids
  recipe.yaml                         the checkpoint's recipe: how the model was trained
  README.md                           a model card with the front matter the Hub reads
  mtkit-export.json                   what mtkit wrote here (marks a previous export)

The tokenizer is MarianTokenizer whatever the model's class: it maps sentencepiece pieces to
ids by vocab.json and ends each source with `</s>`, as mtkit does, and is the one class of
transformers that reads a plain sentencepiece model with a vocabulary of its own ids.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from mtkit import __version__
from mtkit.config import DecodeConfig, Recipe, dump_recipe
from mtkit.data.spm import Tokenizer, model_files
from mtkit.errors import MtkitError
from mtkit.export.ct2_dir import MARKER, check_destination, write_folder
from mtkit.export.ct2_export import ExportReport
from mtkit.export.hf_card import model_card, score_cached
from mtkit.export.hf_layout import HfModel
from mtkit.models.vocab import BOS_ID, EOS_ID, PAD_ID

FORMAT = "hf/1"  # the marker's format
WEIGHTS = "model.safetensors"
INSTALL_HINT = "pip install 'mtkit[hf]'"


class MissingSafetensorsError(MtkitError):
    """safetensors, which writes the weights, is not installed."""


def _save_file():
    try:
        from safetensors.torch import save_file
    except ModuleNotFoundError:
        raise MissingSafetensorsError("the Hugging Face export writes its weights with "
                                      f"safetensors, which is not installed: `{INSTALL_HINT}`"
                                      ) from None
    return save_file


def export_hf(source: Path, out: Path) -> ExportReport:
    """Export the checkpoint `source` (or a run directory's model) into the folder `out` in
    the Hugging Face layout, float32. ConfigError naming the field when no class holds the
    model; nothing is written then."""
    from mtkit.export.hf_layout import hf_class, hf_model
    from mtkit.run import checkpoint_recipe, load_model, resolve_checkpoint
    from mtkit.score.split_translation import cached_translations

    save_file = _save_file()
    check_destination(out)
    ckpt = resolve_checkpoint(source)
    hf_class(checkpoint_recipe(ckpt))  # refused before the weights are read
    model, recipe, tok = load_model(ckpt, "cpu")
    hf = hf_model(model, recipe)
    generation, note = generation_config(recipe.decode, hf, data_max_len=recipe.data.max_len)
    scores = score_cached(cached_translations(ckpt.parent, ckpt))

    def write(tmp: Path) -> dict:
        save_file(hf.weights, str(tmp / WEIGHTS), metadata={"format": "pt"})
        _json(tmp / "config.json", hf.config)
        _json(tmp / "generation_config.json", generation)
        _tokenizer_files(tmp, tok, recipe)
        (tmp / "recipe.yaml").write_text(dump_recipe(recipe), encoding="utf-8")
        (tmp / "README.md").write_text(model_card(recipe, hf, scores, note=note),
                                       encoding="utf-8")
        files = sorted(p.name for p in tmp.iterdir()) + [MARKER]
        meta = {"format": FORMAT, "mtkit_version": __version__,
                "checkpoint": str(ckpt.resolve()), "architecture": hf.architecture,
                "files": files}
        _json(tmp / MARKER, meta)
        return meta

    write_folder(out, write)
    return ExportReport(ckpt, out, "float32", note)


def _json(path: Path, obj: Any) -> None:
    obj = {k: v for k, v in obj.items() if v is not None} if isinstance(obj, dict) else obj
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def generation_config(d: DecodeConfig, hf: HfModel, *, data_max_len: int
                      ) -> tuple[dict[str, Any], str | None]:
    """generation_config.json for the decode section `d`, and a note when a choice has no
    equivalent. transformers' `length_penalty` p divides a finished hypothesis's
    log-probability by its length^p: mtkit's `average` is p = 1, `none` p = 0; with
    early_stopping it stops once K hypotheses have ended, as mtkit does (bench/RESULTS.md,
    "Beam search on an imported Marian model vs transformers"). PAD and BOS are
    suppressed as mtkit's search bans them; `max_length` counts the decoder's start token, and
    the output at it ends with `</s>` (forced_eos_token_id), as mtkit's ends at its limit."""
    note = None
    if d.length_penalty == "gnmt":
        note = ("decode.length_penalty gnmt has no transformers equivalent; "
                "generation_config.json uses length_penalty 1.0 (mtkit's average)")
    beam = d.method == "beam"
    out: dict[str, Any] = {
        "decoder_start_token_id": hf.config["decoder_start_token_id"], "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID, "pad_token_id": PAD_ID, "forced_eos_token_id": EOS_ID,
        "suppress_tokens": [PAD_ID, BOS_ID], "num_beams": d.beam_size if beam else 1,
        "do_sample": d.method == "sample",
        "max_length": min(d.output_limit(data_max_len) + 2, hf.max_positions),
    }
    if beam:  # early_stopping: done once K hypotheses have ended, as mtkit's beam is
        out["length_penalty"] = 0.0 if d.length_penalty == "none" else 1.0
        out["early_stopping"] = True
    if d.min_len:
        out["min_new_tokens"] = d.min_len
    if d.method == "sample":
        out.update(temperature=d.temperature, top_k=d.top_k, top_p=d.top_p)
    return out, note


def _tokenizer_files(tmp: Path, tok: Tokenizer, recipe: Recipe) -> None:
    """MarianTokenizer's files: the sentencepiece model(s) as source.spm and target.spm, each
    side's pieces to ids (vocab.json, and target_vocab.json when the sides' ids differ)."""
    spm_dir = tmp / ".spm"
    spm_dir.mkdir()
    tok.save(spm_dir)
    names = model_files(tok.joint)
    (spm_dir / names[0]).rename(tmp / "source.spm")
    if tok.joint:
        shutil.copyfile(tmp / "source.spm", tmp / "target.spm")
    else:
        (spm_dir / names[1]).rename(tmp / "target.spm")
    shutil.rmtree(spm_dir)  # what else `save` wrote (a piece table): vocab.json holds it
    src = tok.src_pieces(range(tok.src_vocab_size))
    tgt = tok.tgt_pieces(range(tok.tgt_vocab_size))
    _json(tmp / "vocab.json", {p: i for i, p in enumerate(src)})
    if tgt != src:
        _json(tmp / "target_vocab.json", {p: i for i, p in enumerate(tgt)})
    _json(tmp / "tokenizer_config.json", {
        "tokenizer_class": "MarianTokenizer", "source_lang": recipe.data.src_lang,
        "target_lang": recipe.data.tgt_lang, "unk_token": "<unk>", "eos_token": "</s>",
        "pad_token": "<pad>", "separate_vocabs": tgt != src,
        # mtkit truncates a source to data.max_len pieces, then ends it with </s>
        "model_max_length": recipe.data.max_len + 1})
