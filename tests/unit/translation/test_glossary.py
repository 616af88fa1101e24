"""Glossary matching and term placement without a model: words compared without case and
punctuation, longest leftmost matches, a term's target span from hand-made attention."""

from __future__ import annotations

import numpy as np
import pytest

from mtkit.errors import ConfigError, DataError
from mtkit.translation.terms import (
    Match,
    glossary,
    missing_terms,
    parse_tsv,
    replaced,
    target_span,
    word_key,
)


def test_words_compare_without_case_and_surrounding_punctuation():
    assert word_key("«Screwdriver,»") == "screwdriver"
    assert word_key("T-Shirt.") == "t-shirt"
    assert word_key("...") == ""


def test_matches_are_whole_words_longest_first_and_never_overlap():
    g = glossary([("red", "rot"), ("red car", "Rennwagen"), ("car", "Auto"),
                  ("dog", "Hund")])
    assert g.matches("A red car and a Dog.") == [
        Match(1, 3, ("Rennwagen",)), Match(5, 6, ("Hund",))]
    assert g.matches("a redcar, a reddish car") == [Match(4, 5, ("Auto",))]
    assert g.matches("nothing here") == []


def test_glossary_problems_are_all_named():
    with pytest.raises(ConfigError, match=r"terms: entry 2: .*; entry 3: 'a' is already"):
        glossary([("a", "b"), ("", "x"), ("a", "c"), ("a", "b")])
    with pytest.raises(ConfigError, match="terms_method: invalid choice 'x'; expected one "
                       "of prefix, align"):
        glossary([("a", "b")], method="x")
    assert parse_tsv(["# comment", "", "a b\tc", "d\te f"], "g.tsv") == [
        ("a b", "c"), ("d", "e f")]
    with pytest.raises(DataError, match=r"g.tsv: line\(s\) 1, 3: expected a source term"):
        parse_tsv(["a b", "x\ty", "a\tb\tc"], "g.tsv")


def test_missing_counts_each_occurrence():
    ms = [Match(0, 1, ("ko",)), Match(1, 2, ("ko",)), Match(3, 5, ("zen", "zen"))]
    assert missing_terms(ms, "ko zen zen".split()) == {("ko",): 1}
    assert missing_terms(ms, "Ko, ko zen zen.".split()) == {}


def test_target_span_follows_attention_and_falls_back_to_the_word_before():
    # 4 target words x 4 source words: a reversal
    w = np.eye(4)[::-1].copy()
    assert target_span(Match(1, 2, ("x",)), w, 4) == (2, 3)
    assert target_span(Match(0, 2, ("x", "y")), w, 4) == (2, 4)
    w[:, 2] = 0.0  # nothing aligned to source word 2: after the word aligned to word 1
    w[1] = [0.0, 0.0, 0.0, 1.0]
    assert target_span(Match(2, 3, ("x",)), w, 4) == (3, 3)


def test_replaced_keeps_punctuation_and_a_fixed_prefix():
    words = "Ein Hund im Schnee .".split()
    m = Match(3, 4, ("Neuschnee",))
    assert replaced(["Ein", "Hund", "im", "Schnee."], [((3, 4), m)]) == [
        "Ein", "Hund", "im", "Neuschnee."]
    assert replaced(words, [((0, 1), Match(0, 1, ("Der",)))], fixed=1) == [
        "Ein", "Der", "Hund", "im", "Schnee", "."]
