"""Terminology: a glossary of source terms and the target terms a translation must use, and
where in a translation a term goes, found through the model's own attention.

A term matches whole whitespace words of the source line, compared without the punctuation
around them and without case ("Screwdriver," matches "screwdriver"); a multi-word term
matches those words in a row; where terms overlap, the longest one starting leftmost wins.
Inflected forms match only as glossary entries of their own (no stemming). A target term is
present in a translation when its words appear in a row, compared the same way.

Two methods place a missing target term (`TermsMethod`; both run by `LineTranslator`):
- `align`: the translation's target words aligned to the source term (by attention, both
  argmax directions) are replaced by the target term, the text scored again by the model.
  One search; the words around the term are the model's own and are not adapted to it.
- `prefix`: the translation up to those words, then the target term, becomes a target
  prefix (`force_prefix`; the next token must begin a new word, so that the term is not
  continued into a longer one) and the model translates the rest again; one more search per
  placed term. What follows a term is what the model finds best given it. A term still
  missing after that (the export's engine cannot stop a word from being continued) is put in
  as by `align`.
Either way every target term is in every hypothesis, as often as its source term is in the
line.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, cast, get_args

from mtkit.config.guided import Readout
from mtkit.errors import ConfigError, DataError, choice
from mtkit.fileio import unicode_problem

if TYPE_CHECKING:
    import threading

    import numpy as np
    import torch

    from mtkit.align import Words
    from mtkit.data.hypothesis import Hypothesis
    from mtkit.data.spm import Tokenizer

TermsMethod = Literal["prefix", "align"]
TERMS_METHODS: tuple[str, ...] = get_args(TermsMethod)


def word_key(word: str) -> str:
    """A word as terms compare it: without the punctuation around it, case folded."""
    start, end = 0, len(word)
    while start < end and unicodedata.category(word[start])[0] in "PS":
        start += 1
    while end > start and unicodedata.category(word[end - 1])[0] in "PS":
        end -= 1
    return word[start:end].casefold()


@dataclass(frozen=True)
class Term:
    """One glossary entry: the source term's word keys and the target term's text."""

    source: tuple[str, ...]
    target: str


@dataclass(frozen=True)
class Match:
    """A term found in a source line: its words [start, end) and its target words."""

    start: int
    end: int
    target: tuple[str, ...]


@dataclass(frozen=True)
class Glossary:
    """Terms and the method that places them; validated here, once.

    readout: which attention rows align target words (`mtkit.align.readout`)."""

    terms: tuple[Term, ...]
    method: TermsMethod = "prefix"
    readout: Readout = "current"
    _by_first: dict[str, list[Term]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.method not in TERMS_METHODS:
            raise ConfigError(f"terms_method: invalid choice {self.method!r}; expected one of "
                              f"{', '.join(TERMS_METHODS)}")
        by_first: dict[str, list[Term]] = {}
        for term in self.terms:
            by_first.setdefault(term.source[0], []).append(term)
        for found in by_first.values():
            found.sort(key=lambda t: -len(t.source))  # longest first
        object.__setattr__(self, "_by_first", by_first)

    def matches(self, line: str) -> list[Match]:
        """The terms of `line`, left to right, none overlapping (leftmost, then longest)."""
        keys = [word_key(w) for w in line.split()]
        out, i = [], 0
        while i < len(keys):
            for term in self._by_first.get(keys[i], ()):
                n = len(term.source)
                if tuple(keys[i:i + n]) == term.source:
                    out.append(Match(i, i + n, tuple(term.target.split())))
                    i += n
                    break
            else:
                i += 1
        return out


def glossary(pairs: Iterable[tuple[str, str]], *, method: str = "prefix",
             readout: str = "current", name: str = "terms") -> Glossary:
    """A Glossary from (source term, target term) pairs; `name` says where they came from in
    errors (a file, or the API's field). A source term listed twice with two targets, an empty
    side, or a side without a word are refused, every problem at once."""
    problems, terms, seen = [], [], {}
    for n, (src, tgt) in enumerate(pairs, 1):
        if bad := next(((side, why) for side, text in (("source", src), ("target", tgt))
                        if (why := unicode_problem(text))), None):
            problems.append(f"entry {n}: the {bad[0]} term is {bad[1]}")
            continue
        key = tuple(k for k in (word_key(w) for w in src.split()) if k)
        if not key or not tgt.split():
            problems.append(f"entry {n}: expected a source term and a target term, each with "
                            f"a word, got {src!r} and {tgt!r}")
            continue
        if key in seen and seen[key] != tgt.strip():
            problems.append(f"entry {n}: {src!r} is already given as {seen[key]!r}")
            continue
        if key not in seen:
            seen[key] = tgt.strip()
            terms.append(Term(key, " ".join(tgt.split())))
    if problems:
        raise ConfigError(f"{name}: " + "; ".join(problems[:5])
                          + (f"; and {len(problems) - 5} more" if len(problems) > 5 else ""))
    # the method is checked by Glossary itself, named as the API's terms_method
    return Glossary(tuple(terms), cast("TermsMethod", method), choice("readout", readout, Readout))


def parse_tsv(lines: Iterable[str], name: str) -> list[tuple[str, str]]:
    """A glossary file's (source, target) pairs: one per line, tab-separated; empty lines and
    lines starting with '#' are skipped. A DataError names every bad line (up to five)."""
    pairs, bad = [], []
    for n, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        cols = line.rstrip("\r\n").split("\t")
        if len(cols) != 2:
            bad.append(n)
            continue
        pairs.append((cols[0], cols[1]))
    if bad:
        listed = ", ".join(map(str, bad[:5])) + (f" and {len(bad) - 5} more" if len(bad) > 5
                                                  else "")
        raise DataError(f"{name}: line(s) {listed}: expected a source term, a tab and a "
                        "target term")
    return pairs


def as_pairs(terms: Any) -> list[tuple[str, str]]:
    """The API's terms (a mapping source -> target, or (source, target) pairs) as pairs, or a
    ConfigError naming the field."""
    items = list(terms.items()) if isinstance(terms, Mapping) else terms
    if isinstance(items, str | bytes) or not isinstance(items, Sequence | Iterable):
        raise ConfigError("terms: expected a mapping of source term to target term, or "
                          "(source, target) pairs")
    items = list(items)
    if not all(isinstance(p, Sequence) and not isinstance(p, str) and len(p) == 2
               and all(isinstance(x, str) for x in p) for p in items):
        raise ConfigError("terms: expected a mapping of source term to target term, or "
                          "(source, target) pairs of strings")
    return [(p[0], p[1]) for p in items]


def occurrences(target: Sequence[str], words: Sequence[str]) -> int:
    """How often the target term's words appear in a row among `words`."""
    keys, want = [word_key(w) for w in words], [word_key(w) for w in target]
    n = len(want)
    return sum(keys[i:i + n] == want for i in range(len(keys) - n + 1))


def missing_terms(matches: Sequence[Match], words: Sequence[str]) -> dict[tuple[str, ...], int]:
    """Target terms (their words) that `words` holds fewer times than the source line holds
    their source terms, and how many are lacking."""
    needed: dict[tuple[str, ...], int] = {}
    for m in matches:
        needed[m.target] = needed.get(m.target, 0) + 1
    lacking = {t: n - occurrences(t, words) for t, n in needed.items()}
    return {t: n for t, n in lacking.items() if n > 0}


def target_span(match: Match, weights: Any, n_tgt: int) -> tuple[int, int]:
    """The target words [a, b) a source term's words are aligned to.

    weights: (n_tgt, n_src) word-level attention (rows sum to 1 or 0). The target words whose
    most-attended source word is in the term (argmax-tgt), and for each source word of the
    term the target word attending to it most (argmax-src); their range, or, where that range
    is wider than twice the term's target words plus one (a stray link), the argmax-src words
    alone. Where no target word is aligned to the term, an empty span (a, a) after the target
    word aligned to the nearest source word before it (at the start if none is)."""
    if n_tgt == 0:
        return 0, 0
    cols = range(match.start, min(match.end, weights.shape[1]))
    by_row = {j for j in range(n_tgt) if weights[j].max() > 0
              and match.start <= int(weights[j].argmax()) < match.end}
    by_col = {int(weights[:n_tgt, i].argmax()) for i in cols if weights[:n_tgt, i].max() > 0}
    found = by_row | by_col
    if found and max(found) - min(found) + 1 > 2 * len(match.target) + 1 and by_col:
        found = by_col
    if found:
        return min(found), max(found) + 1
    for i in reversed(range(min(match.start, weights.shape[1]))):
        if weights[:n_tgt, i].max() > 0:
            at = int(weights[:n_tgt, i].argmax()) + 1
            return at, at
    return 0, 0


_PUNCT_CHARS = ".,;:!?\"'()[]{}«»„“”‚‘’…-"


def keep_punctuation(old: Sequence[str], new: Sequence[str]) -> list[str]:
    """`new` words replacing `old` ones, with the punctuation before the first and after the
    last old word kept ("Schnee." replaced by "Neuschnee" gives "Neuschnee.")."""
    out = list(new)
    if not old or not out:
        return out
    first, last = old[0], old[-1]
    lead = first[: len(first) - len(first.lstrip(_PUNCT_CHARS))] if first else ""
    trail = last[len(last.rstrip(_PUNCT_CHARS)):] if last else ""
    out[0], out[-1] = lead + out[0], out[-1] + trail
    return out


def replaced(words: Sequence[str], spans: list[tuple[tuple[int, int], Match]], *,
             fixed: int = 0) -> list[str]:
    """`words` with each span replaced by its match's target words (spans of one sentence,
    in any order; a span overlapping an earlier-starting one is inserted after it); the
    first `fixed` words (a prefix the caller asked for) are kept."""
    out, at = list(words[:fixed]), fixed
    for (a, b), match in sorted(spans, key=lambda s: (s[0][0], s[1].start)):
        a = max(a, at)
        b = max(b, a)
        out += words[at:a]
        out += keep_punctuation(words[a:b], match.target)
        at = b
    return out + list(words[at:])


# --------------------------------------------------------------------------- placing terms


class Termed(Protocol):
    """An input line as terms are placed in its translation (`lines.Item` is one)."""

    line: str
    terms: list[Match]  # the glossary's terms found in it
    nbest: list[Hypothesis]  # best first
    prefix: list[int]  # target ids every output starts with
    new_word: bool  # the output's next token after the prefix must begin a new word


It = TypeVar("It", bound=Termed)


class TermSearch(Protocol[It]):
    """What placing terms asks of a translator whose searches return attention
    (`lines.LineTranslator` is one): its tokenizer and output cap, a search of items again
    with their prefixes (their `nbest` replaced), a forced pass of targets through the model,
    and the source pieces, words and attention columns a line's links count."""

    tok: Tokenizer
    max_out_len: int | None  # tokens before EOS (None: no cap)

    def search_items(self, items: list[It], stop: threading.Event) -> None: ...

    def forced_items(self, items: list[It], targets: list[list[int]],
                     stop: threading.Event) -> list[Hypothesis]: ...

    def source_view(self, it: It, attn: torch.Tensor
                    ) -> tuple[list[str], Words | None, torch.Tensor]: ...


def place_terms(tr: TermSearch[It], items: list[It], glossary: Glossary,
                stop: threading.Event) -> None:
    """Decode `items` (each with `terms`) with `tr`, which returns attention, and see that
    every hypothesis holds every target term, by `glossary.method` (module docstring)."""
    tr.search_items(items, stop)
    if glossary.method == "align":
        _align_terms(tr, items, glossary, stop)
    else:
        _prefix_terms(tr, items, glossary, stop)


def _missing(tr: TermSearch[It], it: It, hyp: Hypothesis, readout: str
             ) -> tuple[list[str], list[tuple[tuple[int, int], Match]]]:
    """The hypothesis's words and the spans where its missing terms go: of a term's matches,
    as many as it lacks, those whose aligned words do not hold it first."""
    words = tr.tok.decode_tgt(hyp.tokens).split()
    lacking = missing_terms(it.terms, words)
    if not lacking:
        return words, []
    weights = _word_attention(tr, it, hyp, readout, len(words))
    kept = held_words(words, {m.target for m in it.terms})
    spans = []
    for target, n in lacking.items():
        found = []
        for m in it.terms:
            if m.target == target:
                a, b = target_span(m, weights, len(words))
                # words of a term already there are not replaced: the term goes after them
                found.append(((b, b) if kept & set(range(a, b)) else (a, b), m))
        found.sort(key=lambda s: occurrences(target, words[s[0][0]:s[0][1]]) > 0)
        spans += found[:n]
    return words, spans


def held_words(words: Sequence[str], targets: Iterable[tuple[str, ...]]) -> set[int]:
    """The positions of `words` that are part of an occurrence of one of the target terms."""
    keys = [word_key(w) for w in words]
    held = set()
    for target in targets:
        want = [word_key(w) for w in target]
        for i in range(len(keys) - len(want) + 1):
            if keys[i:i + len(want)] == want:
                held.update(range(i, i + len(want)))
    return held


def _word_attention(tr: TermSearch[It], it: It, hyp: Hypothesis, readout: str,
                    n_words: int) -> np.ndarray:
    """(target words, source words) attention of `hyp`, EOS dropped, rows renormalised; all
    zero where the hypothesis has no attention or its words cannot be told apart."""
    import numpy as np

    from mtkit.align import from_attention, select_rows

    n_src = len(it.line.split())
    tgt_pieces = tr.tok.tgt_pieces(hyp.tokens)
    if hyp.attn is None or not tgt_pieces:
        return np.zeros((n_words, n_src))
    src_pieces, src_words, attn = tr.source_view(it, hyp.attn)
    rows = select_rows(attn, len(tgt_pieces), choice("readout", readout, Readout))
    m = from_attention(rows, src_pieces, tgt_pieces, level="word", src_words=src_words)
    weights = np.asarray(m.weights)
    if weights.shape[0] != n_words:  # pieces that decode to other words than the text's
        return np.zeros((n_words, n_src))
    return weights


def _fixed_words(tr: TermSearch[It], it: It) -> int:
    return len(tr.tok.decode_tgt(it.prefix).split()) if it.prefix else 0


def _align_terms(tr: TermSearch[It], items: list[It], glossary: Glossary,
                 stop: threading.Event) -> None:
    """Every hypothesis with a missing term gets it in place of the words aligned to its
    source, and is scored again by the model (one forced pass)."""
    redo: list[tuple[It, int, list[int]]] = []
    for it in items:
        fixed = _fixed_words(tr, it)
        for k, hyp in enumerate(it.nbest):
            words, spans = _missing(tr, it, hyp, glossary.readout)
            if spans:
                text = " ".join(replaced(words, spans, fixed=fixed))
                redo.append((it, k, tr.tok.encode_tgt(text)))
    if not redo:
        return
    scored = tr.forced_items([it for it, _, _ in redo], [t for _, _, t in redo], stop)
    for (it, k, _), hyp in zip(redo, scored, strict=True):
        it.nbest[k] = hyp
    for it in {id(it): it for it, _, _ in redo}.values():
        it.nbest.sort(key=lambda h: -h.score)


def _prefix_terms(tr: TermSearch[It], items: list[It], glossary: Glossary,
                  stop: threading.Event) -> None:
    """Rounds of: for each item whose best hypothesis lacks a term, the first missing one
    (in target order) and the words before it become the item's prefix, and the items are
    searched again. A term in a prefix stays, so each round places one more term for good:
    at most as many rounds as the sentence has terms."""
    todo = items
    placed: dict[int, Counter[tuple[str, ...]]] = {id(it): Counter() for it in items}
    for _ in range(max((len(it.terms) for it in items), default=0)):
        again = []
        for it in todo:
            words, spans = _missing(tr, it, it.nbest[0], glossary.readout)
            if not spans:
                continue
            fixed = _fixed_words(tr, it)
            (a, b), match = min(spans, key=lambda s: (max(s[0][0], fixed), s[1].start))
            if placed[id(it)][match.target] >= sum(m.target == match.target for m in it.terms):
                continue  # placed, then lost: not again (`align` puts it back below)
            a, b = max(a, fixed), max(b, a, fixed)
            text = " ".join(words[:a] + keep_punctuation(words[a:b], match.target))
            ids = tr.tok.encode_tgt(text)
            if tr.max_out_len is not None and len(ids) >= tr.max_out_len:
                continue  # the model's positions cannot hold it: `align` puts it in below
            it.prefix, it.new_word = ids, True
            placed[id(it)][match.target] += 1
            again.append(it)
        if not again:
            break
        tr.search_items(again, stop)
        todo = again
    _align_terms(tr, items, glossary, stop)
