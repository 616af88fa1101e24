"""Checkpoints of a training run: RNG states, the numbered checkpoints a run keeps (with
``last.pt`` and ``best.pt``), weight digests and averaging. The file format itself (save,
load without unpickling code) and loading a model for inference are `mtkit.run`'s.

A checkpoint is a dict of tensors and plain Python values only, so
``torch.load(path, weights_only=True)`` reads it and loading one never runs code:

    format    CHECKPOINT_FORMAT
    recipe    the resolved recipe as YAML text (`dump_recipe`): the model rebuilds from it alone
    vocab     {"src": int, "tgt": int, "sha256": str} vocabulary sizes and the sentencepiece
              model's sha256 (load_model refuses a data/ folder with another one)
    model     the model's state dict (float32 weights)
    ...       training state when written by the trainer: optimizer, schedule, scaler,
              progress (update, epoch, position in the epoch, ...), rng (per rank), validation

A run directory keeps ``checkpoint_<update>.pt`` for the last `keep_last` saves, ``last.pt``
(the newest) and ``best.pt`` (the best validation), the latter two as hard links to a numbered
file where the file system allows (no copy, and pruning a numbered file leaves them intact).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mtkit.errors import CheckpointError
from mtkit.fileio import write_error
from mtkit.run import (
    BEST,
    EXPORT_MARKER,
    LAST,
    NUMBERED,
    load_checkpoint,
    numbered_checkpoint,
    resolve_checkpoint,
    same_vocab,
    save_checkpoint,
)

# --------------------------------------------------------------------------- RNG states


def capture_rng() -> dict[str, Any]:
    """Every random generator the training loop draws from, as tensors and primitives:
    Python's `random`, NumPy's global generator, torch's CPU generator (dropout on a CPU) and
    each CUDA device's generator (dropout on a GPU)."""
    version, py_state, gauss = random.getstate()
    _, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    state: dict[str, Any] = {
        "python": {"version": version, "state": torch.tensor(py_state, dtype=torch.int64),
                   "gauss": gauss},
        "numpy": {"keys": torch.from_numpy(np_keys.astype(np.int64)), "pos": int(np_pos),
                  "has_gauss": int(np_has_gauss), "gauss": float(np_gauss)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Undo `capture_rng`: every generator continues exactly where it was captured."""
    py = state["python"]
    random.setstate((py["version"], tuple(py["state"].tolist()), py["gauss"]))
    npst = state["numpy"]
    np.random.set_state(("MT19937", npst["keys"].numpy().astype(np.uint32), npst["pos"],
                         npst["has_gauss"], npst["gauss"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# --------------------------------------------------------------------------- files


def _link_or_copy(src: Path, dst: Path) -> None:
    """Make `dst` name the same file as `src` (hard link, else a copy), atomically."""
    tmp = dst.with_name(f".{dst.name}.link.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    try:
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise write_error(dst, e) from None


def numbered_checkpoints(run_dir: str | Path) -> list[Path]:
    """``checkpoint_<update>.pt`` files of a run, oldest (lowest update) first."""
    found = [(int(m.group(1)), p) for p in Path(run_dir).glob("checkpoint_*.pt")
             if (m := NUMBERED.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


def write_run_checkpoint(run_dir: Path, state: dict[str, Any], *, update: int,
                         is_best: bool, keep_last: int) -> Path:
    """Save ``checkpoint_<update>.pt``, point ``last.pt`` (and ``best.pt`` when `is_best`)
    at it, and delete numbered checkpoints beyond the newest `keep_last`."""
    path = save_checkpoint(numbered_checkpoint(run_dir, update), state)
    _link_or_copy(path, run_dir / LAST)
    if is_best:
        _link_or_copy(path, run_dir / BEST)
    for old in numbered_checkpoints(run_dir)[:-keep_last]:
        old.unlink()
    return path


def weights_digest(state_dict: dict[str, torch.Tensor]) -> str:
    """sha256 of every tensor's bytes in key order: equal digests mean bitwise-equal
    weights (used to check that DDP ranks agree, and by the resume tests)."""
    h = hashlib.sha256()
    for key in sorted(state_dict):
        t = state_dict[key].detach().cpu().contiguous()
        h.update(key.encode("utf-8"))
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


# --------------------------------------------------------------------------- averaging


def average_checkpoints(paths: list[Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the models' weights (Vaswani et al. 2017, §6.1 averaged the
    last 5 or 20 checkpoints). Sums in float64; integer buffers must agree and are kept.
    Weights tied in the first checkpoint (one storage, several names) stay tied."""
    if not paths:
        raise CheckpointError("no checkpoints to average")
    first = load_checkpoint(paths[0], mmap=True)["model"]
    sums = {k: v.double() if v.is_floating_point() else v for k, v in first.items()}
    for p in paths[1:]:
        sd = load_checkpoint(p, mmap=True)["model"]
        if sd.keys() != first.keys():
            diff = sorted(set(sd) ^ set(first))[:3]
            raise CheckpointError(f"{p}: other weights than {paths[0]} (e.g. {diff}); "
                                  "only checkpoints of one model can be averaged")
        for k, v in sd.items():
            if v.shape != first[k].shape:
                raise CheckpointError(f"{p}: `{k}` has shape {tuple(v.shape)}, "
                                      f"{paths[0]} has {tuple(first[k].shape)}")
            if v.is_floating_point():
                sums[k] += v.double()
            elif not torch.equal(v, first[k]):
                raise CheckpointError(f"{p}: integer buffer `{k}` differs from {paths[0]}")
    out: dict[str, torch.Tensor] = {}
    # Tied weights are one view of one storage saved under several names; two different views
    # of one storage (other offset or strides) are different weights.
    by_view: dict[tuple, torch.Tensor] = {}
    for k, v in first.items():
        view = ((v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.stride()),
                 tuple(v.shape)) if v.numel() else (id(v),))
        if view in by_view:
            out[k] = by_view[view]
            continue
        out[k] = (sums[k] / len(paths)).to(v.dtype) if v.is_floating_point() else v
        by_view[view] = out[k]
    return out


def _too_few(run_dir: Path, found: list[Path], want: str) -> CheckpointError:
    """`average` asked for more numbered checkpoints than `run_dir` holds, and why it holds
    no more: train.keep_last deleted older ones (as many are kept as it allows), or training
    wrote no more (one at each validation or train.checkpoint_every)."""
    said = f"{run_dir}: {len(found)} checkpoint_<update>.pt file(s) kept, cannot average {want}"
    keep = None
    if found:
        from mtkit.config import recipe_from_yaml_text

        text = load_checkpoint(found[-1], mmap=True)["recipe"]
        keep = recipe_from_yaml_text(text, source=f"{found[-1]} (its recipe)").train.keep_last
    if keep is not None and len(found) >= keep:
        why = f"train.keep_last ({keep}) keeps no more: raise it for the next run"
    else:
        fewer = f"average --last {len(found)}, or " if len(found) >= 2 else ""
        why = (f"training wrote no more (one at each validation, train.valid_every, or every "
               f"train.checkpoint_every updates): {fewer}train with checkpoints closer together")
    return CheckpointError(f"{said} ({why})")


def select_for_average(inputs: list[Path], last: int | None) -> list[Path]:
    """The checkpoints `mtkit average` means: the newest `last` (default: all) numbered
    checkpoints of one run directory, or two or more named checkpoint files."""
    for p in inputs:  # an export is said to be one, as every other command says it
        if p.is_dir() and (p / EXPORT_MARKER).is_file():
            resolve_checkpoint(p)
    if len(inputs) == 1 and inputs[0].is_dir():
        found = numbered_checkpoints(inputs[0])
        n = len(found) if last is None else last
        if len(found) < 2 or n > len(found):
            raise _too_few(inputs[0], found, "two or more" if last is None else str(max(n, 2)))
        return found[-n:]
    if len(inputs) == 1 and not inputs[0].exists():
        raise CheckpointError(f"{inputs[0]}: no such run directory or checkpoint file")
    if last is not None:
        raise CheckpointError.about("last", "needs one run directory, not checkpoint files")
    for p in inputs:
        if p.is_dir():
            raise CheckpointError(f"{p}: a directory; give one run directory or checkpoint files")
        if not p.is_file():
            raise CheckpointError(f"{p}: checkpoint not found")
    seen: dict[tuple[int, int], Path] = {}
    for p in inputs:  # a file named twice would count twice in the mean
        st = p.stat()  # by inode: best.pt and last.pt are links to a checkpoint_N.pt
        if (st.st_dev, st.st_ino) in seen:
            raise CheckpointError(f"{p}: given twice (as {seen[st.st_dev, st.st_ino]}, the "
                                  "same file); each checkpoint counts once in an average")
        seen[st.st_dev, st.st_ino] = p
    if len(inputs) < 2:
        raise CheckpointError("give at least two different checkpoint files (or a run directory)")
    return inputs


def first_difference(before: object, now: object, key: str) -> str | None:
    """The dotted key of the first value that differs between two recipe dicts, or None."""
    if isinstance(before, dict) and isinstance(now, dict):
        for k in list(now) + [k for k in before if k not in now]:
            found = first_difference(before.get(k), now.get(k), f"{key}.{k}")
            if found is not None:
                return found
        return None
    return None if before == now else key


def weights_shape(model: dict) -> dict:
    """A recipe's model section without what leaves the weights' meaning alone (dropout)."""
    return {k: weights_shape(v) if isinstance(v, dict) else v for k, v in model.items()
            if "dropout" not in k}


def check_averageable(paths: list[Path], data_vocab: dict) -> None:
    """Refuse checkpoints whose weights mean different things: another architecture with
    weights of the same shapes (relu and gelu), other sentencepiece models of the same
    sizes, runs started from other random weights (train.seed); and a `data_vocab` (the
    tokenizer beside the output) that is not theirs."""
    from mtkit.config import recipe_from_yaml_text, recipe_to_dict

    first = None
    saved: dict[str, Path] = {}  # training progress -> the checkpoint saved at it
    for p in paths:
        state = load_checkpoint(p, mmap=True)
        recipe = recipe_from_yaml_text(state["recipe"], source=f"{p} (its recipe)")
        model = weights_shape(recipe_to_dict(recipe.model))
        # where training stood (None: an average's): one run's checkpoint saved once
        at = None if "progress" not in state else json.dumps(state["progress"], sort_keys=True)
        if first is None:
            first = (p, model, state["vocab"], recipe.train.seed)
            if at:
                saved[at] = p
            continue
        key = first_difference(first[1], model, "model")
        if key is not None:
            raise CheckpointError(f"{p}: {key} differs from {first[0]}'s; only checkpoints "
                                  "of one model can be averaged")
        if not same_vocab(state["vocab"], first[2]):
            raise CheckpointError(f"{p}: trained with other sentencepiece models than "
                                  f"{first[0]}; only checkpoints of one model can be averaged")
        if recipe.train.seed != first[3]:  # two such runs averaged scored BLEU 0
            raise CheckpointError(f"{p}: its run started from train.seed {recipe.train.seed}, "
                                  f"{first[0]}'s from {first[3]}: the weights of runs "
                                  "trained apart do not average into a model; average "
                                  "checkpoints of one run")
        # A copy of a run (cp -r, scp) has best.pt and its checkpoint_N.pt as two files,
        # which `select_for_average` cannot tell apart by inode; their progress is one.
        if at in saved:
            raise CheckpointError(f"{p}: the same checkpoint as {saved[at]} (saved at update "
                                  f"{state['progress']['update']} of one run); each checkpoint "
                                  "counts once in an average")
        if at:
            saved[at] = p
    if first is not None and not same_vocab(data_vocab, first[2]):
        raise CheckpointError(f"the data/ folder beside the output holds other sentencepiece "
                              f"models than {first[0]} was trained with; write the average "
                              "into that checkpoint's run directory")


def save_average(paths: list[Path], out: Path) -> Path:
    """Average `paths` and write a model-only checkpoint (recipe and vocabulary from the
    newest) that `load_model`, `translate` and `score` accept."""
    newest = load_checkpoint(paths[-1], mmap=True)
    weights = average_checkpoints(paths)
    return save_checkpoint(out, {"recipe": newest["recipe"], "vocab": newest["vocab"],
                                 "model": weights,
                                 "averaged_from": [str(Path(p).name) for p in paths]})
