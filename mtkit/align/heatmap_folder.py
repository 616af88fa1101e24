"""The folder of `mtkit align --heatmap DIR`, and which files in it mtkit wrote.

A rerun into the same folder replaces its own heatmaps and removes those it no longer makes
(a shorter input, another --heatmap-format): stale images of another input beside fresh ones
would be taken for this run's. Nothing else is touched: DIR may be new, empty, or a heatmap
folder of an earlier run, which holds MARKER (the names of the files mtkit wrote there) and
nothing else. A name joins the list before its file is written, so a run that dies part-way
(even mid-write, leaving atomic_write's temporary) leaves a folder that the next run still
recognises as its own, and cleans.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mtkit.errors import OptionError
from mtkit.fileio import atomic_write, temporary_of

MARKER = "mtkit-heatmaps.json"

def _refused(folder: Path, why: str) -> OptionError:
    return OptionError.about("heatmap_dir", why, value=folder)


def _read_marker(folder: Path) -> set[str]:
    try:
        names = json.loads((folder / MARKER).read_text(encoding="utf-8"))["files"]
        if not isinstance(names, list) or not all(
                isinstance(n, str) and "/" not in n and n not in ("", ".", "..") for n in names):
            raise TypeError
    except (ValueError, KeyError, TypeError, OSError):
        raise _refused(folder, f"{MARKER} is unreadable; not writing into this "
                      "folder") from None
    return set(names)


def holds(folder: Path, path: Path) -> bool:
    """Whether `path` (not `-`) lies inside `folder`."""
    return str(path) != "-" and Path(os.path.abspath(folder)) in Path(
        os.path.abspath(path)).parents


def owned_files(folder: Path) -> set[str]:
    """The files an earlier `mtkit align --heatmap` wrote into `folder` (none for a new or
    empty folder); OptionError naming heatmap_dir when the folder holds anything else."""
    if not folder.exists():
        ancestor = next((p for p in folder.parents if p.exists()), None)
        if ancestor is not None and not ancestor.is_dir():
            raise _refused(folder, f"cannot make this folder ({ancestor} is a "
                      "file, not a folder)")
        return set()
    if not folder.is_dir():
        raise _refused(folder, "exists and is not a folder")
    present = {p.name for p in folder.iterdir()}
    if not present:
        return set()
    if MARKER not in present:
        raise _refused(folder, f"folder is not empty and holds no heatmaps of "
                      f"mtkit align (no {MARKER}); give a new or empty folder")
    listed = _read_marker(folder)
    foreign = sorted(n for n in present - listed - {MARKER}
                     if temporary_of(n) not in listed | {MARKER})
    if foreign:
        raise _refused(folder, f"holds files mtkit align did not write "
                      f"({', '.join(foreign[:3])}); give a new or empty folder")
    return listed


class HeatmapFolder:
    """The heatmap files of one run: `claim` a name before writing its file, `finish` after
    the last one (removes the earlier run's files that this run did not write)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.listed = owned_files(folder)
        self.written: set[str] = set()

    def claim(self, name: str) -> Path:
        """The path to write `name` to, listed in the marker first."""
        if name not in self.listed:
            self.listed.add(name)
            self._save()
        self.written.add(name)
        return self.folder / name

    def finish(self) -> None:
        self._save()  # makes the folder when nothing was drawn (an empty input)
        for name in sorted(self.listed - self.written):
            (self.folder / name).unlink(missing_ok=True)
        for p in self.folder.iterdir():  # what a killed writer of a listed file left
            if temporary_of(p.name) in self.listed | {MARKER} and p.is_file():
                p.unlink(missing_ok=True)
        self.listed = set(self.written)
        self._save()

    def _save(self) -> None:
        # makes the folder on the first claim
        with atomic_write(self.folder / MARKER, own=True) as f:
            json.dump({"written_by": "mtkit align --heatmap", "files": sorted(self.listed)},
                      f, indent=1)
            f.write("\n")
