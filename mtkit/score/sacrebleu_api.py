"""The one place mtkit calls sacreBLEU's private API; `tests/unit/score/test_score.py` checks every
function here against sacreBLEU's public results, so an upgrade that changes these calls fails
loudly there instead of scoring wrongly.

Why private calls at all: sacreBLEU's public `corpus_score` extracts sentence statistics and
aggregates them in one call. Scoring several systems against one set of cached references,
paired tests that reuse the baseline's statistics, and BLEU per length bucket all need the two
halves separately (per-sentence statistics, then their aggregate over any subset)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

from sacrebleu.metrics.base import Metric


def sentence_statistics(metric: Metric, hyps: Sequence[str]) -> list[Any]:
    """Per-sentence sufficient statistics of `hyps` against the metric's cached references."""
    return metric._extract_corpus_statistics(list(hyps), None)


def corpus_score(metric: Metric, stats: list[Any]) -> tuple[str, float, str]:
    """(sacreBLEU's metric name, corpus score, its verbose details or "") of the aggregated
    `stats`: what `metric.corpus_score` returns for the same sentences."""
    s = metric._aggregate_and_compute(stats)
    return s.name, float(s.score), s._verbose


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """sacrebleu takes its RNG seed from $SACREBLEU_SEED, not from an argument (PairedTest and
    its baseline bootstrap both read it), so set it for the duration of one test."""
    old = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if old is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = old


@contextlib.contextmanager
def logged_warnings() -> Iterator[list[str]]:
    """Collect what sacreBLEU logs (to its 'sacrebleu' logger) meanwhile instead of letting
    logging's last-resort handler print it bare on stderr: the caller says it in mtkit's
    words, or not at all when the call failed (a notice before an error line is noise)."""
    logger = logging.getLogger("sacrebleu")
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(" ".join(record.getMessage().split()))

    saved = logger.handlers, logger.propagate
    logger.handlers, logger.propagate = [Collect(logging.WARNING)], False
    try:
        yield messages
    finally:
        logger.handlers, logger.propagate = saved
