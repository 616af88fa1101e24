"""Where a training run stands: its progress (saved in every checkpoint), the host-side sums
of a log window, and how the run ended."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from mtkit.config import TrainConfig


@dataclass(frozen=True)
class TrainResult:
    """How a run ended. reason: max_updates, max_epochs, max_time, patience or interrupted."""

    run_dir: Path
    reason: str
    update: int
    epoch: int
    checkpoint: Path | None  # the newest checkpoint written
    best: float | None  # best validation value of train.valid_metric
    averaged: Path | None = None
    signal: str | None = None  # what asked to stop: SIGINT, SIGTERM or SIGHUP


@dataclass
class Window:
    """Host-side sums since the last log line."""

    start: float = field(default_factory=time.monotonic)
    loss: float = 0.0
    nll: float = 0.0
    tokens: int = 0  # target tokens of the updates that were applied
    all_tokens: int = 0  # every target token trained on, for throughput
    gnorm: float = 0.0
    updates: int = 0
    skipped: int = 0
    align: float = 0.0  # summed alignment cross-entropy (guided alignment)
    align_rows: int = 0  # target pieces with a gold link, what `align` is averaged over

    def add(self, ntok: int, rows: int, values: list[float]) -> bool:
        """Count one update: its target tokens, linked target pieces, and device values
        (loss, nll, gnorm, skipped, align, as `UpdateSums.packed`). False when the update
        was skipped (its sums are left out)."""
        loss, nll, gnorm, skipped, align = values
        self.all_tokens += ntok
        if skipped:
            self.skipped += 1
            return False
        self.loss, self.nll, self.tokens = self.loss + loss, self.nll + nll, self.tokens + ntok
        self.gnorm, self.updates = self.gnorm + gnorm, self.updates + 1
        self.align, self.align_rows = self.align + align, self.align_rows + rows
        return True


@dataclass
class Progress:
    """Where training stands; all of it goes into a checkpoint."""

    update: int = 0
    epoch: int = 1
    position: int = 0  # batches of this epoch already consumed (by this rank)
    tokens: int = 0  # target tokens trained on (this rank)
    seconds: float = 0.0  # wall-clock of earlier sessions of this run
    best: float | None = None
    best_update: int = 0
    bad: int = 0  # validations since the best
    valid_update: int = -1  # update of the latest validation
    saved_update: int = -1  # update of the latest checkpoint
    nonfinite_run: int = 0  # consecutive skipped updates


@dataclass
class Closing:
    """How long a run's end takes, judged by the latest validation and checkpoint write of this
    session: the closing validation and checkpoint, and with averaging one more of each (at
    most). A time budget stops training this much early, so that the whole run fits it."""

    valid: float = 0.0  # seconds of the latest validation
    save: float = 0.0  # seconds of the latest checkpoint write

    def seconds(self, *, averaging: bool) -> float:
        return (self.valid + self.save) * (2 if averaging else 1)


def planned_updates(p: Progress, cfg: TrainConfig, batches_per_epoch: int, *,
                    update_freq: int) -> int | None:
    """The update training stops at, if a limit in updates or epochs says so."""
    per_epoch = -(-batches_per_epoch // update_freq)
    limits = [cfg.max_updates] if cfg.max_updates else []
    if cfg.max_epochs:
        left = cfg.max_epochs - p.epoch + 1
        done = -(-p.position // update_freq)
        limits.append(p.update + left * per_epoch - done)
    return min(limits) if limits else None


class WindowTotals(NamedTuple):
    """A log window's sums over every rank (`Window`'s fields of the same names)."""

    loss: float
    nll: float
    tokens: float
    all_tokens: float
    align: float
    align_rows: float
