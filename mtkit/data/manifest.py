"""What a prepared data directory records (``data/manifest.json``: the data section's hash,
a fingerprint of every input, the files written) and the checks `mtkit prep` makes against
it: whether the data is up to date, and what preparing again may not replace (the vocabulary
a run's checkpoints need, files prep did not write)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from pathlib import Path
from typing import Any

from mtkit.config import DataConfig, Recipe, SplitConfig, recipe_to_dict, split_corpora
from mtkit.data import sources
from mtkit.data.pieces import PIECES
from mtkit.data.spm import model_files
from mtkit.errors import DataError
from mtkit.fileio import WriteError, atomic_write
from mtkit.run import MANIFEST, data_dir

FORMAT = 1  # bump when the layout of the data directory changes


def data_hash(data: DataConfig) -> str:
    """A hash of the data section: any change in it means the data must be prepared again."""
    text = json.dumps(without_unset(recipe_to_dict(data)), sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def without_unset(data: dict) -> dict:
    """The data section dict less the keys added since manifests were first written, where
    unset (`align`, `tag`, `spm.from_run`, `spm.user_symbols`): prepared data stays up to
    date across versions."""
    out = without_unset_align(data)
    if out.get("tag", 0) is None:
        del out["tag"]
    spm = out.get("spm")
    if isinstance(spm, dict):
        unset = {"from_run": None, "user_symbols": []}
        out["spm"] = {k: v for k, v in spm.items() if not (k in unset and v == unset[k])}
    return out


def without_unset_align(value: Any) -> Any:
    """The data section less every corpus's ``align: null`` and ``tag: null``: a corpus
    without them hashes as it did before corpora could have them, so existing data stays up
    to date."""
    if isinstance(value, dict):
        return {k: without_unset_align(v) for k, v in value.items()
                if not (k in ("align", "tag") and v is None and "src" in value)}
    if isinstance(value, list):
        return [without_unset_align(v) for v in value]
    return value


def split_inputs(data: DataConfig) -> dict[str, list[tuple[str, SplitConfig]]]:
    """Every split's corpora, each with its name in recipe keys below ``data.``: ``train``,
    ``train[1]``, ``test.NAME``..."""
    assert data.train is not None and data.valid is not None  # checked by the config
    named = {"train": data.train, "valid": data.valid,
             **{f"test.{n}": t for n, t in data.test.items()}}
    return {name.removeprefix("test."): [(name + suffix, corpus)
                                         for suffix, corpus in split_corpora(split)]
            for name, split in named.items()}


def fingerprint(data: DataConfig, *, with_sha: bool = False) -> dict[str, dict]:
    """Size and mtime (and, for the manifest, sha256) of every local input. URL inputs are
    pinned by the sha256 in the data section already."""
    out = {}
    for name, corpora in split_inputs(data).items():
        for key, corpus in corpora:
            # Keyed as before lists of corpora existed: NAME.src for a one-corpus split.
            prefix = name + key[key.index("["):] if "[" in key else name
            for side, src in (("src", corpus.src), ("tgt", corpus.tgt), ("align", corpus.align)):
                if src is not None and src.path is not None:
                    p = Path(src.path)
                    st = p.stat() if p.is_file() else None
                    entry = {"path": str(p), "size": st and st.st_size,
                             "mtime_ns": st and st.st_mtime_ns}
                    if with_sha and st is not None:
                        entry["sha256"] = sources.sha256_file(p)
                    out[f"{prefix}.{side}"] = entry
    return out


def inputs_unchanged(recorded: dict[str, dict], now: dict[str, dict]) -> bool:
    if recorded.keys() != now.keys():
        return False
    for key, rec in recorded.items():
        cur = now[key]
        if cur["size"] is None or cur["size"] != rec["size"] or cur["path"] != rec["path"]:
            return False
        # Same size, new mtime (e.g. touched or copied): compare contents before redoing.
        if cur["mtime_ns"] != rec["mtime_ns"] and (
                sources.sha256_file(cur["path"]) != rec.get("sha256")):
            return False
    return True


def record_mtimes(run_dir: Path, recipe: Recipe) -> None:
    """After `is_prepared` found inputs of a new mtime unchanged (by their sha256), record
    the mtimes: a touched or copied corpus was hashed again at every later prep and training
    start (seconds to minutes for a corpus of millions of pairs)."""
    man = read_manifest(run_dir)
    if man is None:
        return
    now = fingerprint(recipe.data)
    moved = [(rec, cur) for key, rec in man.get("inputs", {}).items()
             if (cur := now.get(key)) is not None
             and cur["size"] == rec["size"] and cur["mtime_ns"] != rec["mtime_ns"]]
    if not moved:
        return
    for rec, cur in moved:
        rec["mtime_ns"] = cur["mtime_ns"]
    with contextlib.suppress(WriteError), atomic_write(data_dir(run_dir) / MANIFEST, own=True) as f:
        json.dump(man, f, indent=1, ensure_ascii=False)  # a saving only: read-only data/ too


def read_manifest(run_dir: Path) -> dict | None:
    path = data_dir(run_dir) / MANIFEST
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def is_prepared(recipe: Recipe, run_dir: str | Path) -> bool:
    """True when ``run_dir/data`` was prepared from this data section and unchanged inputs."""
    run_dir = Path(run_dir)
    man = read_manifest(run_dir)
    if man is None or man.get("format") != FORMAT or man.get("data_hash") != data_hash(
            recipe.data):
        return False
    ddir = data_dir(run_dir)
    for name, size in man.get("files", {}).items():
        p = ddir / name
        if not p.is_file() or p.stat().st_size != size:
            return False
    return inputs_unchanged(man.get("inputs", {}), fingerprint(recipe.data))


def only_evaluation_changed(recipe: Recipe, run_dir: Path) -> bool:
    """Whether the run holds checkpoints and only its validation or test splits changed
    (a test set added after training, say): the vocabulary they need is then kept, not
    trained again, and the training split comes out as before. Nothing changed (damaged or
    missing files of data/) is no such case: prep rebuilds all from the same inputs, the
    sentencepiece model(s) too, which must then be whole."""
    man = read_manifest(run_dir)
    if man is None or not any(run_dir.glob("*.pt")) or "data" not in man:
        return False

    def training(data: dict) -> str:
        part = {k: v for k, v in data.items() if k not in ("valid", "test")}
        return json.dumps(without_unset(part), sort_keys=True)

    def split(inputs: dict) -> tuple[dict, dict]:  # (the training split's, the others')
        train = {k: v for k, v in inputs.items() if k.startswith(("train.", "train["))}
        return train, {k: v for k, v in inputs.items() if k not in train}

    (train_was, eval_was), (train_now, eval_now) = (
        split(man.get("inputs", {})), split(fingerprint(recipe.data)))
    if training(man["data"]) != training(recipe_to_dict(recipe.data)) or not inputs_unchanged(
            train_was, train_now):
        return False
    if man.get("data_hash") == data_hash(recipe.data) and inputs_unchanged(eval_was, eval_now):
        return False  # nothing changed: damaged or missing files, rebuilt from the same inputs
    ddir, files = data_dir(run_dir), man.get("files", {})
    return all((ddir / n).is_file() and (ddir / n).stat().st_size == files.get(n)
               for n in model_files(recipe.data.spm.joint))


def refuse_orphaning_checkpoints(recipe: Recipe, run_dir: Path, *, force: bool) -> None:
    """Checkpoints need the vocabulary they were trained with: preparing a run that holds
    some from a changed data section or changed inputs would leave them unusable, so that
    takes --force. (Rebuilding damaged or missing files from the same inputs gives the same
    vocabulary, which the checkpoints' sha256 confirms on load.)"""
    ckpts = sorted(p.name for p in run_dir.glob("*.pt"))
    man = read_manifest(run_dir)
    if force or not ckpts or man is None:
        return
    if man.get("data_hash") == data_hash(recipe.data) and inputs_unchanged(
            man.get("inputs", {}), fingerprint(recipe.data)):
        return
    raise DataError(f"{run_dir}: holds trained checkpoints ({', '.join(ckpts[:3])}"
                    f"{', ...' if len(ckpts) > 3 else ''}) that need the data/ prepared now, "
                    "but the recipe's data section or its inputs changed; use a new --run-dir, "
                    "or `mtkit prep --force` to replace it (those checkpoints then stop "
                    "loading)")


# Names prep gives the files of data/ (splits' ids, offsets and texts, sentencepiece models and
# a reused model's piece table, the manifest): all that may go with a data/ whose manifest is
# lost or damaged, or that `mtkit import` wrote (the models and the table, no manifest).
_PREP_NAMES = re.compile(r"[^/]+\.(src|tgt|align)\.(ids|offsets)\.npy|[^/]+\.(src|tgt)\.txt"
                         r"|spm(\.src|\.tgt)?\.model|" + re.escape(PIECES) + "|"
                         + re.escape(MANIFEST))


def refuse_replacing_foreign_files(run_dir: Path) -> None:
    """data/ is replaced as a whole: refuse (with --force too) when it holds anything its
    manifest does not list, such as notes of the user's, which went with it. Without a
    readable manifest, anything that prep would not have named so is foreign."""
    ddir, man = data_dir(run_dir), read_manifest(run_dir)
    if not ddir.is_dir():
        return
    if man is None or not isinstance(man.get("files"), dict):  # lost, or damaged
        foreign = sorted(p.name for p in ddir.iterdir()
                         if not p.is_file() or not _PREP_NAMES.fullmatch(p.name))
    else:
        listed = set(man.get("files", {})) | {MANIFEST}
        foreign = sorted(p.name for p in ddir.iterdir() if p.name not in listed)
    if foreign:
        raise DataError(f"{ddir}: holds files mtkit prep did not write ({', '.join(foreign[:3])}"
                        f"{', ...' if len(foreign) > 3 else ''}); preparing again replaces "
                        "data/ as a whole: move them out of it first")
