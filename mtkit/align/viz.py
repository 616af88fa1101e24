"""Pictures of attention matrices: heatmap files (PNG, SVG, PDF) and shaded terminal tables.

Both take an `mtkit.align.AlignMatrix`: weights (T, S), target tokens as rows, source tokens as
columns. Heatmaps use matplotlib's object API (a bare `Figure`, never pyplot), so no display,
no global backend switch and no figure left open; the file type picks the renderer (Agg for
PNG). Weights are drawn on a fixed 0..1 scale so images of different sentences compare.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from io import StringIO
from pathlib import Path
from typing import Literal, get_args

from matplotlib.figure import Figure
from rich.cells import cell_len
from rich.color import Color
from rich.console import Console, Group, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text

from mtkit.align.matrix import AlignMatrix
from mtkit.errors import MtkitError
from mtkit.fileio import save_figure

HeatmapFormat = Literal["png", "svg", "pdf"]
FORMATS: tuple[HeatmapFormat, ...] = get_args(HeatmapFormat)
DEFAULT_DPI = 100

# --------------------------------------------------------------------------- heatmap files

_CELL_IN = 0.3  # inches per matrix cell: big enough for a 9-point label per tick
_CHAR_IN = 0.075  # inches per label character at 9 points (DejaVu Sans averages ~0.55 em)
_MAX_LABEL = 24  # characters of a tick label; longer tokens are cut with "…"


def heatmap_name(index: int, fmt: str = "png") -> str:
    """File name of sentence `index` (0-based, as in the input file): 'align-0007.png'."""
    return f"align-{index:04d}.{fmt}"


def figure_size(matrix: AlignMatrix) -> tuple[float, float]:
    """(width, height) in inches, growing with the sentence lengths and the longest label.

    Rounded up to quarter inches, which are exact in binary, so that width * dpi pixels is
    exactly what Agg renders (it truncates a fractional pixel count)."""
    def label_in(tokens: Sequence[str]) -> float:
        return _CHAR_IN * min(max((len(t) for t in tokens), default=1), _MAX_LABEL)

    t, s = matrix.weights.shape
    width = 1.9 + label_in(matrix.tgt_tokens) + _CELL_IN * s  # + y label, colour bar, margins
    height = 1.0 + label_in(matrix.src_tokens) + _CELL_IN * t  # + title, x label, margins
    return _quarter(max(width, 3.0)), _quarter(max(height, 2.5))


def _quarter(inches: float) -> float:
    return math.ceil(inches * 4) / 4


def _label(token: str) -> str:
    return token if len(token) <= _MAX_LABEL else token[: _MAX_LABEL - 1] + "…"


def _draw(matrix: AlignMatrix, *, title: str | None, dpi: int) -> Figure:
    fig = Figure(figsize=figure_size(matrix), dpi=dpi, layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(matrix.weights, cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto",
                      interpolation="nearest")
    # parse_math off: a word with two '$' is text, not TeX (it raised, or drew as math)
    ax.set_xticks(range(len(matrix.src_tokens)), [_label(t) for t in matrix.src_tokens],
                  rotation=90, fontsize=9, parse_math=False)
    ax.set_yticks(range(len(matrix.tgt_tokens)), [_label(t) for t in matrix.tgt_tokens],
                  fontsize=9, parse_math=False)
    ax.set_xlabel(matrix.axes[0])
    ax.set_ylabel(matrix.axes[1])
    if title:
        ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=ax, label="attention")
    return fig


def save_heatmap(matrix: AlignMatrix, path: str | Path, *, fmt: str = "png",
                 title: str | None = None, dpi: int = DEFAULT_DPI) -> Path:
    """Draw one matrix (source tokens on x, target tokens on y, a colour bar) to `path`,
    atomically. The image is figure_size(matrix) * dpi pixels (PNG) or that many points / 72
    * dpi (SVG, PDF). SVG keeps labels as <text> and PDF embeds TrueType, so both stay
    searchable."""
    if fmt not in FORMATS:
        raise MtkitError(f"unknown heatmap format {fmt!r}; expected one of {', '.join(FORMATS)}")
    # the heatmap folder is mtkit's: a link in a heatmap's place is replaced
    save_figure(_draw(matrix, title=title, dpi=dpi), path, fmt, dpi=dpi, own=True)
    return Path(path)


# Metadata that changes from one save to the next (dates, the library version): dropped, so
# the same figure gives the same bytes and reruns do not churn files. Each backend names its
# date key differently.
def write_heatmap(matrix: AlignMatrix, out_dir: str | Path, index: int, *, fmt: str = "png",
                  dpi: int = DEFAULT_DPI) -> Path:
    """Save sentence `index`'s heatmap as out_dir/align-NNNN.<fmt>, titled with its number."""
    path = Path(out_dir) / heatmap_name(index, fmt)
    return save_heatmap(matrix, path, fmt=fmt, dpi=dpi,
                        title=f"sentence {index} ({matrix.level} level)")


# --------------------------------------------------------------------------- terminal tables

_COL = 4  # characters per value column: a space and three characters (".07", ".50", "1.0")
MIN_WIDTH = 24
_LOW, _HIGH = (222, 235, 247), (8, 48, 107)  # the ends of matplotlib's "Blues", as in heatmaps


