"""The exported CTranslate2 directory: writing it (`export_ctranslate2`) and reading it back
(`load_export`). Only this module knows its layout:

  model.bin, config.json, *_vocabulary.json   CTranslate2's own files (`ModelSpec.save`)
  spm.model | spm.src.model + spm.tgt.model   the sentencepiece model(s)
  recipe.yaml                                 the checkpoint's recipe, decode section as exported
  mtkit-export.json                           what mtkit wrote here (marks a previous export)
  README.md                                   how to load it from Python and from the shell

A new directory is built beside its destination and renamed into place, so a failed export
leaves nothing half-written; an existing destination is filled in place (`write_export`),
only when it is empty or a previous mtkit export holding nothing but the files it listed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from mtkit import __version__
from mtkit.config import DecodeConfig, Recipe, dump_recipe, recipe_from_yaml_text
from mtkit.data.spm import Tokenizer, model_files
from mtkit.errors import CheckpointError, ConfigError, MtkitError
from mtkit.fileio import WriteError, hold, remove_leftovers, umask, write_error
from mtkit.run import EXPORT_MARKER

Quantization = Literal["float32", "int8", "int8_float32", "int16", "float16", "bfloat16"]
QUANTIZATIONS: tuple[str, ...] = get_args(Quantization)
MARKER = EXPORT_MARKER
# The marker's format. '/2': the engine ends each source with EOS (config.json's
# add_source_eos); mtkit before that appended one itself, and would append a second, so it
# must refuse these exports, which it does for any other format. Its own ('ctranslate2',
# the EOS left to mtkit) are still read.
FORMAT, FORMATS = "ctranslate2/2", ("ctranslate2/2", "ctranslate2")
README = "README.md"
RECIPE = "recipe.yaml"


@dataclass(frozen=True)
class Export:
    """An exported directory, read back: its recipe (decode defaults, data.max_len), its
    tokenizer, the quantization it was saved with, and each side's pieces in id order (what
    the engine's vocabulary files were checked against, and the engine is given)."""

    path: Path
    recipe: Recipe
    tokenizer: Tokenizer
    quantization: str
    src_pieces: list[str]
    tgt_pieces: list[str]
    adds_source_eos: bool  # the engine appends `</s>` (config.json; exports before did not)


def is_export(path: Path) -> bool:
    """Whether `path` is a directory that `mtkit export` wrote."""
    return path.is_dir() and (path / MARKER).is_file()


def exported_decode(cfg: DecodeConfig) -> tuple[DecodeConfig, str | None]:
    """The decode section an export keeps, and a note when it had to change: CTranslate2 has
    no GNMT penalty; its `length_penalty` p divides by |Y|^p (|Y| counting EOS), so mtkit's
    `average` is p = 1, `power` p = alpha and `none` is p = 0 (measured in
    tests/integration/test_export.py)."""
    if cfg.length_penalty != "gnmt":
        return cfg, None
    note = ("decode.length_penalty gnmt has no CTranslate2 equivalent; the export decodes with "
            "average (CTranslate2 length_penalty 1.0, the same ranking as mtkit's average)")
    return dataclasses.replace(cfg, length_penalty="average", alpha=1.0), note


def engine_length_penalty(cfg: DecodeConfig) -> float:
    """CTranslate2's `length_penalty` for mtkit's (gnmt has none: `exported_decode`)."""
    return {"average": 1.0, "power": cfg.alpha}.get(cfg.length_penalty, 0.0)


def position_rows(recipe: Recipe) -> int:
    """Sinusoid rows to export: the model's max_positions, or more when the longest output
    the decode section allows (a * data.max_len + b, plus BOS and EOS) needs more."""
    d, tf = recipe.decode, recipe.model.transformer
    longest = d.output_limit(recipe.data.max_len) + 2
    return max(tf.max_positions, longest, recipe.data.max_len + 1)


# What an export killed while it filled an existing folder leaves there: its own files, built
# in a folder inside the destination (mkdtemp's eight characters; so that each file can be
# renamed into place), or its marker's next version.
_BUILDING = re.compile(r"\.mtkit-export\.([a-z0-9_]{8}|json)\.tmp")


