"""What a training run is built from, made once before its first update: the resume checks
against the saved recipe, then the `Setup` (tokenizer, data, batches, model, optimizer,
schedule, precision), with a resumed run's weights and optimizer state already loaded.

The `Trainer` (`mtkit.train.loop`) receives a finished, frozen `Setup` and owns only what
changes while it trains (progress, windows, the newest checkpoint).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from mtkit.config import Recipe, dump_recipe, recipe_from_yaml_text, recipe_to_dict
from mtkit.data.batch import Batch
from mtkit.data.manifest import is_prepared
from mtkit.data.prep import parent_tokenizer
from mtkit.data.resegment import Resegmenter
from mtkit.data.sampler import TokenBatchSampler
from mtkit.data.sources import sha256_file
from mtkit.data.spm import Tokenizer, model_files
from mtkit.data.store import ParallelData, text_path
from mtkit.device import Amp
from mtkit.errors import CheckpointError, ConfigError, DataError, OptionError
from mtkit.fileio import read_lines
from mtkit.models.base import VOCABULARY_PARTS, Translator
from mtkit.models.build import build_model
from mtkit.run import (
    BEST,
    LAST,
    check_vocab,
    check_weights,
    data_dir,
    load_checkpoint,
    resolve_checkpoint,
    same_vocab,
    vocab_info,
    weights_mismatch,
)
from mtkit.train.checkpoint import first_difference, numbered_checkpoints, weights_shape
from mtkit.train.distributed import Dist
from mtkit.train.optim import Schedule, build_optimizer
from mtkit.train.validate import valid_batches


@dataclass(frozen=True)
class Setup:
    """Everything one run trains with. `net` is `model` as trained (wrapped by DDP and/or
    compiled when asked); `model` is the plain module that is saved and validated."""

    tokenizer: Tokenizer
    vocab_info: dict[str, Any]  # what every checkpoint records of the run's vocabulary
    recipe_text: str  # the resolved recipe as YAML, saved in every checkpoint
    train_data: ParallelData
    sampler: TokenBatchSampler
    valid_batches: list[Batch]
    valid_refs: list[str]  # the whole validation split's target text, by sentence id
    model: Translator
    net: torch.nn.Module
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    schedule: Schedule
    amp: Amp
    # the checkpoint this run's weights started from (--init-from): path, sha256, update
    init_from: dict[str, Any] | None = None
    # builds the training batches with sampled segmentations (train.subword_sampling); None:
    # the prepared ones
    resegment: Resegmenter | None = None

    def drop_net(self) -> None:
        """Let go of `net` once training is over, however it ended: a DDP wrapper holds the
        process group (`mtkit.train.session.train` says why that matters), and what an
        exception keeps (a closure's `self` in its traceback) may keep this Setup."""
        object.__setattr__(self, "net", None)  # frozen: the one change it allows


# --------------------------------------------------------------------------- resume checks


def check_fresh(run_dir: Path) -> None:
    """A new run may not start over one that has checkpoints (its pruning would take the
    other's numbered checkpoints for its own, and it would replace best.pt)."""
    found = [p.name for p in (run_dir / LAST, run_dir / BEST) if p.is_file()] + [
        p.name for p in numbered_checkpoints(run_dir)]
    if found:
        raise CheckpointError(f"{run_dir} already holds a training run ({', '.join(found[:3])}"
                              f"{', ...' if len(found) > 3 else ''}); continue it with "
                              "--resume, or train into a new --run-dir")  # remedies


def resume_state(recipe: Recipe, run_dir: Path) -> dict:
    """The state of `run_dir`'s last.pt, after checking that `recipe` may continue it."""
    path = run_dir / LAST
    if not path.is_file():
        raise CheckpointError.about("resume", f"{path} not found; nothing to resume (drop "
                                    "{0} to start a new run)", others=("resume",))
    state = load_checkpoint(path)
    if "optimizer" not in state:  # `mtkit average -o RUN/last.pt` (refused now) wrote one
        raise CheckpointError.about("resume", (
            f"{path} holds a model only (an average?), not the "
            "state training continues from; train into a new --run-dir"))
    saved = recipe_from_yaml_text(state["recipe"], source=f"{path} (its recipe)")
    for section in ("data", "model"):
        before, now = (recipe_to_dict(getattr(r, section)) for r in (saved, recipe))
        if section == "data":  # test sets (added after training, as prep allows) train nothing
            before, now = ({k: v for k, v in d.items() if k != "test"} for d in (before, now))
        key = first_difference(before, now, section)
        if key is not None:
            raise CheckpointError.about("resume", (
                f"the recipe's `{section}` section differs from "
                f"the one {path} was trained with (at {key}); resume "
                "with the same recipe, or train into a new --run-dir"))
    # These cut and order the batches: with another value the saved position in the
    # epoch would point into a different batch list (sentences skipped or repeated).
    for name in ("batch_tokens", "seed"):
        was, now = getattr(saved.train, name), getattr(recipe.train, name)
        if was != now:
            raise CheckpointError.about("resume", (
                f"train.{name} is {now} but {path} was trained "
                f"with {was}; it fixes the batch order, so resume with "
                f"{was}, or train into a new --run-dir"))
    was, now = saved.train.weight_decay, recipe.train.weight_decay
    if (was > 0) != (now > 0):  # the optimizer's saved state has one group, or two
        raise CheckpointError.about("resume", (
            f"train.weight_decay is {now} but {path} was trained "
            f"with {was}; weight decay cannot be turned on or off on resume "
            "(a value above 0 may change)"))
    was, now = saved.train.valid_metric, recipe.train.valid_metric
    if was != now:  # a loss would be compared with the best BLEU, and patience count on
        raise CheckpointError.about("resume", (
            f"train.valid_metric is {now} but {path} was trained "
            f"with {was}; its best checkpoint, patience and plateau schedule "
            f"count {was}: resume with it, or train into a new --run-dir"))
    return state


def changed_settings(state: dict, recipe: Recipe) -> list[str]:
    """What a resumed run changes of the settings it was trained with (the train and decode
    sections; data and model may not change): 'train.lr 0.0005 -> 0.001', in recipe order."""
    saved = recipe_from_yaml_text(state["recipe"], source="last.pt (its recipe)")

    def flat(value: object, key: str) -> dict[str, object]:
        if isinstance(value, dict):
            return {k: v for name, sub in value.items() for k, v in flat(sub, f"{key}.{name}")
                    .items()}
        return {key: value}

    out = []
    for section in ("train", "decode"):
        was = flat(recipe_to_dict(getattr(saved, section)), section)
        now = flat(recipe_to_dict(getattr(recipe, section)), section)
        out += [f"{k} {json.dumps(was.get(k))} -> {json.dumps(v)}" for k, v in now.items()
                if was.get(k) != v]
    return out


# --------------------------------------------------------------------------- init from

# What `--init-from` carries over from the parent and what starts afresh: said at start.
CARRIED = ["model weights"]
FRESH = ["optimizer state", "learning-rate schedule (update 0)", "best score and patience",
         "epochs and batch order", "training settings (this recipe's train section)"]


def carried_and_fresh(meta: dict[str, Any]) -> tuple[list[str], list[str]]:
    """What a run started from `meta` (`init_state`'s) carried over and what started afresh,
    the model parts it re-initialized named in both."""
    parts = meta.get("reinitialized") or []
    if not parts:
        return CARRIED, FRESH
    return ([f"model weights but {', '.join(parts)}"],
            [f"{', '.join(parts)} (re-initialized)", *FRESH])


def check_init_fresh(init_fresh: Sequence[str], init_from: object) -> list[str]:
    """The model parts `init_fresh` names (`VocabularyPart`s), each once, in their order;
    OptionError for another name, or without `init_from` to take the other parts from."""
    unknown = [p for p in init_fresh if p not in VOCABULARY_PARTS]
    if unknown:
        raise OptionError.about("init_fresh", "not a part of a model; choose from "
                                f"{', '.join(VOCABULARY_PARTS)}", value=unknown[0])
    if init_fresh and init_from is None:
        raise OptionError.about("init_fresh", "re-initializes parts of the model {0} loads; "
                                "give {0}", others=("init_from",))
    return [p for p in VOCABULARY_PARTS if p in init_fresh]


def init_state(recipe: Recipe, source: Path, *, reinitialize: Sequence[str] = ()) -> dict:
    """The checkpoint `--init-from` names (a run's best.pt, else its last.pt, or a file),
    after checking that `recipe` builds the same architecture: only its weights are used,
    but for the `reinitialize` parts (`check_init_fresh`'s), which keep this run's own
    initialization (`build_setup`)."""
    path = resolve_checkpoint(source)
    state = load_checkpoint(path)
    saved = recipe_from_yaml_text(state["recipe"], source=f"{path} (its recipe)")
    check_weights(path, state, saved.model)
    before, now = (weights_shape(recipe_to_dict(r.model)) for r in (saved, recipe))
    key = first_difference(before, now, "model")
    if key is not None:
        was, is_ = (_at(d, key) for d in (before, now))
        raise CheckpointError.about("init_from", (
            f"{key} is {json.dumps(is_)} in this recipe but "
            f"{json.dumps(was)} in {path}'s; the architecture must be the "
            "parent's (set it to the parent's value)"))
    progress = state.get("progress") or {}
    meta = {"checkpoint": str(path.resolve()), "sha256": sha256_file(path),
            "update": progress.get("update")}
    if reinitialize:
        meta["reinitialized"] = list(reinitialize)
    return {"model": state["model"], "vocab": state["vocab"], "meta": meta}


def _at(d: dict, key: str) -> object:
    """The value at dotted `key` (its first part the section's name) of a section dict."""
    for part in key.split(".")[1:]:
        d = d.get(part) if isinstance(d, dict) else None
    return d


def check_init_vocab_plan(recipe: Recipe, run_dir: Path, init: dict) -> None:
    """Before prep does any work: the vocabulary prep will give the run (the one of the run
    `data.spm.from_run` names, the run's own when its data is up to date, else a new one it
    would train, minutes on a big corpus) must be the parent's, unless every part whose shape
    follows it is re-initialized. `_check_init_vocab` checks the prepared data again."""
    if set(VOCABULARY_PARTS) <= set(init["meta"].get("reinitialized", [])):
        return
    spm, ddir = recipe.data.spm, data_dir(run_dir)
    if spm.from_run is not None:
        planned = parent_tokenizer(spm)
    elif is_prepared(recipe, run_dir):
        planned = Tokenizer.load(ddir)
    else:
        raise _another_vocab(init, f"data.spm.from_run is unset: prep would train a new "
                                   f"sentencepiece model for {ddir}")
    _check_init_vocab(init, vocab_info(planned), ddir, planned.joint)


def _check_init_vocab(init: dict, vocab: dict, ddir: Path, joint: bool) -> None:
    """Another vocabulary than the parent's is refused, unless every part whose shape follows
    it is re-initialized."""
    if same_vocab(init["vocab"], vocab) or set(VOCABULARY_PARTS) <= set(
            init["meta"].get("reinitialized", [])):
        return
    names = ", ".join(model_files(joint))
    raise _another_vocab(init, f"this run's {ddir} holds other ones ({names})")


def _another_vocab(init: dict, what: str) -> CheckpointError:
    ckpt = Path(init["meta"]["checkpoint"])
    return CheckpointError.about("init_from", (
        f"{ckpt} was trained with the sentencepiece model(s) "
        f"in {ckpt.parent / 'data'}, but {what}; set data.spm.from_run: {ckpt.parent} so "
        "that prep reuses the parent's (or re-initialize what depends on the vocabulary: "
        f"{{0}} with each of {', '.join(VOCABULARY_PARTS)})"), others=("init_fresh",))


# --------------------------------------------------------------------------- building


def build_setup(recipe: Recipe, run_dir: Path, *, dist: Dist, device: torch.device,
                state: dict | None, init: dict | None = None) -> Setup:
    """Load the prepared data, build model, optimizer and schedule (from `state` when
    resuming: weights, optimizer moments, schedule and gradient scaler; with `init`, from
    `init_state`, its weights only)."""
    cfg, ddir = recipe.train, data_dir(run_dir)
    tokenizer = Tokenizer.load(ddir)
    vocab = vocab_info(tokenizer)
    if state is not None:
        try:
            check_vocab(state["vocab"], vocab, ddir=ddir, what=str(run_dir / LAST))
        except CheckpointError as e:
            raise CheckpointError.about("resume", str(e)) from None
    if init is not None:
        _check_init_vocab(init, vocab, ddir, tokenizer.joint)
    # Guided alignment reads the gold links stored with the training split.
    train_data = ParallelData.load(ddir, "train", links=recipe.train.guided_alignment.enabled)
    sampler = TokenBatchSampler(
        train_data.src_lens, train_data.tgt_lens, batch_tokens=cfg.batch_tokens,
        seed=cfg.seed, rank=dist.rank, world_size=dist.world_size, max_len=recipe.data.max_len)
    if len(sampler) == 0:
        raise DataError(f"{ddir}: the training split yields no batch for {dist.world_size} "
                        "process(es)")
    seed_all(cfg.seed)  # the same initial weights on every rank
    try:
        model = build_model(recipe.model, tokenizer.src_vocab_size,
                            tokenizer.tgt_vocab_size).to(device)
    except (MemoryError, RuntimeError) as e:  # the CPU allocator's error is a RuntimeError
        if not isinstance(e, MemoryError | torch.OutOfMemoryError) and "alloc" not in str(e):
            raise
        arch = recipe.model.arch
        raise ConfigError(f"model.{arch}: its weights do not fit in {device}'s memory "
                          f"({str(e).splitlines()[0][:160]}); lower its sizes") from None
    if dist.rank > 0:
        seed_all(cfg.seed + dist.rank)  # but each rank its own dropout masks
    optimizer = build_optimizer(model, cfg, device)
    schedule = Schedule(cfg, model_size=recipe.model.size)
    amp = Amp.for_device(device, cfg.precision)
    if init is not None:
        _load_init(model, init)
    if state is not None:
        try:
            model.load_state_dict(state["model"])
        except RuntimeError as e:
            raise weights_mismatch(run_dir / LAST, e) from None
        optimizer.load_state_dict(state["optimizer"])
        for group in optimizer.param_groups:  # the saved state brings its own: the recipe's
            group["betas"], group["eps"] = cfg.betas, cfg.eps  # (a resume may change them)
            group["weight_decay"] = cfg.weight_decay if group["weight_decay"] else 0.0
        schedule.load_state_dict(state["schedule"])
        if amp.scaler is not None and state.get("scaler"):
            amp.scaler.load_state_dict(state["scaler"])
    net: torch.nn.Module = model
    if dist.enabled:
        net = DistributedDataParallel(
            net, device_ids=[device.index] if device.type == "cuda" else None)
    # Batch shapes change with every batch: compile for dynamic shapes at once rather than
    # specialising on the first batch and recompiling on the second.
    net = torch.compile(net, dynamic=True) if cfg.compile else net
    return Setup(
        tokenizer=tokenizer, vocab_info=vocab, recipe_text=dump_recipe(recipe),
        train_data=train_data, sampler=sampler,
        valid_batches=valid_batches(ParallelData.load(ddir, "valid"), recipe),
        valid_refs=read_lines(text_path(ddir, "valid", "tgt")), model=model, net=net,
        params=[p for p in model.parameters() if p.requires_grad], optimizer=optimizer,
        schedule=schedule, amp=amp,
        init_from=init["meta"] if init is not None else (state or {}).get("init_from"),
        resegment=Resegmenter(tokenizer, cfg.subword_sampling, seed=cfg.seed,
                              batch_tokens=cfg.batch_tokens, max_len=recipe.data.max_len,
                              rank=dist.rank) if cfg.subword_sampling.enabled else None)


def _load_init(model: Translator, init: dict) -> None:
    """The parent's weights (`init_state`) into `model`, but for the parts it re-initializes:
    those keep `model`'s seeded initialization. A part tied to one that is carried over
    (shared embeddings) is refused: it cannot be both."""
    parts = model.vocabulary_parts()
    fresh = init["meta"].get("reinitialized", [])
    params = dict(model.named_parameters(remove_duplicate=False))
    for part in fresh:
        for other in VOCABULARY_PARTS:
            if other not in fresh and any(params[a] is params[b] for a in parts[part]
                                          for b in parts[other]):
                raise OptionError.about("init_fresh", f"{part} shares its weights with {other} "
                                        "(tied embeddings in the recipe's model section); "
                                        "re-initialize both, or neither")
    skipped = {name for part in fresh for name in parts[part]}
    missing, unexpected = model.load_state_dict(
        {k: v for k, v in init["model"].items() if k not in skipped}, strict=False)
    assert set(missing) == skipped and not unexpected, (missing, unexpected)


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
