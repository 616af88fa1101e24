"""Golden values: what the real models compute from a fixed initialisation, and a stored
format-1 checkpoint that must keep loading. `tests/golden/make_golden.py` regenerates both;
only a change meant to alter the numbers may do so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.golden import make_golden
from tests.helpers import REPO

GOLDEN = REPO / "tests" / "golden"
VALUES = json.loads((GOLDEN / "values.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(make_golden.MODELS))
def test_teacher_forced_outputs_match_the_golden_values(name: str) -> None:
    got = make_golden.outputs(name)
    for key in ("logits", "attn"):
        torch.testing.assert_close(torch.tensor(got[key]), torch.tensor(VALUES[name][key]),
                                   rtol=1e-4, atol=1e-5, msg=f"{name} {key}")


def test_golden_values_catch_a_dropped_attention_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kind of bug golden values exist for: consistent in forward and step alike."""
    real = torch.nn.functional.scaled_dot_product_attention

    def unscaled(q, k, v, *args, **kwargs):
        kwargs["scale"] = 1.0  # instead of 1/sqrt(d_head)
        return real(q, k, v, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", unscaled)
    got = make_golden.outputs("transformer-pre")
    assert not torch.allclose(torch.tensor(got["logits"]),
                              torch.tensor(VALUES["transformer-pre"]["logits"]), atol=1e-3)


def test_a_stored_format_1_checkpoint_still_loads_and_translates(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(GOLDEN / "format1-run", run)  # loading may not write, but stay safe
    assert make_golden.greedy(run) == VALUES["format1"]["greedy_pieces"]
