"""int8 decoding in mtkit's own decoder (`precision int8`) on the trained toy model: the same
translations as fp32 on nearly every line, attention that is still a distribution, the
command and the API agreeing, and one line where int8 cannot run."""

from __future__ import annotations

import json
import shutil
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
from tests.helpers import run_cli, serving

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


def test_serve_precision_int8_with_a_shortlist(toy_model, test_lines, tmp_path):
    """`mtkit serve --precision int8 --shortlist`: says so when it starts, and answers what
    the API gives with the same options."""
    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    want = mtkit.load(run, device="cpu", threads=1, precision="int8",
                      shortlist=True).translate_full(test_lines[:12])
    with serving(run, "--precision", "int8", "--shortlist") as s:
        assert "int8) at http://" in "".join(s.log)
        res = s.post("/v1/translate", {"text": test_lines[:12]})
    assert res.status_code == 200, res.text
    got = res.json()["translations"]
    assert [g["text"] for g in got] == [w.text for w in want]
    for g, w in zip(got, want, strict=True):
        assert g["candidates"][0]["score"] == pytest.approx(w.candidates[0].score, abs=1e-5)
