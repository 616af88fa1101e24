"""Files mtkit did not write stay untouched, and hostile or unbounded inputs cost little:
a data/ without its manifest, YAML alias bombs, checkpoints whose weights do not fit their
recipe, an export given to average, over-long align pairs, leftovers of killed commands, NUL
bytes in a corpus. Each through the CLI, as a user runs it."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import RECIPES
from tests.helpers import run_cli

pytestmark = pytest.mark.usefixtures("one_thread")

TOY = RECIPES / "toy.yaml"


def _one_line(res, *needles: str) -> None:
    assert res.exit_code == 2, res.output
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.output, res.output
    for n in needles:
        assert n in res.stderr, res.stderr


@pytest.mark.parametrize("manifest", [None, "garbage", '{"format": 3}'])
def test_prep_keeps_a_users_file_when_the_manifest_is_lost(toy_run, tmp_path, manifest):
    run = tmp_path / "run"
    shutil.copytree(toy_run, run)
    (run / "data" / "manifest.json").unlink()
    if manifest is not None:
        (run / "data" / "manifest.json").write_text(manifest)
    (run / "data" / "notes.txt").write_text("mine\n")
    _one_line(run_cli("prep", TOY, "--run-dir", run), "notes.txt", "did not write")
    assert (run / "data" / "notes.txt").read_text() == "mine\n"
    (run / "data" / "notes.txt").unlink()  # prep's own names alone: prepared again
    assert run_cli("prep", TOY, "--run-dir", run).exit_code == 0
