"""JSON records of alignment matrices: tokens, weights, links and gold scores per pair."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from mtkit.align.gold import AlignScores
from mtkit.align.links import format_pharaoh
from mtkit.align.matrix import AlignMatrix, Link
from mtkit.fileio import atomic_write


def matrix_record(matrix: AlignMatrix, *, index: int, links: Iterable[Link] | None = None,
                  scores: AlignScores | None = None, digits: int = 4) -> dict[str, Any]:
    """One sentence pair as JSON-ready data: its number, level, what the (columns, rows) are
    (source, target; or for self-attention key, query), tokens, the (T, S) weights as rows of
    floats rounded to `digits`, and, when given, Pharaoh links and gold scores."""
    rec: dict[str, Any] = {
        "index": index,
        "level": matrix.level,
        "axes": list(matrix.axes),
        "src_tokens": list(matrix.src_tokens),
        "tgt_tokens": list(matrix.tgt_tokens),
        "weights": np.round(matrix.weights, digits).tolist(),
    }
    if links is not None:
        rec["links"] = format_pharaoh(links)
    if scores is not None:
        rec["scores"] = scores.as_dict()
    return rec


def write_json(path: str | Path, records: Sequence[dict[str, Any]], *,
               scores: AlignScores | None = None, settings: dict[str, Any] | None = None,
               stdout: IO[str] | None = None) -> None:
    """Write records from `matrix_record` (and corpus scores) atomically as one JSON document:
    {"format": "mtkit-align", "version": 1, "settings": {...}, "sentences": [...], "scores":
    {...}}; settings say what made the matrices (`mtkit.align.files.settings_record`).
    weights[j][i] is the attention of target token j on source token i. A path of '-' writes
    to `stdout`."""
    doc: dict[str, Any] = {"format": "mtkit-align", "version": 1}
    if settings is not None:
        doc["settings"] = settings
    doc["sentences"] = list(records)
    if scores is not None:
        doc["scores"] = scores.as_dict()
    with contextlib.nullcontext(stdout) if str(path) == "-" else atomic_write(path) as f:
        assert f is not None, "JSON output to '-' needs a stdout stream"
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
        f.flush()
