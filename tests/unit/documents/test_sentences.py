"""Sentence ranges over a paragraph's words."""

from __future__ import annotations

import re

from mtkit.documents.sentences import fitted, sentence_ranges


def _sentences(text: str) -> list[str]:
    words = [m.span() for m in re.finditer(r"\S+", text)]
    tokens = [text[a:b] for a, b in words]
    return [" ".join(tokens[a:b]) for a, b in sentence_ranges(text, words)]


def test_boundaries_between_words_only():
    assert _sentences("Mr. Smith came. He sat down!  Did Straße ändern? Ja.") == [
        "Mr. Smith came.", "He sat down!", "Did Straße ändern?", "Ja."]


def test_a_line_break_is_no_boundary_and_emoji_keep_offsets():
    assert _sentences("😀 A dog\nruns here. Then it sleeps.") == [
        "😀 A dog runs here.", "Then it sleeps."]
    assert _sentences("") == [] and _sentences("   ") == []


def test_fitted_prefers_punctuation_then_clause_words_then_the_middle():
    tokens = "a b c d e f g h".split()
    assert fitted([(0, 8)], tokens, lambda s: len(s.split()) > 4) == [(0, 4), (4, 8)]
    tokens = "a b c d and e f g h".split()
    assert fitted([(0, 9)], tokens, lambda s: len(s.split()) > 6) == [(0, 4), (4, 9)]
    tokens = "a b; c d e f g h".split()
    assert fitted([(0, 8)], tokens, lambda s: len(s.split()) > 6) == [(0, 2), (2, 8)]
