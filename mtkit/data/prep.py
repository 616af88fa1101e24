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
import json
import logging
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from rich.console import Console

from mtkit.config import (
    DataConfig,
    Recipe,
    SpmConfig,
    dump_recipe,
    recipe_from_yaml_text,
    recipe_to_dict,
)
from mtkit.data import sources, store
from mtkit.data.alignments import AlignStats
from mtkit.data.clean import CleanStats
from mtkit.data.encode import TrainRules, encode_split
from mtkit.data.manifest import (
    FORMAT,
    data_hash,
    fingerprint,
    is_prepared,
    only_evaluation_changed,
    read_manifest,
    record_mtimes,
    refuse_orphaning_checkpoints,
    refuse_replacing_foreign_files,
    split_inputs,
)
from mtkit.data.report import PrepReport, print_report, report_fields, report_from_manifest
from mtkit.data.reservoir import Reservoir
from mtkit.data.sampler import TokenBatchSampler
from mtkit.data.scan import Corpus, count_lines, scan_train
from mtkit.data.sources import DownloadProgress
from mtkit.data.spm import Tokenizer, train_spm
from mtkit.errors import DataError
from mtkit.fileio import WRITE_ERRNOS, InvalidUtf8, atomic_write, umask, write_error
from mtkit.process.lock import run_lock
from mtkit.run import (
    MANIFEST,
    RECIPE,
    check_writable_run_dir,
    data_dir,
    recorded_init_from,
    run_recipe_text,
)

log = logging.getLogger(__name__)

__all__ = ["PrepReport", "is_prepared", "prepare"]

def prepare(recipe: Recipe, run_dir: str | Path, *, mirror: str | Path | None = None,
            console: Console | None = None, on_download: DownloadProgress | None = None,
            force: bool = False, batching: bool = True,
            parent: dict[str, Any] | None | Literal["recorded"] = "recorded") -> PrepReport:
    """Prepare ``run_dir/data`` for `recipe` unless it is up to date (or `force`), write
    ``run_dir/recipe.yaml``, and report (to `console`, if given) what was done. recipe.yaml
    records `parent`, the checkpoint training started from with --init-from
    (`run_recipe_text`): training says which (None: none), `mtkit prep` keeps the recorded
    one. With
    `batching`, also cut the training batches once to report their count and padding
    efficiency (seconds on 10M pairs: training, which cuts its own, skips it when it prints
    no report).

    Refuses a `run_dir` that is not mtkit's (`mtkit.run`), and one that another process is
    preparing or training in."""
    run_dir = Path(run_dir)
    check_writable_run_dir(run_dir)
    with run_lock(run_dir, "prep"):
        if not force and is_prepared(recipe, run_dir):
            record_mtimes(run_dir, recipe)
            man = read_manifest(run_dir)
            assert man is not None
            report = report_from_manifest(man, data_dir(run_dir))
        else:
            keep = not force and only_evaluation_changed(recipe, run_dir)
            if not keep:
                refuse_orphaning_checkpoints(recipe, run_dir, force=force)
            refuse_replacing_foreign_files(run_dir)
            report = _build(recipe, run_dir, mirror=mirror, on_download=on_download,
                            tokenizer=Tokenizer.load(data_dir(run_dir)) if keep else None)
        if parent == "recorded":
            parent = recorded_init_from(run_dir)
        _write_if_changed(run_dir / RECIPE, run_recipe_text(dump_recipe(recipe), parent))
    if batching:
        _add_batching(report, recipe)
    if console is not None:
        print_report(report, recipe, console)
    else:
        log.info("prep: %s (%s)", report.data_dir, "up to date" if report.skipped else "done")
    return report


