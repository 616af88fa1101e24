"""A Hub id's download (`mtkit.hf.hub`) against a stand-in for huggingface_hub's
snapshot_download: which files it asks for."""

from __future__ import annotations

import fnmatch
import sys
import types
from pathlib import Path

import pytest

from mtkit.hf import hub
from mtkit.hf.folder import SAFETENSORS, TORCH_BIN

COMMIT = "0123456789abcdef0123456789abcdef01234567"
BASE = ["config.json", "source.spm", "target.spm", "vocab.json", "tf_model.h5"]


def _fake_hub(monkeypatch, tmp_path: Path, repo_files: list[str]) -> list[list[str]]:
    """snapshot_download as huggingface_hub's: the matching files into snapshots/<commit>."""
    asked: list[list[str]] = []

    def snapshot_download(repo_id, *, revision=None, allow_patterns=None):
        asked.append(list(allow_patterns))
        snap = tmp_path / "snapshots" / COMMIT
        snap.mkdir(parents=True, exist_ok=True)
        for name in repo_files:
            if any(fnmatch.fnmatch(name, p) for p in allow_patterns):
                (snap / name).write_text(name)
        return str(snap)

    monkeypatch.setitem(sys.modules, "huggingface_hub",
                        types.SimpleNamespace(snapshot_download=snapshot_download))
    return asked


@pytest.mark.parametrize("weights", [[SAFETENSORS, TORCH_BIN], [TORCH_BIN], [SAFETENSORS]])
def test_the_weights_are_downloaded_once(monkeypatch, tmp_path, weights) -> None:
    asked = _fake_hub(monkeypatch, tmp_path, BASE + weights)
    path, repo, revision = hub.download("Helsinki-NLP/opus-mt-en-de")
    assert (repo, revision) == ("Helsinki-NLP/opus-mt-en-de", COMMIT)
    fetched = sorted(p.name for p in path.iterdir())
    want = SAFETENSORS if SAFETENSORS in weights else TORCH_BIN
    assert fetched == sorted([*BASE[:-1], want])  # no tf_model.h5, one weights file
    assert len(asked) == (1 if want == SAFETENSORS else 2)
