"""Reading parallel text and cleaning the training split.

Reading follows mtkit's text policy (`mtkit.fileio`: only ``\\n`` ends a line, invalid UTF-8
is replaced and counted) and strips surrounding whitespace. Cleaning happens in two stages,
because the length rules count sentencepiece tokens and sentencepiece is trained on the text
that survives the first stage:

1. text rules (`clean_text`): drop pairs with an empty side; optionally drop exact duplicates;
2. token rules (`clean_tokens`): drop pairs with a side shorter than ``min_len`` or longer than
   ``max_len`` tokens, or whose longer side has more than ``max_ratio`` times the tokens of the
   shorter side (tokens without BOS/EOS).

Validation and test splits are never cleaned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

from mtkit import fileio
from mtkit.config import CleanConfig
from mtkit.errors import DataError
from mtkit.fileio import InvalidUtf8

# The rules in the order they are applied; each pair is dropped by the first rule it breaks.
RULES = ("empty", "duplicate", "too_short", "too_long", "ratio")


@dataclass
class TextFile:
    """The stripped lines of one file and where invalid UTF-8 was replaced in them."""

    path: Path
    lines: list[str]
    invalid: InvalidUtf8


def read_lines(path: str | Path) -> TextFile:
    """Read a plain or gzip UTF-8 file under mtkit's text policy (`mtkit.fileio`), each line
    stripped of surrounding whitespace."""
    path = Path(path)
    invalid = InvalidUtf8(str(path))
    try:
        lines = [line.strip() for line in fileio.read_lines(path, invalid)]
    except (OSError, EOFError) as e:
        raise DataError(f"{path}: cannot read ({e})") from None
    return TextFile(path, lines, invalid)


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> tuple[TextFile, TextFile]:
    """Both sides of a split; raises DataError naming both files if line counts differ."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src.lines) != len(tgt.lines):
        raise DataError(f"line counts differ: {src.path} has {len(src.lines)} lines, "
                        f"{tgt.path} has {len(tgt.lines)}")
    return src, tgt


@dataclass
class CleanStats:
    """Pairs read, dropped per rule (in `RULES` order) and kept."""

    read: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RULES, 0))

    @property
    def kept(self) -> int:
        return self.read - sum(self.dropped.values())


def clean_text(src: Sequence[str], tgt: Sequence[str], cfg: CleanConfig,
               stats: CleanStats) -> list[int]:
    """Indices of the pairs that pass the text rules (empty side, duplicates)."""
    stats.read = len(src)
    keep: list[int] = []
    seen: set[tuple[str, str]] = set()
    for i, (s, t) in enumerate(zip(src, tgt, strict=True)):
        if not s or not t:
            stats.dropped["empty"] += 1
            continue
        if cfg.dedup:
            if (s, t) in seen:
                stats.dropped["duplicate"] += 1
                continue
            seen.add((s, t))
        keep.append(i)
    return keep


def clean_tokens(src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]], cfg: CleanConfig,
                 stats: CleanStats) -> list[int]:
    """Indices of the encoded pairs that pass the token rules (min/max length, ratio)."""
    keep: list[int] = []
    for i, (s, t) in enumerate(zip(src, tgt, strict=True)):
        ls, lt = len(s), len(t)
        if min(ls, lt) < cfg.min_len:
            stats.dropped["too_short"] += 1
        elif max(ls, lt) > cfg.max_len:
            stats.dropped["too_long"] += 1
        elif max(ls, lt) > cfg.max_ratio * max(min(ls, lt), 1):
            stats.dropped["ratio"] += 1
        else:
            keep.append(i)
    return keep


def clean_table(stats: CleanStats, cfg: CleanConfig) -> Table:
    """A rich table of lines read, dropped per rule and kept."""
    rules = {
        "empty": "empty source or target",
        "duplicate": "duplicate pair" + ("" if cfg.dedup else " (dedup off)"),
        "too_short": f"a side under {cfg.min_len} tokens",
        "too_long": f"a side over {cfg.max_len} tokens",
        "ratio": f"length ratio over {cfg.max_ratio:g}",
    }
    table = Table(title="cleaning the training split")
    table.add_column("rule")
    table.add_column("pairs", justify="right")
    table.add_column("%", justify="right")

    def pct(n: int) -> str:
        return f"{100 * n / stats.read:.2f}" if stats.read else "-"

    table.add_row("read", str(stats.read), pct(stats.read))
    for rule in RULES:
        table.add_row(f"dropped: {rules[rule]}", str(stats.dropped[rule]),
                      pct(stats.dropped[rule]))
    table.add_row("kept", str(stats.kept), pct(stats.kept), style="bold")
    return table

