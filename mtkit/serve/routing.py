"""A request's sentences through the models a server holds: each sentence's route (by source
and target, by a model's name, or the only model; `source: auto` detected), and each leg
decoded by its model's batcher, so that a pivot's legs are batched with that model's other
requests; the JSON the two endpoints answer with.

A route is planned before any model is loaded (a pair no model translates costs nothing);
the options are checked against each leg's model once it is held.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from mtkit.api import Extras, Translation, TranslationModel
from mtkit.api.many import AUTO, Leg, Routed
from mtkit.api.router import Direction, Route
from mtkit.config import DecodeConfig
from mtkit.errors import ConfigError, OptionError
from mtkit.serve.batcher import Batcher
from mtkit.serve.models import ServedModels
from mtkit.translation.terms import Glossary

# batcher, lines, options, extras, prefixes, terms, tag -> the results (the app's deadline
# and queue errors around Batcher.submit)
Decode = Callable[[Batcher, list[str], DecodeConfig, Extras, "list[str] | None",
                   "Glossary | None", "str | None"], Awaitable[list[Translation]]]


@dataclass(frozen=True)
class Ask:
    """What a request asks of the models: its sentences, languages or model, and options."""

    lines: list[str]
    source: str | None = None
    target: str | None = None
    model: str | None = None
    tag: str | None = None
    changes: dict[str, Any] | None = None  # DecodeConfig fields
    extras: Extras = Extras()
    prefix: Any = None
    terms: dict[str, str] | None = None
    terms_method: str | None = None
    alternatives: int = 0  # hypotheses beside the best, the search widened to give them


def plan(served: ServedModels, ask: Ask) -> tuple[list[Route], list[Any]]:
    """Each sentence's route and its detected language (None where the source was given); a
    RouteError or a DetectError (a 400) otherwise."""
    models = served.models
    if ask.model is not None or (ask.target is None and ask.source is None):
        if ask.model is None and len(models.names) > 1:
            raise ConfigError(f"target: this server has {len(models.names)} models; give "
                              "source (or auto) and target, or a model: "
                              f"{', '.join(models.names)}")
        route = models.router.by_model(ask.model or models.names[0], ask.target)
        return [route] * len(ask.lines), [None] * len(ask.lines)
    if ask.target is None:
        raise ConfigError("target: give the target language with the source")
    return models.plan(ask.lines, ask.source or AUTO, ask.target)


async def translate(served: ServedModels, ask: Ask, decode: Decode) -> list[Routed]:
    """Every sentence of `ask` along its route (sentences of one route together)."""
    routes, found = plan(served, ask)
    out: list[Routed | None] = [None] * len(ask.lines)
    groups: dict[Route, list[int]] = {}
    for i, route in enumerate(routes):
        groups.setdefault(route, []).append(i)
    for route, idx in groups.items():
        texts = [ask.lines[i] for i in idx]
        legs: list[list[Leg]] = [[] for _ in idx]
        for direction in route.legs:
            results = await _leg(served, direction, texts, ask, alone=len(route.legs) == 1,
                                 decode=decode, at=idx)
            for k, r in enumerate(results):
                legs[k].append(Leg(direction, r))
            texts = [r.text for r in results]
        for k, i in enumerate(idx):
            out[i] = Routed(route.legs[0].source, route.legs[-1].target, legs[k], found[i])
    return [r for r in out if r is not None]


async def _leg(served: ServedModels, d: Direction, texts: list[str], ask: Ask, *,
               alone: bool, decode: Decode, at: Sequence[int]) -> list[Translation]:
    """One leg's translations by its model, held while it decodes."""
    model, batcher = await served.acquire(d.model)
    try:
        cfg, extras, prefixes, glossary, tag = _checked(model, d, ask, alone, at)
        return await decode(batcher, texts, cfg, extras, prefixes, glossary, tag)
    finally:
        served.release(d.model)


