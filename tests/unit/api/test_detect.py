"""Language detection restricted to the models' source languages (py3langid, whose model
ships in its package): LibreTranslate's shape, one language needing no identifier, codes it
does not know refused by name."""

from __future__ import annotations

import pytest

from mtkit.api.detect import Detected, DetectError, Detector

pytest.importorskip("py3langid", reason="detection needs the detect extra (make install)")


def test_detects_among_the_languages_given():
    d = Detector(["en", "de"])
    found = d.detect("Der Hund läuft durch den Schnee.")
    assert [x.language for x in found] == ["de", "en"]
    assert found[0].confidence > 90
    assert sum(x.confidence for x in found) == pytest.approx(100, abs=0.1)
    assert d.best("The dog runs through the snow.").language == "en"
    # restricted: French is not a candidate, so a French text is one of the two
    assert {x.language for x in Detector(["en", "de"]).detect("Le chien court.")} == {"en", "de"}
    assert Detector(["en", "fr"]).best("Le chien court dans la neige.").language == "fr"


def test_region_codes_are_kept():
    assert Detector(["en-GB", "pt-BR"]).best("O cachorro corre na neve.") == Detected(
        "pt-BR", pytest.approx(100, abs=5))


def test_one_language_needs_no_identifier():
    assert Detector(["src"]).detect("sa gu mir") == [Detected("src", 100.0)]


def test_unknown_codes_are_named():
    with pytest.raises(DetectError, match="does not know src, tgt .*give the source language"):
        Detector(["src", "tgt", "en"])
    with pytest.raises(DetectError, match="are the same language"):
        Detector(["en-GB", "en-US"])