def _cell_text(v: float) -> str:
    """A weight to two decimals in three characters, the leading zero dropped as weights never
    exceed one: 0.071 -> '.07'; weights that round to one print as '1.0'."""
    r = round(min(max(float(v), 0.0), 1.0), 2)
    return "1.0" if r >= 1.0 else f"{r:.2f}"[1:]


def _cell_style(v: float) -> Style:
    """Background shade growing with the weight; near-zero cells keep the terminal's own
    background (a white block on a dark terminal would shout louder than the weights)."""
    if v < 0.005:
        return Style(dim=True)
    f = min(float(v), 1.0)
    rgb = [round(lo + (hi - lo) * f) for lo, hi in zip(_LOW, _HIGH, strict=True)]
    return Style(color="black" if f < 0.5 else "white", bgcolor=Color.from_rgb(*rgb))


def _block_table(matrix: AlignMatrix, cols: range, label_w: int) -> Table:
    """Rows: 'j token' labels then one shaded cell per source column in `cols`; the header
    carries the source column numbers, keyed in the legend above the table."""
    table = Table(box=None, padding=0, pad_edge=False, show_edge=False, header_style="bold")
    # Short enough for the narrowest label column (9 cells).
    short = {"source": "src", "target": "tgt", "query": "qry", "key": "key"}
    corner = " \\ ".join(short.get(a, a[:3]) for a in reversed(matrix.axes))
    table.add_column(Text(corner), width=label_w, no_wrap=True, overflow="ellipsis")
    for i in cols:
        table.add_column(Text(str(i)), width=_COL, justify="right", no_wrap=True)
    for j, token in enumerate(matrix.tgt_tokens):
        cells = [Text.assemble(" ", (_cell_text(v), _cell_style(v)))
                 for v in matrix.weights[j, cols.start:cols.stop]]
        table.add_row(Text(f"{j} {token}"), *cells)
    return table


def _printable(token: str) -> str:
    return token if token.isprintable() else "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in token)


def _legend(name: str, entries: Sequence[tuple[int, str]]) -> Text:
    # '3:token' pairs hold no space, so wrapping at spaces never parts a number from its token
    return Text(f"{name}: " + "  ".join(f"{k}:{tok}" for k, tok in entries), style="dim")


def matrix_view(matrix: AlignMatrix, *, width: int = 80, title: str | None = None) -> Group:
    """The matrix as rich renderables fitting `width` columns: target tokens as rows, source
    columns numbered and keyed in a legend, cells shaded by weight with values to two decimals.

    A source side too wide for one table is wrapped into blocks of columns, with a note; every
    row label is cut to a quarter of the width, and targets so cut are listed in full below, so
    every token appears somewhere. 15 words of average length fit 80 columns in one block."""
    if width < MIN_WIDTH:
        raise MtkitError(f"terminal width {width} is too narrow; need at least {MIN_WIDTH}")
    # a corpus's control characters (an ESC sequence recolours a terminal) shown as escapes
    matrix = dataclasses.replace(matrix, src_tokens=tuple(map(_printable, matrix.src_tokens)),
                                 tgt_tokens=tuple(map(_printable, matrix.tgt_tokens)))
    labels = [f"{j} {t}" for j, t in enumerate(matrix.tgt_tokens)]
    label_w = min(max([cell_len(x) for x in labels] + [9]), max(12, width // 4))
    per_block = max(1, (width - label_w) // _COL)
    n_src = len(matrix.src_tokens)
    blocks = [range(a, min(a + per_block, n_src)) for a in range(0, n_src, per_block)]
    parts: list[RenderableType] = [Text(title, style="bold")] if title else []
    if len(blocks) > 1:
        parts.append(Text(f"note: {n_src} source tokens do not fit {width} columns; shown in "
                          f"{len(blocks)} blocks of up to {per_block}", style="italic"))
    for cols in blocks or [range(0)]:
        parts.append(_legend(matrix.axes[0], [(i, matrix.src_tokens[i]) for i in cols]))
        parts.append(_block_table(matrix, cols, label_w))
    cut = [(j, t) for j, t in enumerate(matrix.tgt_tokens) if cell_len(labels[j]) > label_w]
    if cut:
        parts.append(_legend(f"{matrix.axes[1]} (cut above)", cut))
    return Group(*parts)


def render_text(matrix: AlignMatrix, *, width: int = 80, title: str | None = None,
                color: bool = False) -> str:
    """`matrix_view` rendered to a string of lines no wider than `width` cells; with color
    the shading comes as ANSI escapes (truecolor), without it plain text."""
    buf = StringIO()
    console = Console(file=buf, width=width, color_system="truecolor" if color else None,
                      force_terminal=color, highlight=False, emoji=False, markup=False,
                      legacy_windows=False)
    console.print(matrix_view(matrix, width=width, title=title))
    return buf.getvalue()


def print_matrix(matrix: AlignMatrix, console: Console, *, title: str | None = None) -> None:
    """Print one matrix to a rich Console (the caller's, e.g. stdout), at its width."""
    console.print(matrix_view(matrix, width=console.width, title=title))
