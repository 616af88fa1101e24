"""Where a training run stands: its progress (saved in every checkpoint), the host-side sums
of a log window, and how the run ended."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path


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
