"""The `mtkit` command line: parse arguments, call one library function, and turn user errors
into one line on stderr with exit code 2. No ML logic lives here."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from mtkit import __version__
from mtkit.errors import MtkitError

app = typer.Typer(
    name="mtkit",
    help="Neural machine translation: prep data, train RNN or Transformer models, translate, "
    "score and look at attention.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_DEBUG = {"on": False}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mtkit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show full tracebacks on errors.")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    _DEBUG["on"] = debug or os.environ.get("MTKIT_DEBUG") == "1"


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Map MtkitError (and a few OS errors a user causes) to one stderr line and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MtkitError as e:
            if _DEBUG["on"]:
                raise
            typer.echo(f"mtkit: error: {e}", err=True)
            raise typer.Exit(2) from None
        except BrokenPipeError:
            # `mtkit translate ... | head` closes our stdout early: not an error.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise typer.Exit(0) from None
        except KeyboardInterrupt:
            typer.echo("mtkit: interrupted", err=True)
            raise typer.Exit(130) from None

    return wrapper


RecipeArg = Annotated[Path, typer.Argument(help="Recipe YAML file, e.g. recipes/en-de.yaml.",
                                           show_default=False)]
SetOpt = Annotated[list[str] | None, typer.Option(
    "--set", help="Override a recipe field, e.g. --set train.lr=3e-4 (repeatable).")]
RunDirOpt = Annotated[Path | None, typer.Option(
    "--run-dir", help="Run directory (default: runs/<recipe name>/ under the current folder).")]
MirrorOpt = Annotated[Path | None, typer.Option(
    "--mirror", help="Take data files by file name from this folder instead of the network "
    "(default: $MTKIT_DATA_MIRROR).")]


def run_dir_for(recipe_name: str, run_dir: Path | None) -> Path:
    return run_dir if run_dir is not None else Path("runs") / recipe_name


# Commands are added below, each once it works.


class _DownloadBars:
    """A rich progress bar per downloaded file, on stderr; started by the first download."""

    def __init__(self, console: Any) -> None:
        from rich.progress import DownloadColumn, Progress, TransferSpeedColumn

        self._bar = Progress(*Progress.get_default_columns(), DownloadColumn(),
                             TransferSpeedColumn(), console=console)
        self._tasks: dict[str, Any] = {}

    def __call__(self, name: str, done: int, total: int | None) -> None:
        if not self._tasks:
            self._bar.start()
        if name not in self._tasks:
            self._tasks[name] = self._bar.add_task(f"download {name}", total=total)
        self._bar.update(self._tasks[name], completed=done, total=total)

    def close(self) -> None:
        if self._tasks:
            self._bar.stop()


@app.command()
@user_errors
def prep(
    recipe: RecipeArg,
    overrides: SetOpt = None,
    run_dir: RunDirOpt = None,
    mirror: MirrorOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Prepare again even if up to date.")]
    = False,
) -> None:
    """Prepare a recipe's data: fetch, clean, train sentencepiece, binarize, report batching.

    Writes RUN_DIR/data/ and RUN_DIR/recipe.yaml; does nothing when already up to date.

    Example: MTKIT_DATA_MIRROR=../shared/data/multi30k mtkit prep recipes/en-de.yaml
    """
    from rich.console import Console

    from mtkit.config import load_recipe
    from mtkit.data.prep import prepare

    rec = load_recipe(recipe, overrides or [])
    console = Console(stderr=True)
    bars = _DownloadBars(console)
    try:
        prepare(rec, run_dir_for(rec.name, run_dir), mirror=mirror, console=console,
                on_download=bars, force=force)
    finally:
        bars.close()


def main() -> None:
    app()