def check_destination(out: Path) -> set[str]:
    """The files of the previous export in `out` (none for a new or empty folder); refuse a
    folder that mtkit did not write (or wrote and then got extra files)."""
    if not out.exists():
        return set()
    if not out.is_dir():
        raise ConfigError(f"-o {out}: exists and is not a directory")
    present = {p.name for p in out.iterdir() if not _BUILDING.fullmatch(p.name)}
    if not present:
        return set()
    if MARKER not in present:
        raise ConfigError(f"-o {out}: directory is not empty and is not an mtkit export "
                          f"(no {MARKER}); give a new or empty directory")
    try:
        listed = set(json.loads((out / MARKER).read_text(encoding="utf-8"))["files"])
        if not all(isinstance(n, str) and n == Path(n).name and n not in ("", ".", "..")
                   for n in listed):
            raise TypeError
    except (ValueError, KeyError, TypeError, OSError):
        raise ConfigError(f"-o {out}: {MARKER} is unreadable; not replacing this "
                          "directory") from None
    extra = sorted(present - listed)
    if extra:
        raise ConfigError(f"-o {out}: holds files a previous export did not write "
                          f"({', '.join(extra[:3])}); not replacing it")
    return listed


def _matching_mtkit(recipe: Recipe) -> list[str]:
    """The README's section on decoding as mtkit does: length penalty, attention, limits."""
    from mtkit.align.readout import default_readout  # here: only export writes a README

    d, tf = recipe.decode, recipe.model.transformer
    heads = "mean over heads" if tf.align_head is None else f"head {tf.align_head}"
    shift = default_readout(recipe) == "shift"
    return [
        "## Decoding that matches mtkit",
        "",
        "CTranslate2's `length_penalty` p divides a hypothesis's log-probability by |Y|^p, |Y|",
        "counting the end token: mtkit's `average` is p = 1, `none` is p = 0; GNMT has no",
        "equivalent. Suppress `<pad>` and `<s>` as mtkit does. `return_attention=True` gives the",
        f"cross-attention of decoder layer {tf.align_layer} ({heads}) that "
        "`mtkit translate --align` uses.",
        *(["The model was trained with guided alignment read out by `shift`, and",
           "`mtkit translate --align` reads it so: the attention row of target piece j+1",
           "aligns piece j, and the row of `</s>` (`return_end_token=True`) the last piece."]
          if shift else []),
        "",
        f"mtkit ends each output at floor({d.max_len_a} * n) + {d.max_len_b} pieces (n: the "
        "source's pieces,",
        "`</s>` not counted) with `</s>`; the engine's `max_decoding_length` (default 256) is",
        "one limit per call, which the snippets above leave as it is: an output that runs on",
        "(a repetition) can be longer than mtkit's. `mtkit translate THIS_DIR` applies each",
        "sentence's limit.",
    ]


def _readme(recipe: Recipe, tok: Tokenizer, quantization: str, note: str | None) -> str:
    names = model_files(tok.joint)
    spm_files = ", ".join(f"`{n}`" for n in names)
    src_spm, tgt_spm = names[0], names[-1]
    d = recipe.decode
    lp = engine_length_penalty(d)
    lines = [
        f"# {recipe.name}: a CTranslate2 model exported by mtkit {__version__}",
        "",
        f"Transformer {recipe.data.src_lang} -> {recipe.data.tgt_lang}, weights {quantization}. "
        f"Sentencepiece model(s): {spm_files}. Special pieces: `<pad>` 0, `<unk>` 1, `<s>` 2 "
        "(decoder start), `</s>` 3. The engine ends every source with `</s>` (config.json's",
        "add_source_eos). Below, THIS_DIR stands for this folder's path.",
        "",
        "## With mtkit (`pip install 'mtkit[ctranslate2]'`)",
        "",
        "    mtkit translate THIS_DIR -i input.txt -o output.txt --beam 5",
        "",
        "## From Python (`pip install ctranslate2 sentencepiece`)",
        "",
        "```python",
        "import ctranslate2, sentencepiece as spm",
        "translator = ctranslate2.Translator(\"THIS_DIR\", device=\"cpu\")",
        f"src = spm.SentencePieceProcessor(model_file=\"THIS_DIR/{src_spm}\")",
        f"tgt = spm.SentencePieceProcessor(model_file=\"THIS_DIR/{tgt_spm}\")",
        "lines = [line.rstrip(\"\\n\") for line in open(\"input.txt\", encoding=\"utf-8\")]",
        "pieces = [src.encode(line, out_type=str) for line in lines]",
        f"results = translator.translate_batch(pieces, beam_size={d.beam_size}, "
        f"length_penalty={lp}, suppress_sequences=[[\"<pad>\"], [\"<s>\"]])",
        # an imported vocabulary (pieces.json) may hold pieces the target model lacks, which
        # sentencepiece leaves with their word marks: Marian's tokenizer turns those to spaces
        "print(\"\\n\".join(tgt.decode(r.hypotheses[0])"
        + (".replace(\"\\u2581\", \" \").strip()" if tok.table is not None else "")
        + " for r in results))",
        "```",
        "",
        "## From the shell, CTranslate2-translator style",
        "",
        "Pieces in, pieces out: tokenize with the sentencepiece model, translate, detokenize.",
        "`spm_encode` and `spm_decode` are sentencepiece's command line tools (`apt install",
        "sentencepiece`, `brew install sentencepiece`; the Python package does not install",
        "them):",
        "",
        f"    spm_encode --model=THIS_DIR/{src_spm} < input.txt > input.sp",
        "    python -c 'import ctranslate2; t = ctranslate2.Translator(\"THIS_DIR\"); "
        "[print(\" \".join(r.hypotheses[0])) for r in t.translate_batch("
        f"[l.split() for l in open(\"input.sp\")], beam_size={d.beam_size}, "
        f"length_penalty={lp}, suppress_sequences=[[\"<pad>\"], [\"<s>\"]])]' > output.sp",
        f"    spm_decode --model=THIS_DIR/{tgt_spm} < output.sp > output.txt",
        "",
        *_matching_mtkit(recipe),
    ]
    if note:
        lines += ["", f"Note: {note}."]
    return "\n".join(lines) + "\n"


