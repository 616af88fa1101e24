"""`mtkit prep`, `mtkit train` and `mtkit average`: the commands that write a run directory."""

from __future__ import annotations

import os
import shlex
import signal
from pathlib import Path
from typing import Annotated, Any

import typer

from mtkit.cli.options import (
    HelpOpt,
    MirrorOpt,
    RecipeArg,
    RunDirOpt,
    SetOpt,
    at_least,
    flag,
)
from mtkit.errors import DataError


def run_dir_for(recipe_name: str, run_dir: Path | None) -> Path:
    return run_dir if run_dir is not None else Path("runs") / recipe_name


class _DownloadBars:
    """A rich progress bar per downloaded file, on stderr; started by the first download."""

    def __init__(self, console: Any) -> None:
        from rich.progress import DownloadColumn, Progress, TransferSpeedColumn

        # Off the terminal nothing is redrawn: a bar would be printed once, whole, at the
        # end, after the report (`close` says what was fetched instead).
        self._bar = Progress(*Progress.get_default_columns(), DownloadColumn(),
                             TransferSpeedColumn(), console=console,
                             disable=not console.is_terminal)
        self._console = console
        self._tasks: dict[str, Any] = {}
        self._verified: dict[str, int] = {}

    def __call__(self, name: str, done: int, total: int | None) -> None:
        if not self._tasks:
            self._bar.start()
        if name not in self._tasks:
            self._tasks[name] = self._bar.add_task(f"download {name}", total=total)
        self._bar.update(self._tasks[name], completed=done, total=total)

    def verified(self, name: str, size: int) -> None:
        self._verified[name] = size

    def close(self) -> None:
        if self._tasks:
            self._bar.stop()
            if not self._console.is_terminal:  # no bar was drawn: say what was fetched
                for name, size in self._verified.items():
                    self._console.print(f"downloaded {name} ({size} bytes)")


def prep(
    recipe: RecipeArg,
    overrides: SetOpt = None,
    run_dir: RunDirOpt = None,
    mirror: MirrorOpt = None,
    force: Annotated[bool, flag("--force", help="Prepare again even if up to date.")] = False,
    _help: HelpOpt = False,
) -> None:
    """Prepare a recipe's data: fetch, clean, train sentencepiece, binarize, report batching.

    RECIPE is a recipe YAML file, e.g. recipes/en-de.yaml. Writes data/ and recipe.yaml into
    the run directory (--run-dir); does nothing when they are up to date.

    Example: MTKIT_DATA_MIRROR=../shared/data/multi30k mtkit prep recipes/en-de.yaml
    """
    from rich.console import Console

    from mtkit.config import load_recipe
    from mtkit.data.prep import prepare

    _check_mirror(mirror)
    rec = load_recipe(recipe, overrides or [])
    console = Console(stderr=True, soft_wrap=True)  # a log's lines stay whole (no 80 columns)
    bars = _DownloadBars(console)
    try:
        prepare(rec, run_dir_for(rec.name, run_dir), mirror=mirror, console=console,
                on_download=bars, force=force)
    finally:
        bars.close()


def _resume_mode(value: str) -> str:
    """`--resume` (given as `last` by `mtkit.cli._optional_resume`) or `--resume auto`."""
    if value not in ("last", "auto"):
        raise typer.BadParameter(f"expected no value or `auto`, got {value!r}")
    return value


