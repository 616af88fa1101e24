"""Several models behind one call (`mtkit.load_many`): a text in language a is translated into
c by the model of a -> c, or through a pivot language (a -> b, then b -> c); `source="auto"`
detects each sentence's language among those the models translate from; at most `max_loaded`
models are kept loaded, the least recently used unloaded and loaded again when asked for.

What `mtkit serve --model ... --model ...` does, in process: the server routes, detects and
pivots with the same `Router`, `Detector` and `ModelPool`, and batches each leg.

>>> models = mtkit.load_many("runs/en-de", "runs/de-en")
>>> models.translate("Ein Hund rennt.", source="auto", target="en")
'A dog runs.'
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mtkit.api.detect import Detected, Detector
from mtkit.api.model import ModelInfo, TranslationModel, open_model
from mtkit.api.pool import ModelPool, PoolEvent
from mtkit.api.results import Translation
from mtkit.api.router import Direction, Route, Router
from mtkit.errors import ConfigError

AUTO = "auto"  # the source language that asks for detection (LibreTranslate's word)


@dataclass(frozen=True)
class Leg:
    """One model's part of a translation: its direction and what it returned."""

    direction: Direction
    translation: Translation


@dataclass(frozen=True)
class Routed:
    """A sentence translated from `source` into `target` (the languages of the route; the
    source detected where `auto` was asked for, with `detected`'s confidence), through one
    leg or two (`pivot`: the language between them)."""

    source: str
    target: str
    legs: list[Leg]
    detected: Detected | None = None

    @property
    def translation(self) -> Translation:
        """The last leg's translation: the one in the target language."""
        return self.legs[-1].translation

    @property
    def text(self) -> str:
        return self.translation.text

    @property
    def pivot(self) -> str | None:
        return self.legs[0].direction.target if len(self.legs) > 1 else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Opener = Callable[[list[Path]], TranslationModel]


def unique_name(name: str, taken: Iterable[str]) -> str:
    """`name` (a recipe's), or with '-2', '-3', ... where another model has it."""
    taken = set(taken)
    unique, n = name, 1
    while unique in taken:
        n += 1
        unique = f"{name}-{n}"
    return unique


