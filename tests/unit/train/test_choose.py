"""The run's model after training: averaged.pt is used when it validates better than best.pt,
and that is recorded (model.json, metrics.jsonl, the log); translate follows the choice."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest

from mtkit.api import load
from mtkit.run import AVERAGED, BEST, CHOICE, read_choice, resolve_checkpoint
from mtkit.train.choose import choose_model
from mtkit.train.validate import ValidResult
from tests.helpers import train_toy


class _Rec:
    def __init__(self) -> None:
        self.records: list[tuple[str, dict]] = []

    def record(self, kind: str, **fields: object) -> None:
        self.records.append((kind, fields))


def _result(bleu: float) -> ValidResult:
    return ValidResult(loss=1.0, nll=1.0, ppl=2.7, bleu=bleu, chrf=50.0, sentences=60,
                       seconds=0.1)


@pytest.fixture(scope="module")
def averaged_run(toy_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy trained 30 updates, validated every 10, the last 3 checkpoints averaged."""
    return train_toy(toy_run, tmp_path_factory.mktemp("avg") / "run", [
        "train.max_updates=30", "train.valid_every=10", "train.keep_last=3",
        "train.average_last=3"])


@pytest.fixture
def run(averaged_run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(averaged_run, tmp_path / "run", copy_function=shutil.copy2))


def _metrics(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_training_records_the_choice_and_the_run_follows_it(averaged_run: Path) -> None:
    (rec,) = [r for r in _metrics(averaged_run) if r["kind"] == "model"]
    (avg,) = [r for r in _metrics(averaged_run) if r["kind"] == "average"]
    assert rec["metric"] == "bleu" and rec["averaged"] == avg["bleu"]
    best = max(r["bleu"] for r in _metrics(averaged_run) if r["kind"] == "valid")
    assert rec["best"] == best
    want = AVERAGED if avg["bleu"] > best else BEST
    assert rec["checkpoint"] == want
    assert resolve_checkpoint(averaged_run) == averaged_run / want
    assert json.loads((averaged_run / CHOICE).read_text())["checkpoint"] == want


@pytest.mark.parametrize(("averaged", "chosen"), [(9.0, AVERAGED), (4.0, BEST), (5.0, BEST)])
def test_the_better_model_is_chosen_and_said(run: Path, averaged: float, chosen: str,
                                             caplog: pytest.LogCaptureFixture) -> None:
    rec = _Rec()
    with caplog.at_level(logging.INFO, logger="mtkit"):
        name = choose_model(run, rec, metric="bleu", best=5.0, best_update=20,
                            averaged=_result(averaged), update=30)
    assert name == chosen  # a tie keeps best.pt
    assert resolve_checkpoint(run) == run / chosen
    assert rec.records == [("model", {"update": 30, "checkpoint": chosen, "metric": "bleu",
                                      "best": 5.0, "best_update": 20, "averaged": averaged})]
    assert "bleu 5.00" in caplog.text and f"{averaged:.2f}" in caplog.text


def test_lower_is_better_for_loss(run: Path) -> None:
    rec = _Rec()
    res = ValidResult(loss=0.5, nll=1.0, ppl=2.7, bleu=0.0, chrf=0.0, sentences=1, seconds=0)
    assert choose_model(run, rec, metric="loss", best=0.7, best_update=20, averaged=res,
                        update=30) == AVERAGED


def test_translate_uses_the_averaged_model_when_chosen(run: Path) -> None:
    choose_model(run, _Rec(), metric="bleu", best=0.0, best_update=20,
                 averaged=_result(99.0), update=30)
    assert load(run, device="cpu").info.paths == [str(run / AVERAGED)]


def test_a_rewritten_averaged_pt_voids_the_choice(run: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    choose_model(run, _Rec(), metric="bleu", best=0.0, best_update=20,
                 averaged=_result(99.0), update=30)
    st = (run / AVERAGED).stat()
    os.utime(run / AVERAGED, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # `mtkit average`
    assert read_choice(run) is None
    assert resolve_checkpoint(run) == run / BEST
    assert "not the file chosen" in caplog.text


def test_training_again_forgets_the_choice(run: Path, toy_run: Path) -> None:
    import io

    from rich.console import Console

    from mtkit.config import load_recipe
    from mtkit.train.session import train
    from tests.helpers import RECIPES

    assert (run / CHOICE).is_file()
    recipe = load_recipe(RECIPES / "toy.yaml", ["train.max_time=null", "train.max_updates=32",
                                                "train.valid_every=10", "train.keep_last=3"])
    train(recipe, run, resume=True, console=Console(file=io.StringIO()))
    assert not (run / CHOICE).exists()  # no average_last this time: best.pt is the model
    assert resolve_checkpoint(run) == run / BEST


def test_validation_metrics_are_the_recipe_s_choices_with_score_s_directions() -> None:
    from typing import get_args, get_type_hints

    from mtkit.config.sections import TrainConfig
    from mtkit.score.metrics import HIGHER_IS_BETTER as SCORE
    from mtkit.train.validate import HIGHER_IS_BETTER

    choices = get_args(get_type_hints(TrainConfig)["valid_metric"])
    assert sorted(HIGHER_IS_BETTER) == sorted(choices)
    assert {m: HIGHER_IS_BETTER[m] for m in SCORE.keys() & HIGHER_IS_BETTER.keys()} == {
        "bleu": True, "chrf": True}
    assert SCORE["ter"] is False
