"""The rules that clean the training split, chunk by chunk (read by `stream.read_blocks`,
lines stripped of surrounding whitespace). Cleaning happens in two stages, because the length
rules count sentencepiece tokens and sentencepiece is trained on the text that survives the
first stage:

1. text rules (`clean_text`): drop pairs with an empty side; optionally drop exact duplicates
   (remembered by hash, `dedup.SeenPairs`, so that a stream of any length fits in memory);
2. token rules (`clean_tokens`): drop pairs with a side shorter than ``min_len`` or longer than
   ``max_len`` tokens, or whose longer side has more than ``max_ratio`` times the tokens of the
   shorter side (tokens without BOS/EOS).

Both work on one chunk at a time, count into a `CleanStats`, and return a keep mask.
Validation and test splits are never cleaned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import compress

import numpy as np
from rich.table import Table

from mtkit.config import CleanConfig
from mtkit.data.dedup import SeenPairs, pair_hashes

# The rules in the order they are applied; each pair is dropped by the first rule it breaks.
RULES = ("empty", "duplicate", "too_short", "too_long", "ratio")


@dataclass
class CleanStats:
    """Pairs read, dropped per rule (in `RULES` order) and kept."""

    read: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RULES, 0))

    @property
    def kept(self) -> int:
        return self.read - sum(self.dropped.values())


def clean_text(src: Sequence[str], tgt: Sequence[str], cfg: CleanConfig, stats: CleanStats,
               seen: SeenPairs | None) -> np.ndarray:
    """(N,) bool: the pairs of a chunk that pass the text rules (empty side, duplicates; a pair
    seen in an earlier chunk, as remembered by `seen`, is a duplicate too)."""
    stats.read += len(src)
    n = len(src)
    keep = np.fromiter(map(bool, src), bool, count=n) & np.fromiter(map(bool, tgt), bool, count=n)
    stats.dropped["empty"] += len(src) - int(keep.sum())
    if cfg.dedup:
        assert seen is not None, "dedup needs the hashes of the pairs kept so far"
        idx = np.flatnonzero(keep)
        first = seen.first_seen(pair_hashes(list(compress(src, keep)), list(compress(tgt, keep))))
        keep[idx[~first]] = False
        stats.dropped["duplicate"] += len(idx) - int(first.sum())
    return keep


def clean_tokens(src_lens: np.ndarray, tgt_lens: np.ndarray, cfg: CleanConfig,
                 stats: CleanStats) -> np.ndarray:
    """(N,) bool: the encoded pairs that pass the token rules (min/max length, ratio), given
    their (N,) token counts; each dropped pair is counted under the first rule it breaks."""
    short, long_ = np.minimum(src_lens, tgt_lens), np.maximum(src_lens, tgt_lens)
    too_short = short < cfg.min_len
    too_long = ~too_short & (long_ > cfg.max_len)
    ratio = ~too_short & ~too_long & (long_ > cfg.max_ratio * np.maximum(short, 1))
    for rule, mask in (("too_short", too_short), ("too_long", too_long), ("ratio", ratio)):
        stats.dropped[rule] += int(mask.sum())
    return ~(too_short | too_long | ratio)


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