class ModelSet:
    """Models by name, their router and a detector over their source languages. Every model
    is loaded once at the start, to check it and read its languages, then kept within
    `max_loaded` (None: all)."""

    def __init__(self, groups: Sequence[Sequence[Path]], opener: Opener, *,
                 max_loaded: int | None = None, pivot: bool = True,
                 on_event: Callable[[PoolEvent, str, float], None] | None = None) -> None:
        if not groups:
            raise ConfigError("load_many: give at least one model")
        self._groups: dict[str, list[Path]] = {}
        self.infos: dict[str, ModelInfo] = {}
        self._listeners: list[Callable[[PoolEvent, str, float], None]] = []
        self._closers: list[Callable[[str], None]] = []
        if on_event is not None:
            self._listeners.append(on_event)
        self.pool: ModelPool[TranslationModel] = ModelPool(
            [], lambda name: opener(self._groups[name]), self._close, limit=max_loaded,
            on_event=self._event)
        for group in groups:  # memory stays within the limit at the start too
            self.pool.make_room()
            start = time.perf_counter()
            model = opener(list(group))
            name = unique_name(model.info.name, self.infos)
            self._groups[name], self.infos[name] = list(group), model.info
            self.pool.keep(name, model, time.perf_counter() - start)
            del model
        self.router = Router(self.infos, pivot=pivot)
        self._detector: Detector | None = None
        self._lock = threading.Lock()

    @property
    def names(self) -> list[str]:
        return list(self.infos)

    def on_event(self, listener: Callable[[PoolEvent, str, float], None]) -> None:
        """Tell `listener` of every load and unload from now on (kind, name, seconds)."""
        self._listeners.append(listener)

    def on_close(self, listener: Callable[[str], None]) -> None:
        """Call `listener(name)` before a model is unloaded (the server's batcher ends
        there)."""
        self._closers.append(listener)

    def _event(self, kind: PoolEvent, name: str, seconds: float) -> None:
        for listener in self._listeners:
            listener(kind, name, seconds)

    def _close(self, name: str, model: TranslationModel) -> None:
        for listener in self._closers:
            listener(name)
        model.close()

    def detector(self) -> Detector:
        """The detector over every model's source languages (built on first use: it may
        need py3langid)."""
        with self._lock:
            if self._detector is None:
                self._detector = Detector(self.router.sources)
            return self._detector

    def detect(self, text: str) -> list[Detected]:
        """`text`'s candidate languages among the models' sources, most likely first."""
        return self.detector().detect(text)

    def route(self, source: str, target: str | None, model: str | None = None) -> Route:
        """The route for a known source: by `model` where one is named, else by languages."""
        if model is not None:
            return self.router.by_model(model, target)
        if target is None:
            raise ConfigError("target: give the target language (or a model)")
        return self.router.route(source, target)

    def plan(self, lines: Sequence[str], source: str, target: str | None,
             model: str | None = None) -> tuple[list[Route], list[Detected | None]]:
        """Each line's route, and its detected language where `source` is auto."""
        if source != AUTO or model is not None:
            route = self.route(source, target, model)
            return [route] * len(lines), [None] * len(lines)
        found = [self.detector().best(line) for line in lines]
        return [self.route(d.language, target) for d in found], list(found)

    def translate(self, text: str | Sequence[str], *, target: str | None = None,
                  source: str = AUTO, model: str | None = None, **options: Any) -> Any:
        """The best translation of one sentence (a str) or of each of a list; `source`: its
        language, or auto (detected); `target`: the language wanted; `model`: a model's name
        in place of the languages; `options`: DecodeConfig fields."""
        one = isinstance(text, str)
        lines = [text] if one else list(text)
        out = [r.text for r in self.translate_full(lines, source=source, target=target,
                                                   model=model, **options)]
        return out[0] if one else out

    def translate_full(self, lines: Iterable[str], *, target: str | None = None,
                       source: str = AUTO, model: str | None = None, **kwargs: Any
                       ) -> list[Routed]:
        """Every sentence's route and each leg's `TranslationModel.translate_full` (with
        `kwargs`: decoding options, align, attention, prefix, terms, tag ...); the second
        leg of a pivot translates the first's best hypothesis. A prefix or terms apply to
        one model's output: with a pivot they are a ConfigError."""
        lines = list(lines)
        routes, found = self.plan(lines, source, target, model)
        out: list[Routed | None] = [None] * len(lines)
        for route, idx in _grouped(routes).items():
            texts = [lines[i] for i in idx]
            legs: list[list[Leg]] = [[] for _ in idx]
            for d in route.legs:
                options = _leg_options(kwargs, d, len(route.legs), idx, len(lines))
                with self.pool.use(d.model) as tm:
                    results = tm.translate_full(texts, **options)
                for k, r in enumerate(results):
                    legs[k].append(Leg(d, r))
                texts = [r.text for r in results]
            for k, i in enumerate(idx):
                out[i] = Routed(route.legs[0].source, route.legs[-1].target, legs[k], found[i])
        return [r for r in out if r is not None]

    def close(self) -> None:
        self.pool.close()


def _leg_options(kwargs: dict[str, Any], d: Direction, legs: int, idx: list[int], n: int
                 ) -> dict[str, Any]:
    """`translate_full`'s options for one leg, over the sentences `idx` of `n`: the
    direction's tag (or the one asked for, by a model's name), the prefixes of those
    sentences."""
    options = dict(kwargs)
    if legs > 1 and (options.get("prefix") is not None or options.get("terms") is not None):
        raise ConfigError(f"prefix and terms: they apply to one model's output, and this pair "
                          f"is translated through a pivot ({d} is one leg)")
    tag = options.pop("tag", None)
    if tag is not None and d.tag is not None:
        raise ConfigError("tag: the target chooses the direction here; give a tag with a "
                          "model, or no tag")
    options["tag"] = tag or d.tag
    prefix = options.get("prefix")
    if isinstance(prefix, list | tuple) and len(prefix) == n and len(idx) < n:
        options["prefix"] = [prefix[i] for i in idx]
    return options


def _grouped(routes: Sequence[Route]) -> dict[Route, list[int]]:
    groups: dict[Route, list[int]] = {}
    for i, route in enumerate(routes):
        groups.setdefault(route, []).append(i)
    return groups


def load_many(*models: str | Path | Sequence[str | Path], max_loaded: int | None = None,
              pivot: bool = True, device: str = "auto", threads: int = 0,
              precision: str | None = None, **decode: Any) -> ModelSet:
    """Load several models (each a run directory, a checkpoint, an export, or a list of
    checkpoints: an ensemble) as one `ModelSet`, routed by language. max_loaded: the most
    kept loaded at once (None: all); pivot: translate through a shared language where no
    model translates a pair directly; device, threads, precision, decode: as `mtkit.load`,
    for every model."""
    groups = [[Path(m)] if isinstance(m, str | Path) else [Path(p) for p in m]
              for m in models]

    def opener(paths: list[Path]) -> TranslationModel:
        return open_model(paths, device=device, threads=threads, precision=precision,
                          decode=decode)

    return ModelSet(groups, opener, max_loaded=max_loaded, pivot=pivot)
