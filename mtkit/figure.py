"""Figures written as every output is (atomically, `mtkit.fileio.atomic_write`), and
reproducibly: the same figure gives the same bytes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mtkit.fileio import atomic_write

# Metadata keys matplotlib fills with the save date, per format: cleared, so that the same
# figure gives the same bytes.
_NO_DATES = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}


def save_figure(fig: Any, path: str | Path, fmt: str, *, dpi: int | None = None,
                own: bool = False) -> None:
    """Write a matplotlib `Figure` to `path` atomically as PNG, SVG or PDF, reproducibly: SVG
    keeps text as <text> with fixed ids, PDF embeds TrueType, and no save date is stored.
    own: `path` is a file of a folder mtkit owns (`atomic_write`)."""
    import matplotlib  # here: most commands draw nothing, and matplotlib is slow to import

    with matplotlib.rc_context({"svg.fonttype": "none", "pdf.fonttype": 42,
                                "svg.hashsalt": "mtkit"}), atomic_write(path, "wb", own=own) as f:
        fig.savefig(f, format=fmt, dpi=dpi, metadata=_NO_DATES[fmt])
