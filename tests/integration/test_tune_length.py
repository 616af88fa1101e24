"""`mtkit tune-length`: the length penalty swept on the validation split, the winner written
into the run's decoding defaults and recorded, and translate / score --run using it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import sacrebleu

from mtkit.api import load
from mtkit.fileio import read_lines
from mtkit.run import CHOICE
from mtkit.score.length_sweep import LengthSetting, SweepPoint, record
from tests.helpers import run_cli


@pytest.fixture
def run(toy_model: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(toy_model, tmp_path / "run", copy_function=shutil.copy2))


def _metrics(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_the_sweep_writes_the_best_setting_and_records_every_point(run: Path) -> None:
    res = run_cli("tune-length", run, "--alphas", "0.2,3.0", "--device", "cpu",
                  "--threads", "1")
    assert res.exit_code == 0, res.stderr
    (rec,) = [r for r in _metrics(run) if r["kind"] == "length_sweep"]
    settings = [(p["length_penalty"], p["alpha"]) for p in rec["points"]]
    # the recipe's gnmt 1.0 first (it wins ties), then none, average, the alphas asked
    assert settings == [("gnmt", 1.0), ("none", 1.0), ("average", 1.0), ("gnmt", 0.2),
                        ("gnmt", 3.0)]
    # each point's BLEU is that of the translation it left in translations/
    refs = read_lines(run / "data" / "valid.tgt.txt")
    for p in rec["points"]:
        tr = load(run, device="cpu", length_penalty=p["length_penalty"], alpha=p["alpha"])
        hyps = tr.translate(read_lines(run / "data" / "valid.src.txt"))
        assert sacrebleu.corpus_bleu(hyps, [refs]).score == pytest.approx(p["bleu"])
    best = max(rec["points"], key=lambda p: p["bleu"])
    want = {"length_penalty": best["length_penalty"], "alpha": best["alpha"]}
    assert rec["chosen"] == want
    choice = json.loads((run / CHOICE).read_text())
    assert choice["decode"] == want and choice["checkpoint"] == "best.pt"
    assert "BLEU" in res.stderr and "written to" in res.stderr


def test_the_sweep_loads_the_model_once(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Five settings decoded, one model loaded; a second sweep reuses every translation and
    loads none."""
    import mtkit.run

    loads = []
    real = mtkit.run.load_model

    def counted(*args, **kwargs):
        loads.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(mtkit.run, "load_model", counted)
    args = ("tune-length", run, "--alphas", "0.2,3.0", "--device", "cpu", "--threads", "1")
    res = run_cli(*args)
    assert res.exit_code == 0, res.stderr
    assert res.stderr.count("BLEU") == 6  # five points and the verdict
    assert len(loads) == 1
    assert run_cli(*args).exit_code == 0
    assert len(loads) == 1


def test_translate_and_score_run_use_the_choice(run: Path) -> None:
    pt = SweepPoint(LengthSetting("gnmt", 3.0), 1.0, 1.0, 1.0, 1.0)
    record(run, run / "best.pt", [pt], pt, split="valid")
    assert load(run, device="cpu").defaults.alpha == 3.0
    src = run / "data" / "test.src.txt"
    chosen = run_cli("translate", run, "-i", src, "--format", "jsonl", "--threads", "1")
    explicit = run_cli("translate", run, "-i", src, "--format", "jsonl", "--threads", "1",
                       "--alpha", "3.0")
    default = run_cli("translate", run, "-i", src, "--format", "jsonl", "--threads", "1",
                      "--alpha", "1.0")  # the recipe's
    assert chosen.exit_code == explicit.exit_code == 0
    assert chosen.stdout == explicit.stdout != default.stdout  # the scores differ at least
    scored = run_cli("score", "--run", run, "--split", "test", "--metrics", "bleu",
                     "--device", "cpu", "--threads", "1")
    assert scored.exit_code == 0, scored.stderr
    (key,) = (run / "translations").glob("test.*.key")
    assert json.loads(key.read_text())["decode"]["alpha"] == 3.0


@pytest.mark.parametrize(("args", "message"), [
    (["--alphas", "x"], "--alphas x: expected comma-separated numbers"),
    (["--alphas", "12"], "alphas: 12 is outside [0, 10]"),
    (["--split", "nope"], "--split nope:"),
    (["best.pt"], "best.pt: expected a run directory"),
])
def test_bad_input_is_one_line(run: Path, args: list[str], message: str) -> None:
    where = [run / args[0]] if args == ["best.pt"] else [run, *args]
    res = run_cli("tune-length", *where)
    assert res.exit_code == 2 and message in res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("mtkit: error: ")
    assert not (run / CHOICE).exists()
