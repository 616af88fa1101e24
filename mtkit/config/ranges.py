"""A field's bounds (`ge`, `gt`, `le`, `lt` in its metadata), one rule for the two places that
hold them: a recipe's loading (config/loading.py) and a section built directly by a caller
(`DecodeConfig`, config/sections.py). It sits below both so neither imports the other."""

from __future__ import annotations

import dataclasses
from typing import Any

_TESTS = {"ge": (lambda v, b: v >= b, ">="), "gt": (lambda v, b: v > b, ">"),
          "le": (lambda v, b: v <= b, "<="), "lt": (lambda v, b: v < b, "<")}


def shown(value: Any, limit: int = 60) -> str:
    """`repr(value)` cut to `limit` characters: a value quoted in a message may be huge."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text):,} characters)"


def out_of_range(meta: Any, value: Any) -> list[str]:
    """What is wrong with `value` against its field's bounds (`meta`), one message each;
    none for a value that is not a number or a field without bounds."""
    if value is None or not isinstance(value, int | float) or not meta:
        return []
    if value - value != 0:  # nan or ±inf: a bounded value is a finite one
        return [f"expected a finite number, got {shown(value)}"]
    return [f"out of range: expected a value {sym} {meta[name]}, got {shown(value)}"
            for name, (test, sym) in _TESTS.items()
            if name in meta and not test(value, meta[name])]


def range_problems(obj: Any, prefix: str) -> list[tuple[str, str]]:
    """The fields of a section built directly (not through a recipe) outside their bounds,
    as (dotted key, message): a section whose every face must hold it (`DecodeConfig`) checks
    itself with this, by the same rule as a recipe's."""
    return [(f"{prefix}.{f.name}" if prefix else f.name, msg) for f in dataclasses.fields(obj)
            for msg in out_of_range(f.metadata, getattr(obj, f.name))]
