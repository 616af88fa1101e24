"""Routing among several models' directions, without a model: direct routes, pivots through a
shared language (English preferred), the 400-style error naming the pairs there are, tagged
models, routing by name, LibreTranslate's language list."""

from __future__ import annotations

import pytest

from mtkit.api import ModelInfo
from mtkit.api.router import Direction, Route, RouteError, Router, tag_targets
from mtkit.config import DecodeConfig


def info(name: str, src: str, tgt: str, tags: tuple[str, ...] = ()) -> ModelInfo:
    return ModelInfo(name, src, tgt, "transformer", [], "mtkit", "cpu", DecodeConfig(),
                     True, "fp32", 2, 4, tags)


def router(*infos: ModelInfo, pivot: bool = True) -> Router:
    return Router({i.name: i for i in infos}, pivot=pivot)


def test_direct_and_pivot_routes():
    r = router(info("a", "fr", "de"), info("b", "de", "it"), info("c", "fr", "en"),
               info("d", "en", "it"))
    assert r.route("fr", "de") == Route((Direction("fr", "de", "a"),))
    # fr -> it exists through de and through en: English is preferred, as LibreTranslate's
    pivoted = r.route("fr", "it")
    assert pivoted.legs == (Direction("fr", "en", "c"), Direction("en", "it", "d"))
    assert pivoted.pivot == "en"
    assert r.route("fr", "de").pivot is None
    assert ("fr", "it", "en") in r.pairs() and ("fr", "de", None) in r.pairs()


def test_pivot_without_english_takes_the_first_code():
    r = router(info("a", "fr", "nl"), info("b", "nl", "it"), info("c", "fr", "de"),
               info("d", "de", "it"))
    assert r.route("fr", "it").pivot == "de"


def test_unknown_pair_names_the_known_ones():
    r = router(info("a", "en", "de"), info("b", "de", "fr"))
    with pytest.raises(RouteError) as e:
        r.route("fr", "en")
    assert str(e.value) == ("fr -> en: no model translates it; the pairs translated: "
                            "de -> fr, en -> de; through a pivot: en -> fr (through de)")
    assert r.route("en", "fr").pivot == "de"
    off = router(info("a", "en", "de"), info("b", "de", "fr"), pivot=False)
    with pytest.raises(RouteError, match="en -> fr: no model translates it; the pairs "
                       "translated: de -> fr, en -> de$"):
        off.route("en", "fr")
    assert off.pairs() == [("de", "fr", None), ("en", "de", None)]


def test_tagged_model_and_first_listed_wins():
    tags = ("<2en>", "<2de>", "<2fr>")
    r = router(info("multi", "en+de", "en+de+fr", tags), info("other", "en", "fr"))
    assert tag_targets(tags) == {"en": "<2en>", "de": "<2de>", "fr": "<2fr>"}
    assert r.route("de", "fr").legs == (Direction("de", "fr", "multi", "<2fr>"),)
    assert r.route("en", "fr").legs[0].model == "multi"  # listed first
    assert r.by_model("other").legs == (Direction("en", "fr", "other"),)
    assert r.by_model("multi", "de").legs == (Direction("en", "de", "multi", "<2de>"),)
    with pytest.raises(RouteError, match="model 'multi' does not translate into it; it "
                       "translates into de, en, fr"):
        r.by_model("multi", "it")
    with pytest.raises(RouteError, match="model 'nope': no such model; the models: multi, "
                       "other"):
        r.by_model("nope")
    assert r.languages() == [{"code": "de", "name": "de", "targets": ["en", "fr"]},
                             {"code": "en", "name": "en", "targets": ["de", "fr"]}]


def test_a_model_whose_tags_name_no_language_is_reached_by_name():
    r = router(info("two-way", "src", "tgt", ("<rev>", "<copy>")))
    assert r.pairs() == [] and r.languages() == []
    with pytest.raises(RouteError, match=r"src -> tgt: no model translates it; no pair is "
                       r"translated by its languages; by model name only: two-way \(its "
                       r"tags, <rev>, <copy>, are not <2xx>\)$"):
        r.route("src", "tgt")
    assert r.by_model("two-way").legs == (Direction("src", "tgt", "two-way"),)
