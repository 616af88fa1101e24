"""Which model translates a source language into a target, among several: each model's
directions (its languages, or for a model of several, the `<2xx>` tags that choose its
target), and a route from a to c: the model that translates a -> c, or, where none does, two
that go through a language b they share (a -> b, then b -> c: pivoting, as LibreTranslate
does through English).

Pure bookkeeping: nothing here loads or decodes (`mtkit.api.many` and the server do).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mtkit.api.model import ModelInfo
from mtkit.errors import ConfigError

# The pivot LibreTranslate uses, preferred where several languages would do.
PREFERRED_PIVOT = "en"


class RouteError(ConfigError):
    """No model translates the pair asked for (the message names the pairs there are), or
    no model has the name asked for."""


@dataclass(frozen=True)
class Direction:
    """One way a model translates: `source` -> `target` by the model named `model`, with
    the language tag that chooses this direction in a model of several (None: the model's
    own default)."""

    source: str
    target: str
    model: str
    tag: str | None = None

    def __str__(self) -> str:
        return f"{self.source} -> {self.target}"


@dataclass(frozen=True)
class Route:
    """The legs a translation takes: one direction, or two through a pivot language."""

    legs: tuple[Direction, ...]

    @property
    def pivot(self) -> str | None:
        """The language between the legs, None for a direct route."""
        return self.legs[0].target if len(self.legs) > 1 else None


def tag_targets(tags: Sequence[str]) -> dict[str, str]:
    """A tagged model's target languages by code: the tags written `<2xx>` (Johnson et al.
    2017's form, the recipes'), xx being the code."""
    return {tag[2:-1]: tag for tag in tags
            if tag.startswith("<2") and tag.endswith(">") and len(tag) > 3}


def directions_of(name: str, info: ModelInfo) -> list[Direction]:
    """The directions of the model called `name`: its recipe's source -> target, or for a
    model with `<2xx>` tags each source language (`data.src_lang` 'en+de') into each tag's
    target but itself. Tags of another form name no language: such a model is reached by
    its name only."""
    if not info.tags:
        return [Direction(info.src_lang, info.tgt_lang, name)]
    targets = tag_targets(info.tags)
    return [Direction(s, t, name, tag) for s in info.src_lang.split("+")
            for t, tag in targets.items() if t != s]


class Router:
    """Routes over the directions of several models, by name (in the order given: the
    first model listed for a pair serves it, the others are reached by name), pivoting
    through a shared language when `pivot`."""

    def __init__(self, models: Mapping[str, ModelInfo], *, pivot: bool = True) -> None:
        self.models = dict(models)
        self.directions = [d for name, info in self.models.items()
                           for d in directions_of(name, info)]
        self.pivot = pivot
        self._direct: dict[tuple[str, str], Direction] = {}
        for d in self.directions:
            self._direct.setdefault((d.source, d.target), d)

    @property
    def sources(self) -> list[str]:
        """Every language some model translates from."""
        return sorted({d.source for d in self.directions})

    def route(self, source: str, target: str) -> Route:
        """The route from `source` to `target`: direct where a model translates it, else
        through a pivot (English where it would do, else the first by code); a RouteError
        naming the pairs there are otherwise."""
        direct = self._direct.get((source, target))
        if direct is not None:
            return Route((direct,))
        if self.pivot and source != target:
            pivots = self._pivots(source, target)
            if pivots:
                mid = PREFERRED_PIVOT if PREFERRED_PIVOT in pivots else pivots[0]
                return Route((self._direct[source, mid], self._direct[mid, target]))
        raise RouteError(f"{source} -> {target}: no model translates it; {self.known()}")

    def _pivots(self, source: str, target: str) -> list[str]:
        return sorted(mid for (a, mid) in self._direct
                      if a == source and mid != target and (mid, target) in self._direct)

    def pairs(self) -> list[tuple[str, str, str | None]]:
        """Every pair a route exists for, as (source, target, pivot or None), sorted."""
        out = {(a, b): None for a, b in self._direct}
        if self.pivot:
            for a in self.sources:
                for b in {t for _, t in self._direct}:
                    if a != b and (a, b) not in out and self._pivots(a, b):
                        out[a, b] = self.route(a, b).pivot
        return sorted((a, b, p) for (a, b), p in out.items())

    def known(self) -> str:
        """The pairs there are, in words (for error messages), and the models reached by
        name only (tags that name no language)."""
        direct = [f"{a} -> {b}" for a, b, p in self.pairs() if p is None]
        pivoted = [f"{a} -> {b} (through {p})" for a, b, p in self.pairs() if p is not None]
        routed = {d.model for d in self.directions}
        by_name = [f"{n} (its tags, {', '.join(i.tags)}, are not <2xx>)"
                   for n, i in self.models.items() if n not in routed]
        parts = [f"the pairs translated: {', '.join(direct)}" if direct else
                 "no pair is translated by its languages"]
        if pivoted:
            parts.append(f"through a pivot: {', '.join(pivoted)}")
        if by_name:
            parts.append(f"by model name only: {', '.join(by_name)}")
        return "; ".join(parts)

    def by_model(self, name: str, target: str | None = None) -> Route:
        """The route through the model called `name` alone: into `target` where one is
        asked for, else the model's default direction (its recipe's data.tag)."""
        info = self.models.get(name)
        if info is None:
            raise RouteError(f"model {name!r}: no such model; the models: "
                             f"{', '.join(self.models)}")
        if target is None:
            return Route((Direction(info.src_lang, info.tgt_lang, name),))
        own = [d for d in self.directions if d.model == name and d.target == target]
        if not own:
            have = sorted({d.target for d in self.directions if d.model == name})
            raise RouteError(f"model {name!r} does not translate into {target}; it "
                             f"translates into {', '.join(have) or 'no language by code'}")
        return Route((own[0],))

    def languages(self) -> list[dict[str, object]]:
        """LibreTranslate's `/languages`: each source language and every target a route
        reaches from it."""
        targets: dict[str, list[str]] = {}
        for a, b, _ in self.pairs():
            targets.setdefault(a, []).append(b)
        return [{"code": a, "name": a, "targets": targets[a]} for a in sorted(targets)]