def _write(tmp: Path, spec, recipe: Recipe, tok: Tokenizer, quantization: str,
           checkpoint: Path, note: str | None) -> dict:
    """Every file of the export into `tmp`, the marker last; returns the marker's content."""
    spec.save(str(tmp))
    tok.save(tmp)
    (tmp / RECIPE).write_text(dump_recipe(recipe), encoding="utf-8")
    (tmp / README).write_text(_readme(recipe, tok, quantization, note), encoding="utf-8")
    files = sorted(p.name for p in tmp.iterdir()) + [MARKER]
    # the checkpoint's full path: one relative to where export ran says nothing elsewhere
    meta = {"format": FORMAT, "mtkit_version": __version__,
            "checkpoint": str(checkpoint.resolve()), "quantization": quantization,
            "files": files}
    (tmp / MARKER).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return meta


def write_export(out: Path, spec, recipe: Recipe, tok: Tokenizer, *, quantization: str,
                 checkpoint: Path, note: str | None) -> None:
    """Save `spec` (already quantized) and mtkit's files into `out` (`write_folder`)."""
    write_folder(out, lambda tmp: _write(tmp, spec, recipe, tok, quantization, checkpoint,
                                         note))


def write_folder(out: Path, write: Callable[[Path], dict]) -> None:
    """Fill the folder `out` by `write(tmp)`, which writes every file of an export into the
    empty folder `tmp`, its marker last, and returns the marker's content.

    A new folder is built beside `out` and renamed into place, so a failed export leaves
    nothing. An existing one (empty, or a previous export) is filled in place, keeping the
    folder itself (a mount point cannot be replaced; its owner, group and mode are the
    user's): the files are built inside it, then renamed over the old ones. Meanwhile its
    marker lists old and new files as incomplete: a folder whose export was killed is refused
    by `translate` and taken again by `export`."""
    out = out.resolve()  # `-o .` names a folder by its parent's entry, which `.` has not
    with _writing_into(out):
        _write_export(out, write)


@contextlib.contextmanager
def _writing_into(out: Path) -> Iterator[None]:
    """Hold a lock on an existing `out` (a flock on the folder itself, no file of ours in it)
    while an export fills it: a second export at once removed the first's files in the
    making, or mixed the two."""
    if not out.is_dir():
        yield
        return
    fd = os.open(out, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WriteError(f"-o {out}: another mtkit export is writing into it; wait for it "
                             "to end") from None
        except OSError:  # a file system without flock (some NFS): unguarded, as before
            pass
        yield
    finally:
        os.close(fd)  # closing drops the lock


def _write_export(out: Path, write: Callable[[Path], dict]) -> None:
    old = check_destination(out)
    fill = out.exists()
    remove_leftovers(out.parent, out.name)  # the folder a killed export was building
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".mtkit-export." if fill else f".{out.name}.",
                                    suffix=".tmp", dir=out if fill else out.parent))
        held = os.open(tmp, os.O_RDONLY)
        hold(held)
    except (FileExistsError, NotADirectoryError):
        raise WriteError(f"-o {out}: cannot write (a parent of it is a file, not a folder)"
                         ) from None
    except OSError as e:  # named by -o, not by the temporary folder beside it
        raise write_error(f"-o {out}", e) from None
    try:
        meta = write(tmp)
        if not fill:
            os.chmod(tmp, 0o777 & ~umask())
            os.replace(tmp, out)
            return
        new = set(meta["files"])
        _write_marker(out, {**meta, "files": sorted(old | new), "complete": False})
        for name in sorted(new - {MARKER}):
            os.replace(tmp / name, out / name)
        for name in sorted(old - new - {MARKER}):
            (out / name).unlink(missing_ok=True)
        os.replace(tmp / MARKER, out / MARKER)
    except OSError as e:  # a full disk, a quota: named by -o
        raise write_error(f"-o {out}", e) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        os.close(held)
        for p in out.iterdir() if fill else ():  # what a killed export left
            if _BUILDING.fullmatch(p.name) and p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            elif _BUILDING.fullmatch(p.name):
                p.unlink(missing_ok=True)


