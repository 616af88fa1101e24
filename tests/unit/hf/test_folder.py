"""Reading a Marian folder (`mtkit.hf.folder`) without transformers: what a refused weights
file is told as."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
import torch

from mtkit.hf.folder import read_folder
from mtkit.hf.marian import ModelFolderError
from tests.marian import WORDS_SRC, toy_lines, train_spm


@pytest.fixture(scope="module")
def folder_without_weights(tmp_path_factory) -> Path:
    """config.json, the sentencepiece models and a vocab.json: all but the weights."""
    root = tmp_path_factory.mktemp("marian")
    (root / "config.json").write_text(json.dumps({"model_type": "marian",
                                                  "architectures": ["MarianMTModel"]}))
    proto = train_spm(toy_lines(WORDS_SRC, 200, 0), 60)
    (root / "source.spm").write_bytes(proto)
    (root / "target.spm").write_bytes(proto)
    (root / "vocab.json").write_text(json.dumps({"</s>": 0, "<unk>": 1, "<pad>": 2}))
    return root


def test_a_pickle_of_other_objects_is_refused_naming_them_not_torchs_advice(
        folder_without_weights: Path) -> None:
    # a pickle naming a class: torch's weights-only loader refuses it, and its message opens
    # with how to load the file anyway, which the error line must not repeat
    torch.save({"model.shared.weight": Fraction(1, 2)},
               folder_without_weights / "pytorch_model.bin")
    with pytest.raises(ModelFolderError) as e:
        read_folder(folder_without_weights)
    line = str(e.value)
    assert "\n" not in line
    assert "refused" in line and "it names fractions.Fraction" in line
    assert "can still be loaded" not in line and "nothing was run" in line


def test_an_output_below_a_file_is_refused_naming_the_file(tmp_path: Path) -> None:
    from mtkit.errors import MtkitError
    from mtkit.hf.importer import import_model

    (tmp_path / "notes.txt").write_text("keep")
    with pytest.raises(MtkitError) as e:  # checked before the source is read
        import_model(str(tmp_path / "no-such-model"), tmp_path / "notes.txt" / "runs" / "x")
    assert f"{tmp_path / 'notes.txt'} is a file, not a folder" in str(e.value)
    assert (tmp_path / "notes.txt").read_text() == "keep"
