"""LibreTranslate's language pairs on a model with language tags: `target` picks the tag."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("fastapi")

from mtkit.serve.app import ApiError, _tag_targets, libre_tag  # noqa: E402
from mtkit.serve.schema import LibreRequest  # noqa: E402


def _model(tags: list[str], src: str = "en+de", tgt: str = "de+en") -> SimpleNamespace:
    return SimpleNamespace(tags=tags, info=SimpleNamespace(src_lang=src, tgt_lang=tgt))


def _tag(model: SimpleNamespace, source: str, target: str) -> str | None:
    return libre_tag(model, LibreRequest(q="a", source=source, target=target))


def test_the_target_picks_a_tag_of_the_form_2xx():
    both = _model(["<2de>", "<2en>"])
    assert _tag_targets(both) == {"de": "<2de>", "en": "<2en>"}
    assert _tag(both, "en", "de") == "<2de>" and _tag(both, "de", "en") == "<2en>"
    for source, target, words in [("en", "fr", "into de, en, chosen by target"),
                                  ("fr", "de", "from en or de"),
                                  ("auto", "de", "source: auto: this server detects no language")]:
        with pytest.raises(ApiError, match=words) as caught:
            _tag(both, source, target)
        assert caught.value.status == 400
    one_source = _model(["<2de>", "<2fr>"], src="en", tgt="de+fr")
    assert _tag(one_source, "auto", "fr") == "<2fr>"  # one source language: nothing to detect


def test_a_model_without_tags_keeps_its_one_pair_and_other_tags_name_no_language():
    plain = _model([], src="en", tgt="de")
    assert _tag(plain, "auto", "de") is None and _tag(plain, "en", "de") is None
    with pytest.raises(ApiError, match="en -> fr: this server translates en -> de"):
        _tag(plain, "en", "fr")
    with pytest.raises(ApiError, match=r"none \(its tags, <rev>, <copy>, are not <2xx>\)"):
        _tag(_model(["<rev>", "<copy>"]), "en", "de")
