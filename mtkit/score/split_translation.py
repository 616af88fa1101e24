"""The translations of a run's validation and test splits kept in the run (`mtkit score
--run`, `mtkit.api.splits.translate_split`): RUN_DIR/translations/, each translation reused
while its key file says that checkpoint, source, decoding and the file itself are unchanged.
No model here: what makes a translation opens one through `mtkit.api`, and the export's model
card reads what is cached."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtkit.config import DecodeConfig, recipe_to_dict
from mtkit.errors import CheckpointError, DataError

if TYPE_CHECKING:
    from mtkit.translation.lines import TranslateStats


@dataclass(frozen=True)
class SplitTranslation:
    """The translation of a run's split: `path` (RUN_DIR/translations/NAME.TAG.txt), the
    split's `source` and `reference` text, the checkpoint and decoding used, and the stats of
    the translation (None when an up-to-date file was reused)."""

    path: Path
    source: Path
    reference: Path
    checkpoint: Path
    cfg: DecodeConfig
    stats: TranslateStats | None


def split_texts(run_dir: Path, split: str) -> tuple[Path, Path]:
    """The source and reference text that `mtkit prep` kept for a validation or test split."""
    from mtkit.data.store import text_path
    from mtkit.run import data_dir

    ddir = data_dir(run_dir)
    src, ref = text_path(ddir, split, "src"), text_path(ddir, split, "tgt")
    if not (src.is_file() and ref.is_file()):
        have = sorted(p.name.removesuffix(".src.txt") for p in ddir.glob("*.src.txt"))
        raise DataError.about("split", f"{ddir} has no {src.name} and {ref.name}; splits with "
                              f"text there: {', '.join(have) or 'none (run mtkit prep first)'}",
                              value=split)
    return src, ref


def decode_tag(cfg: DecodeConfig) -> str:
    """A file-name tag for a decoding: 'beam5', 'greedy' or 'sample', then a short hash of every
    option that can change the output (the batch size cannot)."""
    options = json.dumps(_output_options(cfg), sort_keys=True)
    digest = hashlib.sha256(options.encode()).hexdigest()[:8]
    name = f"beam{cfg.beam_size}" if cfg.method == "beam" else cfg.method
    return f"{name}-{digest}"


def split_run(run: Path) -> tuple[Path, Path]:
    """(run directory, checkpoint) of a run directory (its best checkpoint, else its last)
    or of a checkpoint file in one (`mtkit average`'s averaged.pt, a numbered one)."""
    from mtkit.run import data_dir, resolve_checkpoint

    ckpt = resolve_checkpoint(run)
    if Path(run).is_dir():
        return Path(run), ckpt
    if not data_dir(ckpt.parent).is_dir():
        raise DataError.about("run", "not in a run directory (no data/ folder beside it); {0} "
                              "needs a run's prepared splits: give the run directory or a "
                              "checkpoint in it", value=run, others=("run",))
    return ckpt.parent, ckpt


def translation_key(ckpt: Path, src: Path, cfg: DecodeConfig) -> dict[str, Any]:
    """What a cached translation depends on: the checkpoint's and the source's bytes, and
    every decoding option that can change the output."""
    from mtkit.data.sources import sha256_file

    return {"checkpoint_sha256": sha256_file(ckpt), "source_sha256": sha256_file(src),
            "decode": _output_options(cfg)}


def _output_options(cfg: DecodeConfig) -> dict[str, Any]:
    """The decoding options that can change a translation (the batch size cannot)."""
    return {k: v for k, v in recipe_to_dict(cfg).items() if k != "batch_tokens"}


def read_key(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class CachedTranslation:
    """A translation in RUN_DIR/translations/ that its key file proves current: made by the
    checkpoint in question from the split's present source, unedited since."""

    split: str
    path: Path
    reference: Path
    decode: dict[str, Any]  # the decoding options that made it (`_output_options`)


def cached_translations(run_dir: Path, ckpt: Path) -> list[CachedTranslation]:
    """Every current translation of `run_dir`'s splits by `ckpt` (what `translate_split`
    would reuse), in file-name order; the checkpoint is hashed once."""
    from mtkit.data.sources import sha256_file
    from mtkit.run import resolve_checkpoint

    try:
        own = ckpt.resolve() == resolve_checkpoint(run_dir).resolve()
    except CheckpointError:
        own = False
    folder = run_dir / "translations" / ("" if own else ckpt.stem)
    found, ckpt_sha = [], None
    for out in sorted(folder.glob("*.txt")):
        key = read_key(out.with_name(out.name + ".key"))
        split = out.name.split(".", 1)[0]
        try:
            src, ref = split_texts(run_dir, split)
        except DataError:  # a split the data no longer has
            continue
        if not isinstance(key, dict) or key.get("translation_sha256") != sha256_file(out):
            continue
        ckpt_sha = ckpt_sha or sha256_file(ckpt)
        if key.get("checkpoint_sha256") == ckpt_sha and key.get(
                "source_sha256") == sha256_file(src) and isinstance(key.get("decode"), dict):
            found.append(CachedTranslation(split, out, ref, key["decode"]))
    return found
