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


def main() -> None:
    app()