def _write_marker(out: Path, meta: dict) -> None:
    part = out / f".{MARKER}.tmp"
    part.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    os.replace(part, out / MARKER)


def load_export(path: Path) -> Export:
    """Read back what `write_export` wrote; CheckpointError naming the file when unusable."""
    try:
        meta = json.loads((path / MARKER).read_text(encoding="utf-8"))
        if not isinstance(meta, dict):
            raise ValueError(f"{MARKER} holds no object")
        recipe = recipe_from_yaml_text((path / RECIPE).read_text(encoding="utf-8"),
                                       source=str(path / RECIPE))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: not a readable mtkit export ({e})") from None
    except MtkitError as e:
        raise CheckpointError(f"{path}: {e}") from None
    if str(meta.get("format")).startswith("hf/"):  # `mtkit.export.hf_export`'s folder
        back = (f"`mtkit import {path} -o RUN_DIR` makes it a run to translate"
                if meta.get("architecture") == "MarianMTModel" else
                f"translate with the run it came from ({meta.get('checkpoint')})")
        raise CheckpointError(f"{path}: a Hugging Face export, which transformers loads; "
                              f"{back}")
    if meta.get("format") not in FORMATS:
        raise CheckpointError(f"{path / MARKER}: format {meta.get('format')!r}; expected "
                              f"{' or '.join(map(repr, FORMATS))} (an export of another mtkit "
                              "version? export the run again)")
    if meta.get("complete") is False:
        raise CheckpointError(f"{path}: an export into this folder did not finish; export "
                              "the run again")
    files = meta.get("files")
    needed = [n for n in files if isinstance(n, str) and n != README] if isinstance(
        files, list) else []
    missing = [n for n in needed if not (path / n).is_file()]
    if missing:  # the engine's own message for a missing config.json: a JSON type error
        raise CheckpointError(f"{path}: {', '.join(missing[:3])} missing from the export; "
                              "export the run again")
    try:
        tok = Tokenizer.load(path)
    except MtkitError as e:  # its advice (run mtkit prep) is for a run's data/ folder
        raise CheckpointError(f"{path}: the export's sentencepiece model is missing or "
                              f"unreadable ({str(e).split(';')[0]}); export the run again") \
            from None
    pieces = {"src": tok.src_pieces(range(tok.src_vocab_size)),
              "tgt": tok.tgt_pieces(range(tok.tgt_vocab_size))}
    _check_vocabularies(path, pieces)
    try:  # exports before add_source_eos was set leave `</s>` to mtkit
        adds_eos = json.loads((path / "config.json").read_text(encoding="utf-8")).get(
            "add_source_eos") is True
    except (OSError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{path / 'config.json'}: unreadable ({e}); export the run "
                              "again") from None
    return Export(path, recipe, tok, str(meta.get("quantization")), pieces["src"],
                  pieces["tgt"], adds_eos)


# CTranslate2's vocabulary files (`ModelSpec.save`), and whose pieces each must list in id order
_VOCABULARIES = {"shared_vocabulary.json": ("src", "tgt"), "source_vocabulary.json": ("src",),
                 "target_vocabulary.json": ("tgt",)}


def _check_vocabularies(path: Path, pieces: dict[str, list[str]]) -> None:
    """The engine maps pieces to ids by its vocabulary files, mtkit by the sentencepiece
    models (`pieces`, each side's in id order): they must agree, or the engine fails
    mid-translation (a damaged file gave 'ValueError: Token <pad> is not in the vocabulary'
    with a traceback) or, one piece out of place, translates wrongly without a word."""
    for name, sides in _VOCABULARIES.items():
        if not (path / name).is_file():
            continue  # none at all: the engine refuses to load the folder, named then
        try:
            listed = json.loads((path / name).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise CheckpointError(f"{path / name}: unreadable ({e}); export the run again") \
                from None
        for side in sides:
            if listed == pieces[side]:
                continue
            if not isinstance(listed, list):
                why = "not a JSON list"
            else:
                pairs = zip(listed, pieces[side], strict=False)  # one may be shorter
                at = next((i for i, (a, b) in enumerate(pairs) if a != b),
                          min(len(listed), len(pieces[side])))
                why = (f"{len(listed)} entries for {len(pieces[side])} pieces, the first "
                       f"difference at id {at}")
            raise CheckpointError(f"{path / name}: does not list the export's sentencepiece "
                                  f"pieces in id order ({why}); export the run again")
