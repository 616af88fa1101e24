"""Which language a text is written in, for `source: auto`: py3langid (Lui and Baldwin 2012's
langid.py, naive Bayes over byte n-grams), whose model ships inside its package so nothing is
fetched at run time, restricted to the languages the loaded models translate from.

py3langid was chosen over lingua-language-detector by bench/detect_accuracy.py: as accurate or
more on Tatoeba en/de, short inputs included, at a fraction of the time per call and of the
size (bench/RESULTS.md).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mtkit.errors import ConfigError

DETECT_HINT = "pip install 'mtkit[detect]'"


class DetectError(ConfigError):
    """The languages cannot be told apart (a code the identifier does not know), or the
    identifier is not installed."""


@dataclass(frozen=True)
class Detected:
    """A language and how sure the identifier is, 0-100 (LibreTranslate's scale)."""

    language: str
    confidence: float


def _identifier_code(code: str) -> str:
    """The identifier's ISO 639-1 label for a recipe's language code ('en', 'pt-BR')."""
    return code.replace("_", "-").split("-")[0].lower()


class Detector:
    """Detection among `languages` (the models' source codes): each text's candidates, best
    first. A single language needs no identifier: it is the answer, with confidence 100."""

    def __init__(self, languages: Iterable[str]) -> None:
        self.languages = tuple(sorted(set(languages)))
        self._ident: Any = None
        if len(self.languages) > 1:
            self._ident = _identifier(self.languages)
        # the identifier's label -> the code the models use
        self._codes = {_identifier_code(c): c for c in self.languages}

    def detect(self, text: str) -> list[Detected]:
        """Every language of `languages`, most likely first."""
        if self._ident is None:
            return [Detected(self.languages[0], 100.0)] if self.languages else []
        ranked = self._ident.rank(text)
        return [Detected(self._codes[label], round(100.0 * p, 2)) for label, p in ranked]

    def best(self, text: str) -> Detected:
        """The most likely language of `text`."""
        found = self.detect(text)
        if not found:
            raise DetectError("source: auto: no model is loaded, so there is no language "
                              "to detect")
        return found[0]


@functools.cache
def _full_identifier() -> Any:
    """py3langid's identifier over every language it knows, read once per process (its
    model takes a second to unpack)."""
    try:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier
    except ModuleNotFoundError:
        raise DetectError("source: auto among several languages needs py3langid, which is "
                          f"not installed; install the detect extra: {DETECT_HINT}") from None
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def _identifier(languages: tuple[str, ...]) -> Any:
    """py3langid's identifier, restricted to `languages`, with probabilities that sum to 1;
    a DetectError naming the codes it does not know."""
    ident = copy.copy(_full_identifier())  # restricting it replaces arrays, never writes them
    labels = {_identifier_code(c) for c in languages}
    if unknown := sorted(c for c in languages if _identifier_code(c) not in ident.labels):
        raise DetectError(f"source: auto: the language identifier does not know "
                          f"{', '.join(unknown)} (it knows ISO 639-1 codes such as en, de); "
                          "give the source language")
    if len(labels) < len(languages):
        raise DetectError(f"source: auto: {', '.join(languages)} are the same language to "
                          "the identifier; give the source language")
    ident.set_languages(sorted(labels))
    return ident
