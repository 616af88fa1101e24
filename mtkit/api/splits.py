"""A run's own splits translated with its model, opened the one way every face opens a model
(`open_model`): `mtkit score --run`'s `translate_split`, and `mtkit tune-length`'s `sweep`,
which keeps one model for every point of its grid. What is cached where lives in
`mtkit.score.split_translation`; the grid and its record in `mtkit.score.length_sweep`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtkit.api.model import TranslationModel, decode_options, open_model
from mtkit.errors import CheckpointError, ConfigError
from mtkit.score.length_sweep import (
    DEFAULT_ALPHAS,
    LengthSetting,
    SweepPoint,
    SweepResult,
    grid,
    record,
)
from mtkit.score.split_translation import (
    SplitTranslation,
    decode_tag,
    read_key,
    split_run,
    split_texts,
    translation_key,
)

if TYPE_CHECKING:
    import torch


def translate_split(run: Path, split: str, *, device: str | torch.device,
                    decode: Mapping[str, Any] | None = None,
                    origins: Mapping[str, str] | None = None, threads: int = 0,
                    model: Callable[[], TranslationModel] | None = None) -> SplitTranslation:
    """Translate a run's split with its model (`run.resolve_checkpoint`), or with the
    checkpoint `run` names, and its recipe's decode section with the fields `decode` changes
    (validated as `TranslationModel.options` does, problems named by `origins`; 1-best), into
    RUN_DIR/translations/SPLIT.TAG.txt (another checkpoint: translations/CHECKPOINT/...),
    written atomically. A file already there is reused only when its key file (.key beside
    it) records the same checkpoint contents, source text and decoding, and the translation's
    own contents: file dates prove nothing (a checkpoint copied in keeps an older date), and
    an edited translation is made again; the model is opened only to translate: by `model`
    where given (that checkpoint's, opened once for several calls), else by `open_model` on
    `device` with `threads` CPU threads (0: torch's count), shared among batches decoded at
    once as by `mtkit translate --threads`."""
    from mtkit.data.sources import sha256_file
    from mtkit.fileio import atomic_write, open_text, remove_leftovers
    from mtkit.run import checkpoint_recipe, resolve_checkpoint

    run_dir, ckpt = split_run(run)
    src, ref = split_texts(run_dir, split)
    cfg = decode_options(checkpoint_recipe(ckpt).decode, dict(decode or {}), origins=origins,
                         source="command line" if origins else "request")
    cfg = dataclasses.replace(cfg, nbest=1)
    # another checkpoint than the run's own (averaged.pt) translates into a folder of its own
    try:
        own = ckpt.resolve() == resolve_checkpoint(run_dir).resolve()
    except CheckpointError:  # a run left with an averaged.pt alone
        own = False
    out = run_dir / "translations" / ("" if own else ckpt.stem) / f"{split}.{decode_tag(cfg)}.txt"
    key_path = out.with_name(out.name + ".key")
    key = translation_key(ckpt, src, cfg)
    if out.is_file() and read_key(key_path) == {**key, "translation_sha256": sha256_file(out)}:
        return SplitTranslation(out, src, ref, ckpt, cfg, None)
    key_path.unlink(missing_ok=True)  # never a key beside a translation it does not describe
    # opened with `decode`, so that the workers suit its search (sampling keeps one)
    opened = model() if model is not None else open_model(
        [ckpt], device=str(device), threads=threads, decode=decode or {}, origins=origins)
    # the split's text already carries its language tag (prep put it there): none added
    worker = opened.untagged(opened.options(dataclasses.asdict(cfg), origins=origins))
    for name in (out.name, key_path.name):  # what a killed `score --run` left
        remove_leftovers(out.parent, name)
    with open_text(src) as lines, atomic_write(out, own=True) as f:
        stats = worker.run(lines, f)
    with atomic_write(key_path, own=True) as f:
        json.dump({**key, "translation_sha256": sha256_file(out)}, f, sort_keys=True)
    return SplitTranslation(out, src, ref, ckpt, cfg, stats)


def sweep(run: Path, *, split: str = "valid", alphas: Sequence[float] = DEFAULT_ALPHAS,
          device: str | torch.device, threads: int = 0,
          starting: Callable[[list[LengthSetting]], None] | None = None,
          progress: Callable[[SweepPoint], None] | None = None) -> SweepResult:
    """Decode `split` of the run directory `run` with its model and each setting of `grid`,
    choose the best by BLEU and record it (`record`). The model is opened once, when the
    first setting without a current translation needs it. `starting` hears the grid once
    the request is checked, `progress` each point."""
    import sacrebleu

    from mtkit.fileio import read_lines
    from mtkit.process.lock import run_lock
    from mtkit.run import checkpoint_recipe, resolve_checkpoint

    if not Path(run).is_dir():
        raise ConfigError(f"{run}: expected a run directory (the length is chosen for the "
                          "run's model)")
    ckpt = resolve_checkpoint(run)
    current = checkpoint_recipe(ckpt).decode
    if current.method != "beam":
        raise ConfigError(f"decode.method is {current.method}: the length penalty ranks the "
                          "hypotheses of beam search; set decode.method: beam")
    settings = grid(current, alphas)
    split_texts(Path(run), split)  # a split that is not there, before anything is said
    opened: list[TranslationModel] = []

    def model() -> TranslationModel:
        if not opened:
            opened.append(open_model([ckpt], device=str(device), threads=threads))
        return opened[0]

    points = []
    with run_lock(run, "tune-length"):  # it writes model.json: not while training does
        if starting is not None:
            starting(settings)
        for setting in settings:
            done = translate_split(run, split, device=device, decode=setting.changes(),
                                   model=model)
            hyps, refs = read_lines(done.path), read_lines(done.reference)
            bleu = sacrebleu.corpus_bleu(hyps, [refs])
            chrf = sacrebleu.corpus_chrf(hyps, [refs]).score
            point = SweepPoint(setting, bleu.score, chrf, bleu.bp,
                               bleu.sys_len / max(bleu.ref_len, 1))
            points.append(point)
            if progress is not None:
                progress(point)
        chosen = max(points, key=lambda p: p.bleu)  # the first of equals: the current setting
        path = record(Path(run), ckpt, points, chosen, split=split)
    return SweepResult(points, chosen, points[0], ckpt, path)
