"""`mtkit train`: one training session, from the run directory's lock to the last checkpoint:
prepare the data if needed, build the `Setup`, run the `Trainer`."""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import torch
from rich.console import Console

from mtkit.config import Recipe
from mtkit.data.prep import is_prepared, prepare
from mtkit.device import resolve_device, setup_backend
from mtkit.errors import ConfigError
from mtkit.process.lock import run_lock
from mtkit.run import (
    CHOICE,
    LAST,
    check_writable_run_dir,
    clear_choice,
    data_dir,
    remove_stale_temporaries,
)
from mtkit.train.distributed import (
    Dist,
    destroy_process_group,
    dist_from_env,
    init_process_group,
)
from mtkit.train.loop import Trainer
from mtkit.train.progress import TrainResult
from mtkit.train.setup import (
    build_setup,
    changed_settings,
    check_fresh,
    check_init_fresh,
    check_init_vocab_plan,
    init_state,
    resume_state,
)

log = logging.getLogger(__name__)


def train(recipe: Recipe, run_dir: str | Path, *, resume: bool | Literal["auto"] = False,
          init_from: str | Path | None = None, init_fresh: Sequence[str] = (),
          mirror: str | Path | None = None,
          console: Console | None = None,
          device_option: str = "train.device") -> TrainResult:
    """Train `recipe` into `run_dir` (one process, or one rank under torchrun): prepare the
    data if needed, build the `Setup`, run the `Trainer`. Rank 0 holds the run directory's
    lock from start to end (`mtkit.process.lock`). A device that is not there is an error naming
    `device_option`: the recipe key, or the command-line flag that set it. `init_from` (a
    run directory or checkpoint) starts a new run from its weights (`init_state`), but for the
    model parts named in `init_fresh` (`VocabularyPart`s), which start afresh."""
    if resume is True and init_from is not None:
        raise ConfigError.about(None, "{0} starts a new run from another run's weights; {1} "
                                "continues this one: give one of them (or {1} auto, which "
                                "takes the weights only when the run starts)",
                                others=("init_from", "resume"))
    init_fresh = check_init_fresh(init_fresh, init_from)
    run_dir, console = Path(run_dir), console or Console(stderr=True, soft_wrap=True)
    dist = dist_from_env()
    device = resolve_device(recipe.train.device, option=device_option,
                            local_rank=dist.local_rank if dist.enabled else None)
    setup_backend(device, recipe.train)
    init_process_group(dist, device)
    try:
        return _train_in_group(recipe, run_dir, dist=dist, device=device, resume=resume,
                               init_from=init_from, init_fresh=init_fresh, mirror=mirror,
                               console=console)
    finally:
        if dist.enabled:
            # DistributedDataParallel's reducer holds the process group: while it lives,
            # destroy_process_group leaves gloo's threads (and rank 0's store's) running into
            # the interpreter's exit, where a thread that takes the GIL then is ended inside a
            # C++ destructor: the likely cause of a finished rank 0 aborting once in CI
            # ("terminate called without an active exception", SIGABRT). Dropped by
            # `_train_in_group` and collected here (its hooks make cycles), the wrapper lets
            # destroy end them.
            gc.collect()
        destroy_process_group(dist)


def _train_in_group(recipe: Recipe, run_dir: Path, *, dist: Dist, device: torch.device,
                    resume: bool | Literal["auto"], init_from: str | Path | None,
                    init_fresh: Sequence[str], mirror: str | Path | None,
                    console: Console) -> TrainResult:
    """`train` once the process group is up: its objects are this call's, and the DDP
    wrapper is let go of when it returns or raises."""
    with contextlib.ExitStack() as held:
        def claim() -> bool:  # rank 0: the run directory, locked until training ends
            check_writable_run_dir(run_dir)
            held.enter_context(run_lock(run_dir, "train"))
            remove_stale_temporaries(run_dir)
            return True

        # the other ranks wait in each broadcast of main_result: rank 0's error ends them
        dist.main_result(claim, "rank 0 cannot use the run directory (its error says why)")
        state = _start_state(recipe, run_dir, resume,
                             console if dist.is_main else None)
        init = (init_state(recipe, Path(init_from), reinitialize=init_fresh)
                if init_from is not None and state is None else None)
        if init is not None:  # on every rank, before rank 0's prep trains anything
            check_init_vocab_plan(recipe, run_dir, init)
        changed = changed_settings(state, recipe) if state is not None else []

        def prepare_data() -> bool:  # on rank 0, while the other ranks wait
            # recipe.yaml records the parent checkpoint: this start's, or the resumed run's
            parent = init["meta"] if init is not None else (state or {}).get("init_from")
            _prepare(recipe, run_dir, resumed=state is not None, parent=parent,
                     mirror=mirror, console=console)
            if changed:
                console.print("resuming with settings changed since the last checkpoint: "
                              + ", ".join(changed), highlight=False, soft_wrap=True)
            if clear_choice(run_dir):  # it named a model that training now changes
                log.info("%s: forgotten: training changes the run's checkpoints (the "
                         "end of training chooses again with train.average_last; tune "
                         "the length again with mtkit tune-length)", run_dir / CHOICE)
            return True

        dist.main_result(prepare_data, "rank 0 stopped before training (its error says "
                         "why)")
        setup = build_setup(recipe, run_dir, dist=dist, device=device, state=state,
                            init=init)
        try:
            return Trainer(recipe, run_dir, setup, state=state, dist=dist, device=device,
                           console=console).run()
        finally:
            setup.drop_net()


def _start_state(recipe: Recipe, run_dir: Path, resume: bool | Literal["auto"],
                 console: Console | None) -> dict | None:
    """The checkpoint state to continue from, or None for a new run (after the checks);
    what `--resume auto` chose is said on `console`."""
    if resume == "auto":
        resume = (run_dir / LAST).is_file()
        if console is not None:
            console.print(f"--resume auto: {run_dir / LAST} found, resuming" if resume else
                          f"--resume auto: no checkpoint in {run_dir}, starting a new run",
                          highlight=False, soft_wrap=True)
    return resume_state(recipe, run_dir) if resume else check_fresh(run_dir)


def _prepare(recipe: Recipe, run_dir: Path, *, resumed: bool, parent: dict | None,
             mirror: str | Path | None, console: Console) -> None:
    prepared = is_prepared(recipe, run_dir)
    # Data prepared already (by `mtkit prep`, which printed its report): one line.
    prepare(recipe, run_dir, mirror=mirror, console=None if prepared else console,
            batching=not prepared, parent=parent)
    if resumed and not prepared:  # said once done: prep may refuse (changed inputs)
        log.warning("%s was missing or damaged: prepared again from the recipe's inputs "
                    "before resuming", data_dir(run_dir))
    if prepared:
        console.print(f"prep: {data_dir(run_dir)} is up to date", highlight=False,
                      soft_wrap=True)
