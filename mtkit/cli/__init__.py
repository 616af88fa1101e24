"""The `mtkit` command line: parse arguments into typed requests, call one library function,
and turn user errors into one line on stderr with exit code 2. No ML logic lives here.

One module per command group: `data` (prep, train, average), `translate` (translate,
export), `score` (score, tune-length), `align`, `serve`, `hf` (import); `options` holds what
they share. The commands are registered below, in the order `mtkit --help` lists them."""

from __future__ import annotations

import functools
import os
import re
import signal
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from mtkit import __version__
from mtkit.cli import align, data, hf, score, serve, translate
from mtkit.cli.options import HelpOpt, flag, message_of
from mtkit.errors import MtkitError, Terminated
from mtkit.process import pipes, startup

# How the help reads. Markdown: a source line break inside a paragraph is a space, in the
# command list too (typer's "rich" mode keeps it there, and breaks sentences).
app = typer.Typer(
    name="mtkit",
    help="Neural machine translation: prep data, train RNN or Transformer models, translate, "
    "score and look at attention.",
    no_args_is_help=True,
    add_completion=False,
    add_help_option=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)

_DEBUG = {"on": False}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mtkit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[bool, flag("--debug", help="Show full tracebacks on errors.")] = False,
    version: Annotated[bool, flag("--version", callback=_version, is_eager=True,
                                  help="Print the version and exit.")] = False,
    _help: HelpOpt = False,
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
            typer.echo(f"mtkit: error: {message_of(e)}", err=True)
            raise typer.Exit(2) from None
        except BrokenPipeError:
            # `mtkit translate ... | head` closes our stdout early: not an error.
            startup.drop_stdout()
            raise typer.Exit(0) from None
        except OSError as e:
            # A file the user named that the system refuses (permissions, a folder in the
            # way); writes are reported by fileio.WriteError, this is the last resort.
            if _DEBUG["on"] or e.filename is None:
                raise
            typer.echo(f"mtkit: error: {e.filename}: {e.strerror or e}", err=True)
            raise typer.Exit(2) from None
        except Terminated as e:
            raise typer.Exit(_terminated(e.signum)) from None
        except KeyboardInterrupt:
            typer.echo("mtkit: interrupted", err=True)
            raise typer.Exit(130) from None

    return wrapper


