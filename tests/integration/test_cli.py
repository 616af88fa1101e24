"""The console entry point itself (`python -m mtkit`): version, and usage errors reported like
every other user error — one line on stderr, exit code 2, no traceback."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from mtkit import __version__
from tests.helpers import REPO, run_mtkit

_mtkit = run_mtkit


def test_version():
    out = _mtkit("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"mtkit {__version__}"


@pytest.mark.parametrize(("args", "words"), [
    (["translate"], "Missing argument"),
    (["translate", "run", "--beam", "abc"], "'--beam'"),
    (["score", "--bogus"], "No such option: --bogus"),
    (["average", "x", "--last", "1"], "'--last'"),
    (["nosuchcommand"], "No such command"),
    (["translate", "run", "--beam"], "Option '--beam' requires an argument"),
])
def test_usage_errors_are_one_line_with_exit_code_2(args, words):
    out = _mtkit(*args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("mtkit: error: ") and words in lines[0]
    # the help of the command typed (a missing option value pointed at `mtkit --help`)
    command = "mtkit" if args[0] == "nosuchcommand" else f"mtkit {args[0]}"
    assert lines[0].endswith(f"{command} --help`)") and "Traceback" not in out.stderr


@pytest.mark.parametrize(("args", "said"), [
    (["export", "run", "-o", ""], "-o: an empty value"),
    (["align", "run", "-s", "x", "--heatmap="], "--heatmap: an empty value"),
    (["translate", ""], "an empty argument"),
    (["translate", "run", "--beam", "-1", ""], "an empty argument"),  # not "-1: an empty value"
    (["translate", "run", "--", ""], "an empty argument"),
])
def test_an_empty_value_is_refused(args, said, tmp_path, monkeypatch):
    """An empty value (`-o "$UNSET"`) parsed as a path is `.`: export filled the current
    folder when it was empty, --heatmap drew into it."""
    monkeypatch.chdir(tmp_path)
    out = _mtkit(*args)
    assert out.returncode == 2 and out.stderr == f"mtkit: error: {said}; expected a value\n"
    assert not list(tmp_path.iterdir())


def test_bare_mtkit_shows_the_help_without_an_error_line():
    out = _mtkit()
    assert out.returncode == 2 and "Usage" in out.stdout and "Commands" in out.stdout
    assert "error" not in out.stderr


def test_user_errors_keep_exit_code_2_through_the_entry_point(tmp_path):
    out = _mtkit("prep", str(tmp_path / "missing.yaml"))
    assert out.returncode == 2
    assert out.stderr.strip() == f"mtkit: error: {tmp_path / 'missing.yaml'}: recipe file not found"


def test_greedy_on_the_command_line_overrides_a_recipe_nbest():
    from mtkit.cli.options import DecodeFlags
    from mtkit.config import DecodeConfig
    from mtkit.errors import ConfigError

    recipe_decode = DecodeConfig(nbest=3)
    assert DecodeFlags(method="greedy").over(recipe_decode).nbest == 1
    with pytest.raises(ConfigError, match=r"--nbest \(decode\.nbest\): greedy search gives one"):
        DecodeFlags(method="greedy", nbest=2).over(recipe_decode)


# --------------------------------------------------------------------------- help screens

COMMANDS = ["prep", "train", "average", "score", "translate", "align", "export", "import"]


def _help(*args: str, columns: int) -> str:
    from typer.testing import CliRunner

    from mtkit.cli import app

    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.stdout


def _command(name: str):
    import typer.main

    from mtkit.cli import app

    return typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("command", [[], *([c] for c in COMMANDS)])
def test_help_shows_no_python_types_and_no_cut_text(command, columns):
    text = _help(*command, columns=columns)
    for bad in ("<bool>", "<int", "<float", "<str>", "<path>", "<list", "list[", "[x>=",
                "…", "runs//"):
        assert bad not in text, (bad, text)
    # typer 0.29 marks a required argument {LIKE_THIS} on the usage line, which reads as a
    # choice: the usage is written as the README writes it
    assert "{" not in text, text
    assert len(max(text.splitlines(), key=len)) <= columns


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_has_a_capital_metavar_and_every_switch_none(name):
    for param in _command(name).params:
        if param.param_type_name == "argument":
            assert re.fullmatch(r"[A-Z_]+", param.metavar), (name, param.name)
        elif param.is_flag:
            assert param.metavar == "", (name, param.opts)
        else:
            assert re.fullmatch(r"[A-Z_]+(=[A-Z_]+)?", param.metavar), (name, param.opts)


def test_the_command_list_shows_each_summary_whole():
    text = _help(columns=200)
    for name in COMMANDS:
        summary = " ".join(_command(name).help.split("\n\n")[0].split())
        rows = [line for line in text.splitlines() if line.startswith(f"│ {name} ")]
        assert len(rows) == 1 and summary in rows[0], (summary, rows)


@pytest.mark.parametrize("name", COMMANDS)
def test_a_line_break_in_the_source_of_a_help_text_is_a_space(name):
    lines = _help(name, columns=300).splitlines()
    for paragraph in _command(name).help.split("\n\n"):
        whole = " ".join(paragraph.split())
        assert any(whole in line for line in lines), (whole, lines)


@pytest.mark.parametrize("name", ["translate", "align", "score"])
def test_value_options_state_their_default(name):
    # inputs, and outputs that are off unless named
    no_default = {"--src", "--tgt", "--ref", "--split", "--run", "--self-attention", "--heatmap",
                  "--pharaoh", "--json", "--gold", "--plot"}
    for param in _command(name).params:
        if param.param_type_name == "option" and not param.is_flag and not (
                no_default & set(param.opts)):
            assert "(default: " in param.help, (name, param.opts)


def test_usage_lines_read_as_the_readme_writes_them():
    usages = {name: " ".join(_help(name, columns=120).split("\n", 2)[1].split())
              for name in COMMANDS}
    assert usages["train"] == "Usage: mtkit train [OPTIONS] RECIPE"
    assert usages["translate"] == "Usage: mtkit translate [OPTIONS] RUN_OR_CHECKPOINT..."
    assert usages["score"] == "Usage: mtkit score [OPTIONS] [HYP]..."


def test_one_name_per_idea_across_commands():
    align, translate = _help("align", columns=120), _help("translate", columns=120)
    assert "--align-method" in align and "--align-method" in translate
    assert "--heatmap-format" in align and "--format " not in align
    assert "--method " not in align and "--format" in translate
    for old in (["--method", "union"], ["--format", "svg"]):
        out = _mtkit("align", "run", "-s", "src.txt", *old)
        assert out.returncode == 2 and f"No such option: {old[0]}" in out.stderr
    # --format is translate's text or jsonl; export names the engine it writes for
    export = _help("export", columns=120)
    assert "--engine" in export and "--format" not in export
    out = _mtkit("export", "run", "-o", "out", "--format", "ctranslate2")
    assert out.returncode == 2 and "No such option: --format" in out.stderr


@pytest.mark.parametrize("name", COMMANDS)
def test_short_help_flag_works_everywhere(name):
    from typer.testing import CliRunner

    from mtkit.cli import app

    result = CliRunner().invoke(app, [name, "-h"])
    assert result.exit_code == 0 and "Usage: mtkit " + name in result.stdout


def test_a_count_below_its_least_value_is_a_usage_error():
    out = _mtkit("translate", "run", "--threads", "-1")
    assert out.returncode == 2 and "'--threads'" in out.stderr
    assert "expected a whole number >= 0, got '-1'" in out.stderr


# --------------------------------------------------------------------------- train --threads


def test_train_threads_sets_train_threads_and_the_resume_hint_keeps_it(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from typer.testing import CliRunner

    import mtkit.train.session
    from mtkit.cli import app

    seen = {}

    def fake_train(recipe, run_dir, **kwargs):
        seen["recipe"] = recipe
        return SimpleNamespace(reason="interrupted", update=3, checkpoint=run_dir / "last.pt",
                               signal=seen.get("signal", "SIGINT"))

    monkeypatch.setattr(mtkit.train.session, "train", fake_train)
    toy = REPO / "recipes" / "toy.yaml"
    result = CliRunner().invoke(app, ["train", str(toy), "--run-dir", str(tmp_path),
                                      "--device", "cpu", "--threads", "3"])
    assert result.exit_code == 130, result.output
    assert seen["recipe"].train.threads == 3 and seen["recipe"].train.device == "cpu"
    assert result.stderr.strip().endswith(
        f"mtkit train {toy} --run-dir {tmp_path} --device cpu --threads 3 --resume")
    seen["signal"] = "SIGTERM"  # 128 + 15, as a shell reports a process that SIGTERM ended
    result = CliRunner().invoke(app, ["train", str(toy), "--run-dir", str(tmp_path)])
    assert result.exit_code == 143 and "Resume with" in result.stderr, result.output


def test_train_names_the_flag_that_asked_for_a_missing_device(monkeypatch, tmp_path):
    import torch
    from typer.testing import CliRunner

    from mtkit.cli import app

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a CPU-only host
    toy = REPO / "recipes" / "toy.yaml"
    for args, named in ((["--device", "cuda"], "--device"),
                        (["--set", "train.device=cuda"], "train.device")):
        result = CliRunner().invoke(app, ["train", str(toy), "--run-dir",
                                          str(tmp_path / "run"), *args])
        assert result.exit_code == 2, result.output
        expected = f"mtkit: error: {named}: 'cuda' requested but"
        assert result.stderr.startswith(expected), result.stderr
        assert not (tmp_path / "run").exists()


def test_train_threads_refuses_a_negative_count(tmp_path):
    toy = REPO / "recipes" / "toy.yaml"
    out = _mtkit("train", str(toy), "--run-dir", str(tmp_path), "--threads", "-2")
    assert out.returncode == 2 and "'--threads'" in out.stderr


# --------------------------------------------------------------------------- prep inside train


def test_train_prints_the_prep_report_once(tmp_path):
    from typer.testing import CliRunner

    from mtkit.cli import app

    toy = REPO / "recipes" / "toy.yaml"
    result = CliRunner().invoke(app, ["train", str(toy), "--run-dir", str(tmp_path / "run"),
                                      "--set", "train.max_updates=1"])
    assert result.exit_code == 0, result.output
    for title in ("cleaning the training split", "prepared splits", "batching:",
                  "prep: wrote"):
        assert result.stderr.count(title) == 1, (title, result.stderr)


def test_prep_then_train_shows_the_prep_report_once(tmp_path):
    """`make demo` runs `mtkit prep` and then `mtkit train`: the second finds the data up to
    date and says so in one line instead of printing the tables again."""
    from typer.testing import CliRunner

    from mtkit.cli import app

    toy = REPO / "recipes" / "toy.yaml"
    run = tmp_path / "run"
    prep = CliRunner().invoke(app, ["prep", str(toy), "--run-dir", str(run)])
    assert prep.exit_code == 0 and "prepared splits" in prep.stderr
    train = CliRunner().invoke(app, ["train", str(toy), "--run-dir", str(run),
                                     "--set", "train.max_updates=1"])
    assert train.exit_code == 0, train.output
    assert "prepared splits" not in train.stderr and "batching:" not in train.stderr
    assert f"prep: {run / 'data'} is up to date" in train.stderr


_TERM_WHILE_PARSING = """
import os, signal, sys
try:  # typer >= 0.20 vendors click
    from typer._click import core
except ImportError:
    from click import core
parse = core.Command.parse_args
def parse_args(self, ctx, args):
    os.kill(os.getpid(), signal.SIGTERM)  # arrives while the command is being set up
    return parse(self, ctx, args)
core.Command.parse_args = parse_args
sys.argv = ["mtkit", "score", "-r", "ref", "hyp"]
from mtkit.cli import main
main()
"""


def test_a_sigterm_while_a_command_is_set_up_says_so(tmp_path):
    """It exited 130 with nothing said (typer turned it into its Ctrl-C exit), or 1 with a
    traceback."""
    done = subprocess.run([sys.executable, "-c", _TERM_WHILE_PARSING], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 143, done.stderr
    assert done.stderr == "mtkit: terminated (SIGTERM)\n"
