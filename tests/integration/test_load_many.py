"""`mtkit.load_many` on two toy runs labelled en -> de and de -> fr: routing by languages and
by name gives each model's own output, a pivot equals translating twice, detection picks the
route, and a limit of one loaded model unloads and reloads as asked and stays correct."""

from __future__ import annotations

from pathlib import Path

import pytest

import mtkit
from mtkit.api.router import RouteError
from mtkit.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")

LINES = ["sa gu mir", "pel nel dar", "mir wi mu lop ke"]


@pytest.fixture(scope="module")
def singles(lang_runs: dict[str, Path]) -> dict[str, mtkit.TranslationModel]:
    return {k: mtkit.load(p, device="cpu", threads=1) for k, p in lang_runs.items()}


def test_routes_and_pivot(lang_runs, singles):
    many = mtkit.load_many(lang_runs["en-de"], lang_runs["de-fr"], device="cpu", threads=1)
    assert many.names == ["toy-en-de", "toy-de-fr"]
    en_de = singles["en-de"].translate(LINES)
    assert en_de != singles["de-fr"].translate(LINES)  # so a wrong route shows
    assert many.translate(LINES, source="en", target="de") == en_de
    assert many.translate(LINES, source="de", target="fr") == singles["de-fr"].translate(LINES)
    assert many.translate(LINES, model="toy-de-fr") == singles["de-fr"].translate(LINES)
    # en -> fr: no model, so through de, each leg that model's own translation
    routed = many.translate_full(LINES, source="en", target="fr")
    assert [r.pivot for r in routed] == ["de"] * 3
    assert [r.text for r in routed] == singles["de-fr"].translate(en_de)
    assert [r.legs[0].translation.text for r in routed] == en_de
    assert [(r.legs[0].direction.model, r.legs[1].direction.model) for r in routed] == [
        ("toy-en-de", "toy-de-fr")] * 3
    with pytest.raises(RouteError, match="fr -> en: no model translates it; the pairs "
                       r"translated: de -> fr, en -> de; through a pivot: en -> fr \(through de\)"):
        many.translate("x", source="fr", target="en")
    with pytest.raises(ConfigError, match="prefix and terms: .* through a pivot"):
        many.translate(LINES, source="en", target="fr", prefix=[""] * 3)
    assert many.translate(LINES[:1], source="en", target="de", prefix=["gu"]) == (
        singles["en-de"].translate(LINES[:1], prefix=["gu"]))
    off = mtkit.load_many(lang_runs["en-de"], lang_runs["de-fr"], pivot=False, device="cpu",
                          threads=1)
    with pytest.raises(RouteError, match="en -> fr: no model"):
        off.translate("x", source="en", target="fr")


def test_auto_detects_each_sentence(lang_runs, singles):
    pytest.importorskip("py3langid")
    many = mtkit.load_many(lang_runs["en-de"], lang_runs["de-fr"], device="cpu", threads=1)
    lines = ["The dog runs through the snow.", "Der Hund läuft durch den Schnee."]
    routed = many.translate_full(lines, source="auto", target="fr")
    assert [(r.source, r.detected.language, r.pivot) for r in routed] == [
        ("en", "en", "de"), ("de", "de", None)]
    assert routed[1].text == singles["de-fr"].translate(lines[1])
    assert routed[0].detected.confidence > 50
    assert [d.language for d in many.detect(lines[1])] == ["de", "en"]


def test_one_model_loaded_at_a_time(lang_runs, singles):
    events: list[tuple[str, str]] = []
    many = mtkit.load_many(lang_runs["en-de"], lang_runs["de-fr"], max_loaded=1,
                           device="cpu", threads=1)
    many.on_event(lambda kind, name, seconds: events.append((kind, name)))
    assert many.pool.loaded == ["toy-de-fr"]
    assert (many.pool.loads, many.pool.unloads) == ({"toy-en-de": 1, "toy-de-fr": 1},
                                                    {"toy-en-de": 1})
    for _ in range(2):
        assert many.translate(LINES, source="en", target="de") == singles["en-de"].translate(
            LINES)
        assert many.translate(LINES, source="de", target="fr") == singles["de-fr"].translate(
            LINES)
    assert events == [("unload", "toy-de-fr"), ("load", "toy-en-de"),
                      ("unload", "toy-en-de"), ("load", "toy-de-fr")] * 2
    assert many.pool.loaded == ["toy-de-fr"]
    assert (many.pool.loads, many.pool.unloads) == ({"toy-en-de": 3, "toy-de-fr": 3},
                                                    {"toy-en-de": 3, "toy-de-fr": 2})
