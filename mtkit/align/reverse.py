"""Symmetrized alignment with a model of the other direction (`mtkit align --reverse RUN`).

A forward model (source -> target) and a reverse one (target -> source) each give one
directional alignment of the same sentence pair; combining the two is the usual way to lift
precision (Och & Ney 2003, §4.1; Koehn et al. 2003, §4.2). The reverse model reads the pair's
text with its own sentencepiece models (the two runs need not share a vocabulary), so the two
matrices meet at word level: both merge pieces into the same whitespace words.

Shapes: T target words (rows of the forward matrix), S source words (its columns); the reverse
matrix is (S, T), one row per source word.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from mtkit.align.links import Symmetrization, extract_links, symmetrize
from mtkit.align.matrix import AlignMatrix, Link
from mtkit.align.pairs import Pair, label, pair_attention, pair_words
from mtkit.align.readout import Readout
from mtkit.config import DataConfig
from mtkit.data.spm import Tokenizer
from mtkit.errors import DataError, OptionError
from mtkit.models.base import AttentionChoice, Translator


@dataclass(frozen=True)
class Reverse:
    """A model of the other direction (in eval mode), its tokenizer, the attention and the
    read-out to take from it, and how to combine its links with the forward ones."""

    model: Translator
    tok: Tokenizer
    attention: AttentionChoice
    readout: Readout = "current"
    symmetrize: Symmetrization = "grow-diag-final"
    checkpoint: Path | None = None  # the model's file, named in JSON output


def check_direction(forward: DataConfig, reverse: DataConfig, *, name: str) -> str | None:
    """Raise OptionError (naming `reverse`, the model `name`) when the recipes' language labels
    show that the reverse model does not translate target -> source. Returns a warning instead when
    either recipe keeps the default labels (src, tgt), which say nothing about the languages;
    None when the labels match."""
    default = (DataConfig.src_lang, DataConfig.tgt_lang)
    fwd, rev = (forward.src_lang, forward.tgt_lang), (reverse.src_lang, reverse.tgt_lang)
    if default in (fwd, rev):
        return (f"--reverse {name}: a recipe keeps the default language labels ({default[0]} "
                f"-> {default[1]}), so mtkit cannot check that {name} translates "
                f"{fwd[1]} -> {fwd[0]}")
    if rev != fwd[::-1]:
        raise OptionError.about("reverse", f"translates {rev[0]} -> {rev[1]}; expected "
                                f"{fwd[1]} -> {fwd[0]}, the other direction of the model aligned",
                                value=name)
    return None


def reverse_matrices(rev: Reverse, tok: Tokenizer, pairs: list[Pair], *,
                     device: torch.device, batch_tokens: int) -> list[AlignMatrix]:
    """The reverse model's word-level (S, T) matrix of each pair, in `pairs` order: the
    pair's target text (a translation: the forward tokenizer's decoding of it) as its source,
    the source text as its target, forced. `tok` is the forward model's tokenizer."""
    flipped = []
    for p in pairs:
        tgt_text = p.tgt_text if p.tgt_text is not None else tok.decode_tgt(p.tgt)
        flipped.append(Pair(p.index, rev.tok.encode_src(tgt_text), rev.tok.encode_tgt(p.src_text),
                            tgt_text, p.src_text))
    maps = pair_attention(rev.model, flipped, rev.attention, device=device,
                          batch_tokens=batch_tokens)
    return [label(rev.tok, p, w, "cross", "word", rev.readout, words)
            for p, w, words in zip(flipped, maps, pair_words(rev.tok, flipped), strict=True)]


def combined_links(forward: set[Link], matrix: AlignMatrix, reverse: AlignMatrix, *,
                   how: Symmetrization, method: str, threshold: float | None,
                   where: str) -> set[Link]:
    """Symmetrize the forward links (of the word-level (T, S) `matrix`) with the links that
    `method` extracts from the reverse model's (S, T) matrix, turned into (source i, target
    j). Raises DataError naming `where` when the two models split the pair into different
    words (e.g. sentencepiece models that normalise whitespace differently)."""
    want = matrix.weights.shape[::-1]
    if reverse.weights.shape != want:
        raise DataError(f"{where}: the reverse model reads {reverse.weights.shape[1]} target "
                        f"and {reverse.weights.shape[0]} source words, the forward model "
                        f"{want[1]} and {want[0]}; their links cannot be combined")
    backward = {(i, j) for j, i in extract_links(reverse.weights, method, threshold=threshold)}
    return symmetrize(forward, backward, how)

