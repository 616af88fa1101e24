"""`mtkit prep`: raw parallel text to a prepared data directory, once.

Pipeline, in two streaming passes so that memory does not grow with the corpus: resolve every
split's files (local, mirror, cache or download; `sources`; a split may be a list of corpora,
concatenated); first pass (`scan`): read every split, clean the training split's text and draw
the sentencepiece sample by reservoir sampling; train sentencepiece on the sample (`spm`);
second pass (`encode`): encode every split chunk by chunk, apply the token-length rules to the
training split, and write the binarized splits (`store`) with the sentencepiece model(s) and
the text of the validation and test splits into ``RUN_DIR/data/``. A training corpus may name
its word alignment (``align``): read in step with the corpus in both passes, checked in the
first, mapped onto pieces and stored beside the ids in the second (`alignments`).

Idempotence: ``data/manifest.json`` records a hash of the recipe's `data` section and a
fingerprint of every input file; when both match (and every output file is present with its
recorded size) prep does nothing; when only the validation or test splits changed in a run
that holds checkpoints, it prepares again with the sentencepiece model they need.
Atomicity: everything is written into a temporary folder beside ``data/``, the manifest last,
and the folder is renamed into place only when complete, so an interrupted prep never leaves
a ``data/`` that a later run trusts.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from mtkit.config import DataConfig, Recipe, SplitConfig, dump_recipe, recipe_to_dict, split_corpora
from mtkit.data import sources, store
from mtkit.data.alignments import AlignStats
from mtkit.data.clean import CleanStats
from mtkit.data.encode import TrainRules, encode_split
from mtkit.data.report import PrepReport, print_report, report_fields, report_from_manifest
from mtkit.data.reservoir import Reservoir
from mtkit.data.sampler import TokenBatchSampler
from mtkit.data.scan import Corpus, count_lines, scan_train
from mtkit.data.sources import DownloadProgress
from mtkit.data.spm import Tokenizer, train_spm
from mtkit.errors import DataError
from mtkit.fileio import WRITE_ERRNOS, InvalidUtf8, atomic_write, umask, write_error
from mtkit.run import (
    DATA_DIR,
    MANIFEST,
    RECIPE,
    RECIPE_HEADER,
    check_writable_run_dir,
    data_dir,
)
from mtkit.run_lock import run_lock

log = logging.getLogger(__name__)

__all__ = ["DATA_DIR", "MANIFEST", "PrepReport", "data_dir", "is_prepared", "prepare"]
_FORMAT = 1  # bump when the layout of the data directory changes


def data_hash(data: DataConfig) -> str:
    """A hash of the data section: any change in it means the data must be prepared again."""
    text = json.dumps(_without_unset_align(recipe_to_dict(data)), sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _without_unset_align(value: Any) -> Any:
    """The data section less every corpus's ``align: null``: a corpus without alignments
    hashes as it did before corpora could have one, so existing data stays up to date."""
    if isinstance(value, dict):
        return {k: _without_unset_align(v) for k, v in value.items()
                if not (k == "align" and v is None and "src" in value)}
    if isinstance(value, list):
        return [_without_unset_align(v) for v in value]
    return value


def _splits(data: DataConfig) -> dict[str, list[tuple[str, SplitConfig]]]:
    """Every split's corpora, each with its name in recipe keys below ``data.``: ``train``,
    ``train[1]``, ``test.NAME``..."""
    assert data.train is not None and data.valid is not None  # checked by the config
    named = {"train": data.train, "valid": data.valid,
             **{f"test.{n}": t for n, t in data.test.items()}}
    return {name.removeprefix("test."): [(name + suffix, corpus)
                                         for suffix, corpus in split_corpora(split)]
            for name, split in named.items()}


def _fingerprint(data: DataConfig, *, with_sha: bool = False) -> dict[str, dict]:
    """Size and mtime (and, for the manifest, sha256) of every local input. URL inputs are
    pinned by the sha256 in the data section already."""
    out = {}
    for name, corpora in _splits(data).items():
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


def _inputs_unchanged(recorded: dict[str, dict], now: dict[str, dict]) -> bool:
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


def _read_manifest(run_dir: Path) -> dict | None:
    path = data_dir(run_dir) / MANIFEST
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def is_prepared(recipe: Recipe, run_dir: str | Path) -> bool:
    """True when ``run_dir/data`` was prepared from this data section and unchanged inputs."""
    run_dir = Path(run_dir)
    man = _read_manifest(run_dir)
    if man is None or man.get("format") != _FORMAT or man.get("data_hash") != data_hash(
            recipe.data):
        return False
    ddir = data_dir(run_dir)
    for name, size in man.get("files", {}).items():
        p = ddir / name
        if not p.is_file() or p.stat().st_size != size:
            return False
    return _inputs_unchanged(man.get("inputs", {}), _fingerprint(recipe.data))


def prepare(recipe: Recipe, run_dir: str | Path, *, mirror: str | Path | None = None,
            console: Console | None = None, on_download: DownloadProgress | None = None,
            force: bool = False, batching: bool = True) -> PrepReport:
    """Prepare ``run_dir/data`` for `recipe` unless it is up to date (or `force`), write
    ``run_dir/recipe.yaml``, and report (to `console`, if given) what was done. With
    `batching`, also cut the training batches once to report their count and padding
    efficiency (seconds on 10M pairs: training, which cuts its own, skips it when it prints
    no report).

    Refuses a `run_dir` that is not mtkit's (`mtkit.run`), and one that another process is
    preparing or training in."""
    run_dir = Path(run_dir)
    check_writable_run_dir(run_dir)
    with run_lock(run_dir, "prep"):
        if not force and is_prepared(recipe, run_dir):
            man = _read_manifest(run_dir)
            assert man is not None
            report = report_from_manifest(man, data_dir(run_dir))
        else:
            keep = not force and _only_evaluation_changed(recipe, run_dir)
            if not keep:
                _refuse_orphaning_checkpoints(recipe, run_dir, force=force)
            _refuse_replacing_foreign_files(run_dir)
            report = _build(recipe, run_dir, mirror=mirror, console=console,
                            on_download=on_download,
                            tokenizer=Tokenizer.load(data_dir(run_dir)) if keep else None)
        with atomic_write(run_dir / RECIPE) as f:
            f.write(f"{RECIPE_HEADER}\n{dump_recipe(recipe)}")
    if batching:
        _add_batching(report, recipe)
    if console is not None:
        print_report(report, recipe, console)
    else:
        log.info("prep: %s (%s)", report.data_dir, "up to date" if report.skipped else "done")
    return report


def _only_evaluation_changed(recipe: Recipe, run_dir: Path) -> bool:
    """Whether the run holds checkpoints and only its validation or test splits changed
    (a test set added after training, say): the vocabulary they need is then kept, not
    trained again, and the training split comes out as before."""
    man = _read_manifest(run_dir)
    if man is None or not any(run_dir.glob("*.pt")) or "data" not in man:
        return False

    def training(data: dict) -> str:
        part = {k: v for k, v in data.items() if k not in ("valid", "test")}
        return json.dumps(_without_unset_align(part), sort_keys=True)

    def train_inputs(inputs: dict) -> dict:
        return {k: v for k, v in inputs.items() if k.startswith(("train.", "train["))}

    return training(man["data"]) == training(recipe_to_dict(recipe.data)) and _inputs_unchanged(
        train_inputs(man.get("inputs", {})), train_inputs(_fingerprint(recipe.data)))


def _refuse_orphaning_checkpoints(recipe: Recipe, run_dir: Path, *, force: bool) -> None:
    """Checkpoints need the vocabulary they were trained with: preparing a run that holds
    some from a changed data section or changed inputs would leave them unusable, so that
    takes --force. (Rebuilding damaged or missing files from the same inputs gives the same
    vocabulary, which the checkpoints' sha256 confirms on load.)"""
    ckpts = sorted(p.name for p in run_dir.glob("*.pt"))
    man = _read_manifest(run_dir)
    if force or not ckpts or man is None:
        return
    if man.get("data_hash") == data_hash(recipe.data) and _inputs_unchanged(
            man.get("inputs", {}), _fingerprint(recipe.data)):
        return
    raise DataError(f"{run_dir}: holds trained checkpoints ({', '.join(ckpts[:3])}"
                    f"{', ...' if len(ckpts) > 3 else ''}) that need the data/ prepared now, "
                    "but the recipe's data section or its inputs changed; use a new --run-dir, "
                    "or `mtkit prep --force` to replace it (those checkpoints then stop "
                    "loading)")


def _refuse_replacing_foreign_files(run_dir: Path) -> None:
    """data/ is replaced as a whole: refuse (with --force too) when it holds anything its
    manifest does not list, such as notes of the user's, which went with it."""
    ddir, man = data_dir(run_dir), _read_manifest(run_dir)
    if not ddir.is_dir() or man is None:  # no list (a damaged data/ of the run): rebuilt
        return
    listed = set(man.get("files", {})) | {MANIFEST}
    foreign = sorted(p.name for p in ddir.iterdir() if p.name not in listed)
    if foreign:
        raise DataError(f"{ddir}: holds files mtkit prep did not write ({', '.join(foreign[:3])}"
                        f"{', ...' if len(foreign) > 3 else ''}); preparing again replaces "
                        "data/ as a whole: move them out of it first")


def _add_batching(report: PrepReport, recipe: Recipe) -> None:
    train = store.ParallelData.load(report.data_dir, "train")
    sampler = TokenBatchSampler(train.src_lens, train.tgt_lens,
                                batch_tokens=recipe.train.batch_tokens, seed=recipe.train.seed,
                                max_len=recipe.data.max_len)
    report.batch_tokens = recipe.train.batch_tokens
    report.train_batches = len(sampler)
    report.padding_efficiency = sampler.padding_efficiency()


# --------------------------------------------------------------------------- building


def _build(recipe: Recipe, run_dir: Path, *, mirror: str | Path | None,
           console: Console | None, on_download: DownloadProgress | None,
           tokenizer: Tokenizer | None = None) -> PrepReport:
    """Prepare data/ afresh; with `tokenizer`, that one is kept rather than trained."""
    t0 = time.perf_counter()
    data = recipe.data
    # Taken before reading, so that a file changed meanwhile is redone next time.
    fingerprint = _fingerprint(data, with_sha=True)
    files = _resolve_splits(data, mirror=mirror, on_download=on_download)
    invalid: dict[str, InvalidUtf8] = {}
    _check_eval_splits(data, files, invalid)
    scan = scan_train(files["train"], data, invalid)
    phases = {"read": time.perf_counter() - t0}
    if not scan.stats.read:  # said to be empty 'after cleaning', which had dropped nothing
        key = f"data.{_splits(data)['train'][0][0]}"
        raise DataError(f"{files['train'][0].src}: the training split ({key}.src) is empty; "
                        "training needs sentence pairs")
    tok = tokenizer or _train_tokenizer(scan.samples, recipe)
    phases["sentencepiece"] = time.perf_counter() - t0 - phases["read"]
    ddir = data_dir(run_dir)
    with _staging(ddir) as tmp:
        paths = tok.save(tmp)
        splits = {}
        links = (AlignStats(links_read=scan.links_read)
                 if any(c.align is not None for c in files["train"]) else None)
        for name, corpora in files.items():
            rules = (TrainRules(scan.keep, data.clean, scan.stats, links) if name == "train"
                     else None)
            splits[name], written = encode_split(name, corpora, tok, tmp, max_len=data.max_len,
                                                 train=rules)
            paths += written
        if not splits["train"].pairs:
            raise DataError(_all_dropped(files["train"][0].src, data, scan.stats))
        report = PrepReport(
            data_dir=ddir, skipped=False, seconds=0.0, clean=scan.stats, splits=splits,
            invalid_utf8=[f for f in invalid.values() if f.lines],
            src_vocab_size=tok.src_vocab_size, tgt_vocab_size=tok.tgt_vocab_size,
            files=_publish(paths), phases=phases, alignments=links)
        report.seconds = time.perf_counter() - t0
        phases["encode"] = report.seconds - phases["read"] - phases["sentencepiece"]
        _write_manifest(tmp, report, recipe, fingerprint)
    return report


def _all_dropped(first: Path, data: DataConfig, stats: CleanStats) -> str:
    """The error for a training split that the token-length rules emptied (the text rules
    emptying it stop prep before sentencepiece: `_train_tokenizer`)."""
    c, d = data.clean, stats.dropped
    return (f"{first}: the token-length rules dropped every training pair left (too short "
            f"{d['too_short']}, data.clean.min_len={c.min_len}; too long {d['too_long']}, "
            f"data.clean.max_len={c.max_len}; ratio {d['ratio']}, data.clean.max_ratio="
            f"{c.max_ratio}); relax them")


def _resolve_splits(data: DataConfig, *, mirror: str | Path | None,
                    on_download: DownloadProgress | None) -> dict[str, list[Corpus]]:
    """Every split's corpora as verified local (source, target, alignment) files."""
    def get(src, key: str) -> Path:
        return sources.resolve(src, mirror=mirror, on_download=on_download, key=f"data.{key}")

    # every missing local file said at once, and before any download
    missing = []
    for corpora in _splits(data).values():
        for key, c in corpora:
            for field, src in (("src", c.src), ("tgt", c.tgt), ("align", c.align)):
                if src is not None and src.path is not None and not Path(src.path).is_file():
                    try:
                        get(src, f"{key}.{field}")
                    except DataError as e:
                        missing.append(str(e))
    if missing:
        raise DataError("; ".join(missing))
    return {name: [Corpus(get(c.src, f"{key}.src"), get(c.tgt, f"{key}.tgt"),
                          None if c.align is None else get(c.align, f"{key}.align"),
                          key=f"data.{key}")
                   for key, c in corpora]
            for name, corpora in _splits(data).items()}


def _check_eval_splits(data: DataConfig, files: dict[str, list[Corpus]],
                       invalid: dict[str, InvalidUtf8]) -> None:
    """Read the validation and test splits once (they are small, and read before the long
    training pass so that a broken one fails fast); each needs at least one pair."""
    for name, corpora in files.items():
        if name != "train" and count_lines(corpora, invalid) == 0:
            key = f"data.{_splits(data)[name][0][0]}"
            raise DataError(f"{corpora[0].src}: the {name} split ({key}.src) is empty; "
                            "validation and test need at least one sentence pair")


def _train_tokenizer(samples: list[Reservoir], recipe: Recipe) -> Tokenizer:
    cfg = recipe.data.spm
    if not len(samples[0]):
        raise DataError("the training split is empty after cleaning; nothing to train "
                        "sentencepiece on")
    if cfg.joint:
        return Tokenizer(train_spm(samples[0].drain(), cfg))
    return Tokenizer(train_spm(samples[0].drain(), cfg, what=f"source ({recipe.data.src_lang})"),
                     train_spm(samples[1].drain(), cfg, what=f"target ({recipe.data.tgt_lang})"))


def _publish(paths: list[Path]) -> dict[str, int]:
    """Give the written files a plain file's permissions; name -> size in bytes."""
    mode = 0o666 & ~umask()
    for p in paths:
        os.chmod(p, mode)  # temporary files are created private; data is not
    return {p.name: p.stat().st_size for p in paths}


def _write_manifest(tmp: Path, report: PrepReport, recipe: Recipe,
                    fingerprint: dict[str, dict]) -> None:
    body = {"format": _FORMAT, "data_hash": data_hash(recipe.data), "inputs": fingerprint,
            "data": recipe_to_dict(recipe.data), **report_fields(report)}
    with atomic_write(tmp / MANIFEST) as f:
        json.dump(body, f, indent=1, ensure_ascii=False)


@contextlib.contextmanager
def _staging(final: Path):
    """A temporary folder beside `final`, renamed to `final` when the block succeeds."""
    final.parent.mkdir(parents=True, exist_ok=True)
    # Left by an interrupted prep: names of the two forms made below only (mkdtemp's eight
    # characters, a pid), so that a folder of the user's such as '.data.old-keep' stays.
    ours = re.compile(rf"\.{re.escape(final.name)}\.(tmp-[a-z0-9_]{{8}}|old-[0-9]+)")
    for stale in final.parent.iterdir():
        if ours.fullmatch(stale.name) and stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    os.chmod(tmp, 0o777 & ~umask())
    try:
        try:
            yield tmp
        except OSError as e:  # sentencepiece and numpy write there directly (disk full)
            if e.errno not in WRITE_ERRNOS:
                raise
            raise write_error(final, e) from None
        old = None
        if final.exists():
            old = final.with_name(f".{final.name}.old-{os.getpid()}")
            os.replace(final, old)
        os.replace(tmp, final)  # between the two renames there is no data/: never half of one
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
