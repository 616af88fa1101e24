"""Links inside the folders mtkit owns (a run directory, its data/ and translations/, an
export, a heatmap folder) are replaced, never written through: every file mtkit writes there
is made a link to a file outside, the command that writes it is run, and no outside file may
change."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers import RECIPES, run_cli

pytestmark = pytest.mark.usefixtures("one_thread")

TOY = RECIPES / "toy.yaml"
# The toy model's training (tests/conftest.py toy_model), resumed for a few more updates.
TRAIN = ["--set", "train.max_time=null", "--set", "train.valid_every=400"]


def _link_all(folder: Path, names: list[str], outside: Path, *, read: tuple[str, ...] = ()
              ) -> dict[Path, bytes]:
    """Each name in `folder` made a link to its own file in `outside`; their contents. The
    files mtkit reads (`read`: their suffixes) hold a copy of what was there, so that mtkit
    goes on as usual; the others something else, so that writing the same bytes shows."""
    outside.mkdir(exist_ok=True)
    kept = {}
    for name in names:
        target = outside / name.replace("/", "_")
        same = name.endswith(read) if read else True
        target.write_bytes((folder / name).read_bytes() if same else b"not mtkit's\n")
        link = folder / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        kept[target] = target.read_bytes()
    return kept


def _untouched(kept: dict[Path, bytes]) -> None:
    for target, data in kept.items():
        assert target.read_bytes() == data, f"{target} was written through a link"


def test_train_and_prep_replace_links_in_the_run(toy_model, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    names = ["recipe.yaml", "train.log", "metrics.jsonl", ".mtkit.lock",
             "data/manifest.json", "last.pt", "best.pt"]
    (run / ".mtkit.lock").touch()
    kept = _link_all(run, names, tmp_path / "outside")
    res = run_cli("prep", TOY, "--run-dir", run, *TRAIN)
    assert res.exit_code == 0, res.output
    res = run_cli("train", TOY, "--run-dir", run, "--resume", *TRAIN,
                  "--set", "train.max_updates=410")
    assert res.exit_code == 0, res.output
    _untouched(kept)
    for name in [*names[:4], "last.pt"]:  # files of the run now (nothing had a reason to
        assert not (run / name).is_symlink(), name  # write the manifest or best.pt)
    assert "410" in (run / "metrics.jsonl").read_text()


def test_score_align_and_export_replace_links_in_their_folders(toy_model, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    outside = tmp_path / "outside"
    # score --run's cached translation and its key
    res = run_cli("score", "--run", run, "--split", "test")
    assert res.exit_code == 0, res.output
    cached = sorted(p.relative_to(run).as_posix() for p in (run / "translations").iterdir())
    kept = _link_all(run, cached, outside, read=(".key",))
    res = run_cli("score", "--run", run, "--split", "test")
    assert res.exit_code == 0, res.output
    # a heatmap folder's record and images
    src = run / "data" / "test.src.txt"
    maps = tmp_path / "maps"
    args = ["align", run, "-s", src, "--heatmap", maps]
    assert run_cli(*args).exit_code == 0
    kept |= _link_all(maps, sorted(p.name for p in maps.iterdir()), outside, read=(".json",))
    res = run_cli(*args)
    assert res.exit_code == 0, res.output
    # a previous export written again
    pytest.importorskip("ctranslate2")
    export = tmp_path / "export"
    assert run_cli("export", run, "-o", export).exit_code == 0
    files = sorted(p.name for p in export.iterdir() if p.is_file())
    kept |= _link_all(export, files, outside, read=("mtkit-export.json",))
    res = run_cli("export", run, "-o", export)
    assert res.exit_code == 0, res.output
    _untouched(kept)