def train(
    recipe: RecipeArg,
    overrides: SetOpt = None,
    run_dir: RunDirOpt = None,
    mirror: MirrorOpt = None,
    resume: Annotated[str | None, typer.Option(
        "--resume", metavar="MODE", parser=_resume_mode, help="Continue the run in the run "
        "directory from its last.pt (same recipe); MODE is optional. --resume auto: resume "
        "when it has a checkpoint, start when it has none (a restarted job's unchanged "
        "command line).")] = None,
    init_from: Annotated[str | None, typer.Option(
        "--init-from", metavar="RUN_OR_CHECKPOINT", help="Start a new run from this run's "
        "best.pt (else last.pt) or checkpoint file: its weights, with a fresh optimizer, "
        "schedule and best score (fine-tuning; needs the parent's vocabulary, "
        "data.spm.from_run).")] = None,
    device: Annotated[str | None, typer.Option(
        "--device", metavar="DEVICE", help="auto (CUDA, then MPS, then CPU), cpu, cuda, "
        "cuda:N or mps; sets train.device (default: the recipe's).")] = None,
    threads: Annotated[int | None, typer.Option(
        "--threads", metavar="N", parser=at_least(0), help="CPU threads, 0 for torch's "
        "default; sets train.threads (default: the recipe's).")] = None,
    _help: HelpOpt = False,
) -> None:
    """Train a model: prepare the data if needed, then train, validate and checkpoint.

    RECIPE is a recipe YAML file, e.g. recipes/en-de.yaml. Writes into the run directory
    (--run-dir): recipe.yaml, data/, the checkpoints, metrics.jsonl and train.log.

    Example: mtkit train recipes/en-de.yaml --set train.max_time=10m

    On several GPUs: torchrun --nproc_per_node=4 -m mtkit train recipes/en-de.yaml
    """
    from rich.console import Console

    from mtkit.config import load_recipe
    from mtkit.train.session import train as run_training

    _check_mirror(mirror)
    flags = {"--device": device, "--threads": threads}  # the recipe fields they set
    named = {f"train.{name[2:]}={value}": f"{name} {value}"
             for name, value in flags.items() if value is not None}
    rec = load_recipe(recipe, list(overrides or []) + list(named), flags=named)
    result = run_training(rec, run_dir_for(rec.name, run_dir),
                          resume="auto" if resume == "auto" else resume is not None,
                          init_from=init_from, mirror=mirror,
                          console=Console(stderr=True, soft_wrap=True),
                          device_option="train.device" if device is None else "--device")
    if result.reason == "interrupted":
        from mtkit.train.distributed import dist_from_env

        code = 128 + signal.Signals[result.signal or "SIGINT"]  # as the shell
        dist = dist_from_env()
        if not dist.is_main:  # under torchrun rank 0 tells, once
            raise typer.Exit(code)
        # A resume in fewer processes would start the next epoch afresh (Trainer._restore):
        # the launch is said again (torchrun sets LOCAL_WORLD_SIZE; several nodes need their
        # rendezvous options too, which mtkit cannot see)
        local = int(os.environ.get("LOCAL_WORLD_SIZE", dist.world_size))
        launch = ["mtkit"] if not dist.enabled else [
            "torchrun", *([f"--nnodes={dist.world_size // local}"]
                          if dist.world_size > local else []),
            f"--nproc_per_node={local}", "-m", "mtkit"]
        again = shlex.join([*launch, "train", str(recipe),
                            *(a for s in overrides or [] for a in ("--set", s)),
                            *(["--run-dir", str(run_dir)] if run_dir else []),
                            *(a for name, value in flags.items() if value is not None
                              for a in (name, str(value))), "--resume"])
        typer.echo(f"mtkit: training interrupted at update {result.update:,}; checkpoint saved "
                   f"to {result.checkpoint}. Resume with:\n  {again}", err=True)
        raise typer.Exit(code)


def average(
    inputs: Annotated[list[Path], typer.Argument(
        metavar="RUN_OR_CHECKPOINT", hidden=True, show_default=False)],
    last: Annotated[int | None, typer.Option(
        "--last", "-n", metavar="N", parser=at_least(2), help="Average the newest N "
        "numbered checkpoints (checkpoint_UPDATE.pt) of the run directory, N >= 2 "
        "(default: every one kept).")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", metavar="FILE", help="Where to write the average: a new file or a "
        "checkpoint, in a run directory (beside its data/ folder) (default: averaged.pt in "
        "the run directory, or beside the first file).")] = None,
    _help: HelpOpt = False,
) -> None:
    """Average the weights of several checkpoints (Vaswani et al. 2017) into one checkpoint.

    RUN_OR_CHECKPOINT is a run directory (its numbered checkpoints are averaged) or two or
    more checkpoint files. The average is a checkpoint that translate, score and align accept.

    Example: mtkit average runs/en-de-multi30k --last 3
    """
    from mtkit.process.lock import run_read_lock

    # A run being trained prunes its numbered checkpoints: it is named as busy, where its
    # files vanished under the average ('checkpoint_114.pt: checkpoint not found'). The lock
    # is shared: averages of one run do not wait for each other.
    with run_read_lock(inputs[0] if inputs[0].is_dir() else inputs[0].parent):
        _average(inputs, last, output)


def _average(inputs: list[Path], last: int | None, output: Path | None) -> None:
    from mtkit.data.spm import Tokenizer
    from mtkit.run import average_destination, data_dir, vocab_info
    from mtkit.train.checkpoint import check_averageable, save_average, select_for_average

    paths = select_for_average(inputs, last)
    out = average_destination(inputs, paths, output)
    check_averageable(paths, vocab_info(Tokenizer.load(data_dir(out.parent))))
    save_average(paths, out)
    typer.echo(f"mtkit: averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) "
               f"into {out}", err=True)



def _check_mirror(mirror: Path | None) -> None:
    """A --mirror folder that is not there: said before the network is tried instead."""
    if mirror is not None and not mirror.is_dir():
        raise DataError(f"--mirror {mirror}: no such folder")
