"""int8 decoding in mtkit's own decoder (`precision int8`) on the trained toy model: the same
translations as fp32 on nearly every line, attention that is still a distribution, the
command and the API agreeing, and one line where int8 cannot run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import mtkit
from mtkit.data.store import text_path
from mtkit.errors import ConfigError
from mtkit.models import quantize
from mtkit.models.quantize import quantize_linear, restricted_linear
from mtkit.run import data_dir
from tests.helpers import run_cli

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def test_lines(toy_model: Path) -> list[str]:
    return text_path(data_dir(toy_model), "test", "src").read_text().splitlines()


def test_int8_translates_as_fp32_on_nearly_every_line(toy_model, test_lines):
    fp32 = mtkit.load(toy_model, device="cpu", threads=1)
    int8 = mtkit.load(toy_model, device="cpu", threads=1, precision="int8")
    assert int8.info.precision == "int8" and fp32.info.precision == "fp32"
    full, low = fp32.translate(test_lines), int8.translate(test_lines)
    same = sum(a == b for a, b in zip(full, low, strict=True))
    assert same >= 0.95 * len(test_lines), (same, len(test_lines))
    # the weights are int8 indeed: the scores move
    a, b = fp32.translate_full(test_lines[:5]), int8.translate_full(test_lines[:5])
    assert any(abs(x.candidates[0].score - y.candidates[0].score) > 1e-4
               for x, y in zip(a, b, strict=True))


def test_int8_attention_rows_sum_to_one(toy_model, test_lines):
    int8 = mtkit.load(toy_model, device="cpu", threads=1, precision="int8")
    for res in int8.translate_full(test_lines[:4], attention=True, nbest=2):
        for cand in res.candidates:
            weights = np.asarray(cand.attention.subword.weights)
            assert np.allclose(weights.sum(axis=1), 1, atol=1e-3)


def test_translate_precision_int8_matches_the_api(toy_model, test_lines):
    res = run_cli("translate", toy_model, "--threads", "1", "--precision", "int8",
                  "--format", "jsonl", input="\n".join(test_lines[:10]) + "\n")
    assert res.exit_code == 0, res.output
    got = [json.loads(line)["hypothesis"] for line in res.stdout.splitlines()]
    assert got == mtkit.load(toy_model, device="cpu", threads=1,
                             precision="int8").translate(test_lines[:10])


def test_int8_off_a_cpu_and_without_an_engine(toy_model, monkeypatch, caplog):
    if torch.cuda.is_available():
        with pytest.raises(ConfigError, match="precision int8: mtkit's int8 decoding runs on a "
                           "CPU, not cuda"):
            mtkit.load(toy_model, device="cuda", precision="int8")
    monkeypatch.setattr(quantize, "int8_engine", lambda: None)  # as on a CPU without them
    fallback = mtkit.load(toy_model, device="cpu", threads=1, precision="int8")
    assert fallback.info.precision == "fp32"
    assert [r.getMessage() for r in caplog.records] == [
        "precision int8: this CPU has none of torch's quantized engines (x86, fbgemm); "
        "decoding in fp32"]


def test_restricted_linear_computes_the_chosen_rows_alike():
    """A shortlist's output projection: the chosen rows as the whole layer computes them,
    float and int8 (an int8 row keeps its values and its scale)."""
    g = torch.Generator().manual_seed(0)
    full = torch.nn.Linear(16, 40)
    x, rows = torch.randn(6, 16, generator=g), torch.tensor([0, 3, 4, 17, 39])
    with torch.no_grad():
        torch.testing.assert_close(restricted_linear(full, rows)(x), full(x)[:, rows])
        int8 = quantize_linear(torch.nn.Sequential(full))[0]
        assert torch.equal(restricted_linear(int8, rows)(x), int8(x)[:, rows])
