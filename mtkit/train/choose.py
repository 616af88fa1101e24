"""The run's model after training: best.pt or averaged.pt, whichever validated better.

`train.average_last` writes averaged.pt (the mean of the last checkpoints, Vaswani et al.
2017, §6.1) and validates it as every checkpoint is validated; here the two scores are
compared on `train.valid_metric`, and the winner is recorded as the run's model
(`mtkit.run.RunChoice`, which translate, score --run and align follow), in metrics.jsonl and
in the log, with both scores. A tie keeps best.pt.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

from mtkit.run import AVERAGED, BEST, RunChoice, file_fingerprint, write_choice
from mtkit.train.validate import HIGHER_IS_BETTER, ValidResult

log = logging.getLogger(__name__)


class Recorder(Protocol):
    def record(self, kind: str, **fields: object) -> None: ...


def choose_model(run_dir: Path, rep: Recorder, *, metric: str, best: float | None,
                 best_update: int | None, averaged: ValidResult, update: int) -> str:
    """Record the better of best.pt (validated at `best_update` with score `best`, None when
    the run was never validated) and averaged.pt (`averaged`) on `metric`; returns the file
    name chosen."""
    avg = float(getattr(averaged, metric))
    better = HIGHER_IS_BETTER[metric]
    wins = best is None or not (run_dir / BEST).is_file() or (
        avg > best if better else avg < best)
    name = AVERAGED if wins else BEST
    scores = {"metric": metric, "best": best, "best_update": best_update, "averaged": avg}
    write_choice(run_dir, RunChoice(name, file_fingerprint(run_dir / name),
                                    why={"chosen_by": "train.average_last", **scores}))
    rep.record("model", update=update, checkpoint=name, **scores)
    shown = "not validated" if best is None else f"{metric} {best:.2f} at update {best_update:,}"
    if wins:
        log.info("the run's model is %s (valid %s %.2f) rather than %s (%s): translate, "
                 "score --run and align use it", AVERAGED, metric, avg, BEST, shown)
    else:
        log.info("the run's model stays %s (valid %s); %s scored %s %.2f", BEST, shown,
                 AVERAGED, metric, avg)
    return name