def _checked(model: TranslationModel, d: Direction, ask: Ask, alone: bool,
             at: Sequence[int]) -> tuple[DecodeConfig, Extras, Any, Any, str | None]:
    """The request's options checked against the leg's model (ConfigError: a 422)."""
    if not alone and (ask.prefix is not None or ask.terms is not None):
        raise ConfigError("prefix and terms: they apply to one model's output, and this pair "
                          f"is translated through a pivot ({d.source} -> {d.target} is one "
                          "leg)")
    if ask.tag is not None and d.tag is not None:
        raise OptionError.about("tag", "the target chooses the direction here; give a tag "
                                "with a model, or no tag")
    changes = dict(ask.changes or {})
    if ask.alternatives:
        changes.update(nbest_changes(model.options(changes), ask.alternatives + 1))
    cfg = model.options(changes)
    extras = model.extras(**asdict(ask.extras))
    prefix = ask.prefix
    if prefix is not None and not isinstance(prefix, str) and len(at) != len(ask.lines):
        prefix = [prefix[i] for i in at]  # the sentences of this route
    prefixes = model.checked_prefixes(prefix, len(at))
    if ask.terms_method is not None and ask.terms is None:
        raise OptionError.about("terms_method", "it places terms, which need terms")
    glossary = (None if ask.terms is None
                else model.glossary(ask.terms, ask.terms_method or "prefix"))
    return cfg, extras, prefixes, glossary, model.checked_tag(ask.tag or d.tag)


def nbest_changes(defaults: DecodeConfig, nbest: int) -> dict[str, Any]:
    """The decoding changes that give `nbest` hypotheses over `defaults` (a request's
    options): greedy search gives one, so it becomes a beam search, and a beam is widened to
    `nbest`; sampling draws as many as asked. LibreTranslate's alternatives and
    /v1/translate's `widen` (what the page at / sends) both come here."""
    changes: dict[str, Any] = {"nbest": nbest}
    if defaults.method == "greedy":
        changes["method"] = "beam"
    if defaults.method != "sample":
        changes["beam_size"] = max(defaults.beam_size, nbest)
    return changes


def v1_json(results: list[Routed]) -> dict[str, Any]:
    """POST /v1/translate's answer: each sentence's translation (the last leg's) with its
    languages, the detected source, the pivot, and for a pivot every leg."""
    models = list(dict.fromkeys(r.legs[-1].direction.model for r in results))
    return {"model": ",".join(models), "translations": [_v1_one(r) for r in results]}


def _v1_one(r: Routed) -> dict[str, Any]:
    out = {**r.translation.to_dict(), "text": r.text, "source_lang": r.source,
           "target_lang": r.target, "detected": None if r.detected is None
           else asdict(r.detected), "pivot": r.pivot}
    if r.pivot is not None:
        out["legs"] = [{"model": leg.direction.model, "source_lang": leg.direction.source,
                        "target_lang": leg.direction.target, **leg.translation.to_dict(),
                        "text": leg.translation.text} for leg in r.legs]
    return out


def libre_json(results: list[Routed], *, one: bool, alternatives: int, auto: bool
               ) -> dict[str, Any]:
    """POST /translate's answer (LibreTranslate's keys, and `pivot` where one was used)."""
    def each(values: list[Any]) -> Any:
        return values[0] if one else values

    out: dict[str, Any] = {"translatedText": each([r.text for r in results])}
    if alternatives:
        out["alternatives"] = each([[c.text for c in r.translation.candidates[1:]]
                                    for r in results])
    if auto:
        out["detectedLanguage"] = each([asdict(r.detected) if r.detected else None
                                        for r in results])
    if any(r.pivot for r in results):
        out["pivot"] = each([r.pivot for r in results])
    return out


def directions_json(served: ServedModels) -> list[dict[str, Any]]:
    """Every pair a route exists for: its models (two for a pivot) and its pivot."""
    router = served.models.router
    out = []
    for source, target, pivot in router.pairs():
        route = router.route(source, target)
        out.append({"source": source, "target": target,
                    "models": [leg.model for leg in route.legs], "pivot": pivot})
    return out

