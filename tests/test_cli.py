"""The console entry point itself (`python -m mtkit`): version, and usage errors reported like
every other user error — one line on stderr, exit code 2, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mtkit import __version__


def _mtkit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mtkit", *args], capture_output=True,
                          text=True, timeout=120)


def test_version():
    out = _mtkit("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"mtkit {__version__}"


@pytest.mark.parametrize(("args", "words"), [
    (["translate"], "Missing argument"),
    (["translate", "run", "--beam", "abc"], "'--beam'"),
    (["score", "--bogus"], "No such option: --bogus"),
    (["average", "x", "--last", "1"], "'--last'"),
    (["nosuchcommand"], "No such command"),
])
def test_usage_errors_are_one_line_with_exit_code_2(args, words):
    out = _mtkit(*args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("mtkit: error: ") and words in lines[0]
    assert "--help" in lines[0] and "Traceback" not in out.stderr


def test_bare_mtkit_shows_the_help_without_an_error_line():
    out = _mtkit()
    assert out.returncode == 2 and "Usage" in out.stdout and "Commands" in out.stdout
    assert "error" not in out.stderr


def test_user_errors_keep_exit_code_2_through_the_entry_point(tmp_path):
    out = _mtkit("prep", str(tmp_path / "missing.yaml"))
    assert out.returncode == 2
    assert out.stderr.strip() == f"mtkit: error: {tmp_path / 'missing.yaml'}: recipe file not found"


def test_greedy_on_the_command_line_overrides_a_recipe_nbest():
    from mtkit.cli import _flag_decode_config
    from mtkit.config import DecodeConfig
    from mtkit.errors import ConfigError

    recipe_decode = DecodeConfig(nbest=3)
    assert _flag_decode_config(recipe_decode, method="greedy", nbest=None).nbest == 1
    with pytest.raises(ConfigError, match=r"--nbest \(decode\.nbest\): greedy search gives one"):
        _flag_decode_config(recipe_decode, method="greedy", nbest=2)
