"""`mtkit import`: a MarianMTModel (a local folder, or a Hub id downloaded by huggingface_hub)
as an ordinary mtkit run directory:

- ``recipe.yaml``: the architecture in mtkit's own fields (`mtkit.hf.marian`), the generation
  defaults as its ``decode`` section, and a comment saying where it came from;
- ``best.pt``: a model-only checkpoint (as `mtkit average` writes), which translate, score,
  align, serve, export and ``train --init-from`` take as any run's model;
- ``data/``: the sentencepiece models and the piece table (`mtkit.data.pieces`), which
  ``data.spm.from_run`` reuses to prepare a corpus for fine-tuning;
- ``origin.json``: the Hub id and revision or the folder, each file's sha256, the license the
  model card states, and the generation settings mtkit has no field for.

Everything is read and checked first and written into a staging folder that becomes the run
directory only when complete: a failure leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtkit import __version__
from mtkit.config import Recipe, dump_recipe, recipe_from_dict
from mtkit.data.spm import Tokenizer
from mtkit.errors import MtkitError
from mtkit.fileio import umask
from mtkit.hf import hub
from mtkit.hf.folder import MarianFiles, read_folder, spm_model_type
from mtkit.hf.marian import (
    ModelFolderError,
    check_positions,
    marian_ids,
    to_mtkit,
    transformer_fields,
)
from mtkit.models.build import build_model
from mtkit.models.embedding import sinusoids
from mtkit.run import BEST, DATA_DIR, RECIPE, RECIPE_HEADER, save_checkpoint, vocab_info

ORIGIN = "origin.json"
_ORIGIN_FORMAT = 1
# Generation settings that are bookkeeping, or that mtkit's searches do as transformers does
# (the end token forced at the length limit; the padding symbol, which mtkit never produces).
_SAME = {"_from_model_config", "transformers_version", "decoder_start_token_id", "eos_token_id",
         "pad_token_id", "bos_token_id", "forced_eos_token_id", "use_cache", "output_attentions",
         "output_hidden_states", "output_scores", "return_dict_in_generate", "early_stopping",
         "num_return_sequences"}


@dataclass(frozen=True)
class Imported:
    """What `import_model` wrote: the run directory, its recipe, the origin record."""

    run_dir: Path
    recipe: Recipe
    origin: dict[str, Any]


def import_model(source: str, run_dir: Path) -> Imported:
    """Import `source` (a folder, or a Hub id when no such folder exists) into `run_dir`, a
    folder that must not exist or be empty."""
    _check_destination(run_dir)
    folder = Path(source).expanduser()
    if folder.exists() or not hub.is_hub_id(source):
        files, where = read_folder(folder), {"folder": str(folder.resolve())}
    else:
        path, repo, revision = hub.download(source)
        files, where = read_folder(path), {"hub_id": repo, "revision": revision}
    fields = transformer_fields(files.config)
    ids = marian_ids(files.config, files.vocab, files.target_vocab)
    check_positions(files.weights, sinusoids(fields["max_positions"], fields["d_model"],
                                             halves=True))
    weights = to_mtkit(files.weights, fields, ids,
                       tied_output=bool(files.config.get("tie_word_embeddings", True)))
    joint = files.source_spm == files.target_spm
    tok = Tokenizer(files.source_spm, None if joint else files.target_spm, table=ids.table)
    decode, unmapped = decode_fields(files.generation, files.config)
    recipe = _recipe(files, fields, decode, name=run_dir.name, shared=ids.table.shared,
                     vocab_size=tok.src_vocab_size)
    try:
        model = build_model(recipe.model, tok.src_vocab_size, tok.tgt_vocab_size,
                            weights=weights)
    except RuntimeError as e:
        detail = next((ln.strip() for ln in str(e).splitlines()[1:] if ln.strip()), str(e))
        raise ModelFolderError(f"{files.root}: the weights do not fit the architecture "
                               f"config.json describes ({detail[:200]})") from None
    origin = {"format": _ORIGIN_FORMAT, "imported_by": f"mtkit {__version__}", **where,
              "architecture": "MarianMTModel", "license": files.license,
              "files": dict(sorted(files.digests.items())),
              "generation_not_mapped": unmapped}
    text = _recipe_text(recipe, where)
    state = {"recipe": dump_recipe(recipe), "vocab": vocab_info(tok),
             "model": model.state_dict(), "imported_from": where}
    _write(run_dir, text, state, tok, origin)
    return Imported(run_dir, recipe, origin)


def _check_destination(run_dir: Path) -> None:
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise MtkitError.about("output", "exists and is not an empty folder; import into a new "
                               "folder (mtkit replaces only what it wrote)", value=run_dir)
    # the folders to be made above it: the first that exists must be a folder
    above = next(p for p in run_dir.absolute().parents if p.exists())
    if not above.is_dir():
        raise MtkitError.about("output", f"cannot be made: {above} is a file, not a folder",
                               value=run_dir)


def decode_fields(generation: dict[str, Any], config: dict[str, Any]
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """`DecodeConfig` fields for transformers' generation defaults (generation_config.json,
    else config.json, where older models keep them), and the settings left unmapped.

    transformers' lengths count the decoder's start token: max_length L allows L - 2 tokens
    before the end token (which is forced at the limit, as mtkit forces it), min_length m
    bans the end token before m - 1 tokens. Its length penalty p divides a finished
    hypothesis's log-probability by |Y|^p, |Y| counting the end token: mtkit's `power` with
    alpha p (`average` for p = 1, `none` for p = 0)."""
    def get(key: str, default: Any = None) -> Any:
        if key in generation:
            return generation[key]
        return config.get(key, default)

    out: dict[str, Any] = {}
    unmapped: dict[str, Any] = {}
    beams = int(get("num_beams", 1) or 1)
    if get("do_sample", False):
        out["method"] = "sample"
        for key in ("temperature", "top_p"):
            if get(key) is not None:
                out[key] = float(get(key))
        if get("top_k") is not None:
            out["top_k"] = int(get("top_k"))
    else:
        out["method"] = "beam" if beams > 1 else "greedy"
        out["beam_size"] = beams
    if get("max_new_tokens") is not None:
        out["max_len_a"], out["max_len_b"] = 0.0, max(1, int(get("max_new_tokens")) - 1)
    elif get("max_length") is not None:
        out["max_len_a"], out["max_len_b"] = 0.0, max(1, int(get("max_length")) - 2)
    if get("min_length"):
        out["min_len"] = max(0, int(get("min_length")) - 1)
    penalty = float(get("length_penalty", 1.0))
    if penalty == 1.0:
        out["length_penalty"] = "average"
    elif penalty == 0.0:
        out["length_penalty"] = "none"
    elif 0.0 < penalty <= 10.0:  # decode.alpha's range
        out["length_penalty"], out["alpha"] = "power", penalty
    else:
        out["length_penalty"] = "average"
        unmapped["length_penalty"] = penalty
    # the padding and start symbols: mtkit's searches never produce them (`mtkit.hf.marian`)
    never = {config.get("pad_token_id"), config.get("decoder_start_token_id",
                                                    config.get("pad_token_id"))} - {None}
    for key, value in generation.items():
        if key in _SAME or key in out or value is None or key in (
                "num_beams", "do_sample", "max_length", "max_new_tokens", "min_length",
                "length_penalty", "temperature", "top_k", "top_p"):
            continue
        if _only_ids(value, never, nested=key == "bad_words_ids") and key in (
                "bad_words_ids", "suppress_tokens"):
            continue  # what transformers bans there, mtkit never produces
        unmapped[key] = value
    return out, unmapped


def _only_ids(value: Any, ids: set[int], *, nested: bool) -> bool:
    """Whether `value` lists only ids in `ids`: [i, ...], or with nested [[i], ...] (banned
    sequences of one token each)."""
    if not isinstance(value, list) or not value:
        return False
    if nested:
        return all(isinstance(w, list) and len(w) == 1 and w[0] in ids for w in value)
    return all(i in ids for i in value)


def _recipe(files: MarianFiles, fields: dict[str, Any], decode: dict[str, Any], *,
            name: str, shared: bool, vocab_size: int) -> Recipe:
    """The run's recipe, validated as any recipe is (a model's: no corpora)."""
    kind = spm_model_type(files.source_spm)
    tok = files.tokenizer
    raw = {
        "name": re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip(".-") or "imported",
        "data": {"src_lang": str(tok.get("source_lang") or "src"),
                 "tgt_lang": str(tok.get("target_lang") or "tgt"),
                 "spm": {"model_type": {2: "bpe"}.get(kind, "unigram"),
                         "vocab_size": vocab_size, "joint": shared},
                 "max_len": max(2, fields["max_positions"] - 1)},
        "model": {"arch": "transformer", "transformer": fields},
        "decode": decode,
    }
    if kind not in (1, 2, None):
        raise ModelFolderError(f"{files.root}: its sentencepiece models are of type {kind} "
                               "(word or char); mtkit reads unigram and bpe models")
    return recipe_from_dict(raw, source=f"{files.root} (as an mtkit recipe)", corpora=False)


def _recipe_text(recipe: Recipe, where: dict[str, Any]) -> str:
    came = (f"the Hugging Face Hub: {where['hub_id']} at revision {where['revision']}"
            if "hub_id" in where else f"the folder {where['folder']}")
    return (f"{RECIPE_HEADER}\n# Imported by `mtkit import` from {came} (a MarianMTModel; "
            f"{ORIGIN} holds each file's sha256 and the license).\n{dump_recipe(recipe)}")


def _write(run_dir: Path, recipe_text: str, state: dict[str, Any], tok: Tokenizer,
           origin: dict[str, Any]) -> None:
    """The run directory, complete, or nothing (a staging folder renamed into place)."""
    parent = run_dir.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{run_dir.name}.import-", dir=parent))
    try:
        (staging / DATA_DIR).mkdir()
        tok.save(staging / DATA_DIR)
        save_checkpoint(staging / BEST, state)
        (staging / RECIPE).write_text(recipe_text, encoding="utf-8")
        (staging / ORIGIN).write_text(json.dumps(origin, indent=1, ensure_ascii=False) + "\n",
                                      encoding="utf-8")
        mode = 0o777 & ~umask()
        os.chmod(staging, mode)  # mkdtemp makes it private; a run directory is not
        os.replace(staging, run_dir)  # an empty folder is replaced; a full one refused
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