class _Command(TyperCommand):
    """A command whose usage line names its arguments as the README does (`mtkit train
    [OPTIONS] RECIPE`): typer writes a required one in braces, `{RECIPE}`, which reads as a
    choice."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [re.sub(r"^\{(.+)\}(\.\.\.)?$", r"\1\2", piece)
                for piece in super().collect_usage_pieces(ctx)]


_COMMANDS = (data.prep, data.train, data.average, score.score, score.tune_length,
             translate.translate,
             translate.export, align.align, serve.serve)
for _command in _COMMANDS:
    app.command(add_help_option=False, cls=_Command)(user_errors(_command))
app.command("import", add_help_option=False, cls=_Command)(user_errors(hf.import_))


def main() -> None:
    """The console script: like `app()`, but a usage error (unknown option, bad or missing
    argument) is one line on stderr, exit code 2, as every other user error."""
    try:
        _main()
    except SystemExit as e:
        if _interrupted(e.code):  # main owns the process (the console script's entry point)
            startup.end_interrupted(e.code)
        raise
    finally:  # the command is over: a signal now ends the process, not an exit handler
        startup.default_signals()


def _interrupted(code: object) -> bool:
    """Whether `code` is the exit of a command stopped by Ctrl-C (130) or by the termination
    signal it was sent (128 + it)."""
    return code in [128 + s for s in (signal.SIGINT, *startup.TERMINATED)]


def _main() -> None:
    startup.own_process()
    startup.handle_termination()
    startup.hold_closed_stdout()
    empty = _empty_argument(sys.argv[1:])
    if empty:
        typer.echo(f"mtkit: error: {empty}", err=True)
        sys.exit(2)
    sys.argv[1:] = _optional_resume(sys.argv[1:])
    rc = _run_app()
    if rc == 130 and startup.TERMINATED:  # typer's own exit for a KeyboardInterrupt it caught
        sys.exit(_terminated(startup.TERMINATED[0]))
    pipes.flush_stdout()  # what is still buffered (a table, --help) goes now
    startup.before_exit()
    sys.exit(rc if isinstance(rc, int) else 0)


def _run_app() -> object:
    """The command's return code, its errors said in one line and turned into exits."""
    # typer >= 0.20 raises its vendored click's exceptions (a private module: the usage-error
    # and bare-`mtkit` tests of tests/integration/test_cli.py fail if it moves); older typer,
    # click's own
    try:
        from typer._click.exceptions import ClickException, UsageError
    except ImportError:
        from click.exceptions import ClickException, UsageError

    stdout_was = pipes.stdout_file()
    try:
        return app(standalone_mode=False)
    except SystemExit as e:
        # click and rich turn a write to a closed pipe (`mtkit --help | head -1`, a table)
        # into exit 1 (click catches BrokenPipeError itself); the reader having gone is no
        # failure of ours
        if e.code == 1 and pipes.reader_gone(stdout_was):
            startup.drop_stdout()
            sys.exit(0)
        raise
    except UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # bare `mtkit`: the help is already shown
            sys.exit(e.exit_code)
        where = e.ctx.command_path if e.ctx is not None else _command_path()
        typer.echo(f"mtkit: error: {e.format_message()} (see `{where} --help`)", err=True)
        sys.exit(2)
    except ClickException as e:
        typer.echo(f"mtkit: error: {e.format_message()}", err=True)
        sys.exit(e.exit_code)
    except Terminated as e:  # arrived while the command was being set up, outside its wrapper
        sys.exit(_terminated(e.signum))
    except typer.Abort:  # click's for a KeyboardInterrupt it caught: ours if a signal was
        sys.exit(_terminated(startup.TERMINATED[0]) if startup.TERMINATED else 130)


def _terminated(signum: int) -> int:
    """Say that signal `signum` (SIGTERM, SIGHUP) ended the command; the exit code the shell
    gives a process it ended, 128 + the signal."""
    typer.echo(f"mtkit: terminated ({signal.Signals(signum).name})", err=True)
    return 128 + signum


def _empty_argument(argv: list[str]) -> str | None:
    """An empty argument (`-o ""`, `-o "$UNSET"`) named by its flag. Parsed as a path it is
    `.`: `export -o ""` filled the current folder, `--heatmap ""` drew into it."""
    for i, arg in enumerate(argv):
        if arg == "--":  # what follows is no option
            return "an empty argument; expected a value" if "" in argv[i + 1:] else None
        if arg == "" and i and re.fullmatch(r"--[a-z][\w-]*|-[a-zA-Z]", argv[i - 1]):
            return f"{argv[i - 1]}: an empty value; expected a value"
        if arg == "":
            return "an empty argument; expected a value"
        if re.fullmatch(r"--[a-z][\w-]*=", arg):
            return f"{arg[:-1]}: an empty value; expected a value"
    return None


def _optional_resume(argv: list[str]) -> list[str]:
    """`train --resume` takes an optional value, `auto`, which click cannot parse: a bare
    `--resume` is given as `--resume=last`, and `--resume auto` as `--resume=auto`."""
    if next((a for a in argv if not a.startswith("-")), None) != "train":
        return argv
    out, i = [], 0
    while i < len(argv):
        if argv[i] == "--":  # what follows is no option
            return out + argv[i:]
        if argv[i] != "--resume":
            out.append(argv[i])
        elif i + 1 < len(argv) and argv[i + 1] == "auto":
            out.append("--resume=auto")
            i += 1
        else:
            out.append("--resume=last")
        i += 1
    return out


def _command_path() -> str:
    """`mtkit COMMAND` as typed, for a usage error that came without its context (click
    raises 'Option --beam requires an argument' without one): it pointed at `mtkit --help`."""
    names = {fn.__name__ for fn in _COMMANDS}
    command = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    return f"mtkit {command}" if command in names else "mtkit"