def _write_if_changed(path: Path, text: str) -> None:
    """Write `path` unless it holds `text` already: a run's recipe.yaml made read-only (a
    run under DVC or git-annex) is refused by `atomic_write`, on every prep and resume."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except (OSError, UnicodeDecodeError):
        pass
    with atomic_write(path, own=True) as f:
        f.write(text)


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
           on_download: DownloadProgress | None,
           tokenizer: Tokenizer | None = None) -> PrepReport:
    """Prepare data/ afresh; with `tokenizer`, that one is kept rather than trained."""
    t0 = time.perf_counter()
    data = recipe.data
    # Taken before reading, so that a file changed meanwhile is redone next time.
    inputs = fingerprint(data, with_sha=True)
    files = _resolvesplits(data, mirror=mirror, on_download=on_download)
    invalid: dict[str, InvalidUtf8] = {}
    _check_evalsplits(data, files, invalid)
    scan = scan_train(files["train"], data, invalid)
    phases = {"read": time.perf_counter() - t0}
    if not scan.stats.read:  # said to be empty 'after cleaning', which had dropped nothing
        key = f"data.{split_inputs(data)['train'][0][0]}"
        raise DataError(f"{files['train'][0].src}: the training split ({key}.src) is empty; "
                        "training needs sentence pairs")
    if tokenizer is None and data.spm.from_run is not None:
        tokenizer = parent_tokenizer(data.spm)
    tok = tokenizer or _train_tokenizer(scan.samples, recipe)
    if cut := [t for t in data.tags() if tok.tag_id(t) is None]:
        # only a reused model can lack them: a trained one keeps them (`reserved_symbols`)
        raise DataError(f"data.train: the tag(s) {', '.join(cut)} are not one piece of the "
                        "sentencepiece model reused (data.spm.from_run, or the run's own for "
                        "new evaluation splits); prepare the parent with them in "
                        "data.spm.user_symbols")
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
            invalid_utf8=[f for f in invalid.values() if f.found],
            src_vocab_size=tok.src_vocab_size, tgt_vocab_size=tok.tgt_vocab_size,
            files=_publish(paths), phases=phases, alignments=links)
        report.seconds = time.perf_counter() - t0
        phases["encode"] = report.seconds - phases["read"] - phases["sentencepiece"]
        _write_manifest(tmp, report, recipe, inputs)
    return report


def _all_dropped(first: Path, data: DataConfig, stats: CleanStats) -> str:
    """The error for a training split that the token-length rules emptied (the text rules
    emptying it stop prep before sentencepiece: `_train_tokenizer`)."""
    c, d = data.clean, stats.dropped
    return (f"{first}: the token-length rules dropped every training pair left (too short "
            f"{d['too_short']}, data.clean.min_len={c.min_len}; too long {d['too_long']}, "
            f"data.clean.max_len={c.max_len}; ratio {d['ratio']}, data.clean.max_ratio="
            f"{c.max_ratio}); relax them")


def _resolvesplits(data: DataConfig, *, mirror: str | Path | None,
                    on_download: DownloadProgress | None) -> dict[str, list[Corpus]]:
    """Every split's corpora as verified local (source, target, alignment) files."""
    def get(src, key: str) -> Path:
        return sources.resolve(src, mirror=mirror, on_download=on_download, key=f"data.{key}")

    # every missing local file said at once, and before any download
    missing = []
    for corpora in split_inputs(data).values():
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
                          key=f"data.{key}", tag=c.tag)
                   for key, c in corpora]
            for name, corpora in split_inputs(data).items()}


def _check_evalsplits(data: DataConfig, files: dict[str, list[Corpus]],
                       invalid: dict[str, InvalidUtf8]) -> None:
    """Read the validation and test splits once (they are small, and read before the long
    training pass so that a broken one fails fast); each needs at least one pair."""
    for name, corpora in files.items():
        if name != "train" and count_lines(corpora, invalid) == 0:
            key = f"data.{split_inputs(data)[name][0][0]}"
            raise DataError(f"{corpora[0].src}: the {name} split ({key}.src) is empty; "
                            "validation and test need at least one sentence pair")


def parent_tokenizer(cfg: SpmConfig) -> Tokenizer:
    """The sentencepiece model(s) of the run `data.spm.from_run` names, after checking that
    this recipe's other `data.spm` fields are the ones they were trained with (else they
    would be accepted and mean nothing)."""
    assert cfg.from_run is not None
    parent = Path(cfg.from_run).expanduser()
    saved = parent / RECIPE
    if not saved.is_file():
        raise DataError(f"data.spm.from_run: {parent} is not a prepared mtkit run (no {saved})")
    was = recipe_from_yaml_text(saved.read_text(encoding="utf-8"), source=str(saved)).data.spm
    before, now = (recipe_to_dict(c) for c in (was, cfg))
    for key, value in now.items():
        # a parent prepared before user_symbols existed had none
        if key != "from_run" and before.get(key, [] if key == "user_symbols" else None) != value:
            raise DataError(f"data.spm.{key} is {json.dumps(value)} but {parent}'s sentencepiece "
                            f"model was trained with {json.dumps(before.get(key))}; set it to "
                            "that value (the model is reused, not trained)")
    return Tokenizer.load(data_dir(parent))


def _train_tokenizer(samples: list[Reservoir], recipe: Recipe) -> Tokenizer:
    cfg = recipe.data.spm
    if not len(samples[0]):
        raise DataError("the training split is empty after cleaning; nothing to train "
                        "sentencepiece on")
    # Tags are source-side words: a separate target model keeps the user's symbols only.
    both = recipe.data.reserved_symbols()
    if cfg.joint:
        return Tokenizer(train_spm(samples[0].drain(), cfg, symbols=both))
    return Tokenizer(train_spm(samples[0].drain(), cfg, what=f"source ({recipe.data.src_lang})",
                               symbols=both),
                     train_spm(samples[1].drain(), cfg, what=f"target ({recipe.data.tgt_lang})",
                               symbols=cfg.user_symbols))


def _publish(paths: list[Path]) -> dict[str, int]:
    """Give the written files a plain file's permissions; name -> size in bytes."""
    mode = 0o666 & ~umask()
    for p in paths:
        os.chmod(p, mode)  # temporary files are created private; data is not
    return {p.name: p.stat().st_size for p in paths}


def _write_manifest(tmp: Path, report: PrepReport, recipe: Recipe,
                    inputs: dict[str, dict]) -> None:
    body = {"format": FORMAT, "data_hash": data_hash(recipe.data), "inputs": inputs,
            "data": recipe_to_dict(recipe.data), **report_fields(report)}
    with atomic_write(tmp / MANIFEST, own=True) as f:
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
