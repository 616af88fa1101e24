"""`mtkit align --heatmap DIR`: which folders mtkit writes into, and what a rerun replaces."""

from __future__ import annotations

import json

import pytest

from mtkit.align.heatmap_folder import MARKER, HeatmapFolder, owned_files
from mtkit.errors import ConfigError


def _run(folder, names):
    """One run's writes, as align_files makes them: claim, write, then finish."""
    heatmaps = HeatmapFolder(folder)
    for name in names:
        heatmaps.claim(name).write_text(f"image {name}")
    heatmaps.finish()


def test_a_new_folder_is_made_and_lists_what_was_written(tmp_path):
    folder = tmp_path / "new" / "maps"
    _run(folder, ["align-0000.png", "align-0001.png"])
    assert sorted(p.name for p in folder.iterdir()) == [
        "align-0000.png", "align-0001.png", MARKER]
    assert json.loads((folder / MARKER).read_text())["files"] == [
        "align-0000.png", "align-0001.png"]
    assert owned_files(folder) == {"align-0000.png", "align-0001.png"}


def test_a_rerun_replaces_its_files_and_removes_those_it_no_longer_makes(tmp_path):
    folder = tmp_path / "maps"
    _run(folder, [f"align-000{i}.png" for i in range(4)])
    _run(folder, ["align-0000.svg", "align-0001.svg"])
    assert sorted(p.name for p in folder.iterdir()) == [
        "align-0000.svg", "align-0001.svg", MARKER]


def test_an_empty_folder_is_taken(tmp_path):
    _run(tmp_path, ["align-0000.png"])
    assert (tmp_path / "align-0000.png").exists()


@pytest.mark.parametrize("files", [{"notes.txt": "mine"}, {"align-0000.png": "my own image"}])
def test_a_folder_mtkit_did_not_write_is_refused(tmp_path, files):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError, match="is not empty and holds no heatmaps of mtkit align"):
        HeatmapFolder(tmp_path)
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == files


def test_a_file_added_to_a_heatmap_folder_makes_it_refused(tmp_path):
    _run(tmp_path, ["align-0000.png"])
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"holds files mtkit align did not write \(notes.txt\)"):
        HeatmapFolder(tmp_path)


@pytest.mark.parametrize("marker", ['{"files": ["../../etc/passwd"]}', '{"files": "abc"}',
                                    "[1, 2]", "{not json"])
def test_a_damaged_marker_is_refused(tmp_path, marker):
    (tmp_path / MARKER).write_text(marker)
    (tmp_path / "a").write_text("mine")
    with pytest.raises(ConfigError, match=f"{MARKER} is unreadable"):
        owned_files(tmp_path)


def test_a_file_where_the_folder_should_be_is_refused(tmp_path):
    (tmp_path / "maps").write_text("mine")
    with pytest.raises(ConfigError, match="^heatmap_dir .*maps: exists and is not a folder"):
        owned_files(tmp_path / "maps")
    with pytest.raises(ConfigError, match="cannot make this folder .*maps is a file"):
        owned_files(tmp_path / "maps" / "a" / "b")


def test_a_run_that_dies_part_way_leaves_a_folder_the_next_run_takes(tmp_path):
    heatmaps = HeatmapFolder(tmp_path)
    heatmaps.claim("align-0000.png").write_text("image")
    heatmaps.claim("align-0001.png")  # killed while writing: atomic_write's temporary remains
    (tmp_path / ".align-0001.png.k3j2x_ab.tmp").write_text("half an ima")
    (tmp_path / f".{MARKER}.q0w9e8r_.tmp").write_text('{"fil')  # killed rewriting the list
    assert owned_files(tmp_path) == {"align-0000.png", "align-0001.png"}
    _run(tmp_path, ["align-0000.png"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["align-0000.png", MARKER]
    assert (tmp_path / "align-0000.png").read_text() == "image align-0000.png"


def test_an_empty_run_makes_its_folder(tmp_path):
    _run(tmp_path / "maps", [])
    assert [p.name for p in (tmp_path / "maps").iterdir()] == [MARKER]


def test_only_atomic_writes_temporaries_count_as_mtkits(tmp_path):
    """A user's '.align-0001.png.backup.tmp' is not a temporary of mtkit's (mkstemp's names
    have eight characters): the folder is refused, the file kept."""
    _run(tmp_path, ["align-0001.png"])
    (tmp_path / ".align-0001.png.backup.tmp").write_text("mine")
    with pytest.raises(ConfigError, match="did not write"):
        HeatmapFolder(tmp_path)
    assert (tmp_path / ".align-0001.png.backup.tmp").read_text() == "mine"
