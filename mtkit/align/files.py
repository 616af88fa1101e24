"""`mtkit align`: a model's attention for sentence pairs, as terminal tables, heatmaps, Pharaoh
word alignments, JSON, and scores against gold alignments.

The pipeline: read source lines (and target lines with -t) -> sentencepiece ids -> without
targets, translate with the given search and take the best hypothesis -> the teacher-forced
attention of the chosen kind, layer and head (`Translator.attention_maps`), in length-sorted
batches of bounded size -> each pair's matrix sliced to its real lengths and, for the
cross-attention, to the rows of the chosen read-out (`mtkit.align.readout`) -> an
`mtkit.align.AlignMatrix` (EOS dropped, pieces merged into words at word level) -> outputs.
With a reverse model (`mtkit.align.reverse`) the links of both directions are combined.

Translations are aligned by forcing the hypothesis through the model again rather than by
reading `Hypothesis.attn`: in eval mode both give the same weights for the model's own layer
(the search tests check that forced attention equals the search's), and only the forced pass
can show any layer, head or self-attention.

Shapes: B batch, S source length, T target length (each with EOS), h heads.
"""

from __future__ import annotations

import os
import re
import time
import warnings
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, get_args

import torch
from rich.console import Console

from mtkit.align import (
    DEFAULT_METHOD,
    DEFAULT_READOUT,
    DEFAULT_THRESHOLD,
    READOUTS,
    SYMMETRIZATIONS,
    AlignMatrix,
    AlignScores,
    Gold,
    Level,
    Link,
    Readout,
    check_gold_bounds,
    extract_links,
    format_pharaoh,
    matrix_record,
    read_gold,
    score_corpus,
    score_links,
    write_json,
)
from mtkit.align.heatmap_folder import HeatmapFolder, holds, owned_files
from mtkit.align.links import LinkMethod, link_problems
from mtkit.align.matrix import piece_words
from mtkit.align.pairs import Pair as Pair  # re-exported, as before pairs.py: tests build them
from mtkit.align.pairs import (
    PairWords,
    check_inputs,
    check_lengths,
    label,
    pair_attention,
    pair_words,
    read_pairs,
    translate_pairs,
)
from mtkit.align.reverse import Reverse, combined_links, reverse_matrices
from mtkit.align.viz import FORMATS, HeatmapFormat, heatmap_name, print_matrix, write_heatmap
from mtkit.config import DecodeConfig
from mtkit.data.spm import Tokenizer
from mtkit.errors import DataError, OptionError, Problem
from mtkit.fileio import InvalidUtf8, atomic_write
from mtkit.models.base import AttentionChoice, Translator

# Lines read, translated and aligned at a time: bounds memory on big inputs.
CHUNK_PAIRS = 1000


# --------------------------------------------------------------------------- outputs


@dataclass(frozen=True)
class AlignOutputs:
    """What to make of the matrices (any combination). show: print each matrix to the console;
    heatmap_dir/heatmap_format: one image per pair; pharaoh: a file of word links, one line
    per pair ('-': standard output); json: matrices, tokens, links (and gold scores) of every
    pair ('-': standard output); gold/one_based: gold links to score against; level: matrices
    over words (pieces merged) or pieces; method and threshold: link extraction
    (mtkit.align.extract_links)."""

    show: bool = False
    heatmap_dir: Path | None = None
    heatmap_format: HeatmapFormat = "png"
    pharaoh: Path | None = None
    json: Path | None = None
    gold: Path | None = None
    one_based: bool = False
    level: Level = "word"
    method: LinkMethod = DEFAULT_METHOD
    threshold: float | None = None

    @property
    def needs_links(self) -> bool:
        return self.pharaoh is not None or self.json is not None or self.gold is not None

    def check(self) -> None:
        """Raise OptionError when nothing is asked for, a value is not one of the choices or
        two outputs collide; fields are named as in this class."""
        problems = []
        if not (self.show or self.heatmap_dir or self.needs_links):
            problems.append(Problem(None, "nothing to do: give at least one of {0}, {1} DIR, "
                                    "{2} FILE, {3} FILE, {4} FILE",
                                    others=("show", "heatmap_dir", "pharaoh", "json", "gold")))
        if self.level not in get_args(Level):
            problems.append(Problem("level", f"invalid choice {self.level!r}; expected word or "
                                    "subword"))
        elif self.gold is not None and self.level != "word":
            # Gold links number words (as eflomal, fast_align and the gold standards do):
            # scored against piece positions they gave a wrong AER without a word of warning.
            problems.append(Problem("gold", "links are between words: scoring them needs {0} "
                                    "word", others=("level",)))
        if self.heatmap_format not in FORMATS:
            problems.append(Problem("heatmap_format", f"invalid choice {self.heatmap_format!r}; "
                                    f"expected one of {', '.join(FORMATS)}"))
        problems += link_problems(self.method, self.threshold)
        if problems:
            raise OptionError(*problems)
        if self.heatmap_dir is not None:
            owned_files(self.heatmap_dir)  # a folder of mtkit's own heatmaps, or new or empty
            for option, path in (("pharaoh", self.pharaoh), ("json", self.json)):
                if path is not None and str(path) != "-" and (
                        os.path.abspath(path) == os.path.abspath(self.heatmap_dir)):
                    raise OptionError.about(option, "is the {0} folder; give {1} a file of its "
                                            "own", value=path, others=("heatmap_dir", option))
                if path is not None and holds(self.heatmap_dir, path):
                    raise OptionError.about(option, "inside the {0} folder, which holds only "
                                            "heatmaps (a rerun replaces them); write it elsewhere",
                                            value=path, others=("heatmap_dir",))


def reading_problems(*, kind: str, readout: str, reverse: bool, symmetrize: str,
                     needs_links: bool, level: str) -> list[Problem]:
    """What is wrong with a read-out and a reverse model for this attention kind and these
    outputs (the command checks them before loading a model, `align_files` again: options
    are never accepted and then ignored)."""
    checks = [
        (readout not in READOUTS, Problem(
            "readout", f"invalid choice {readout!r}; expected one of {', '.join(READOUTS)}")),
        (readout != "current" and kind != "cross", Problem(
            "readout", "chooses cross-attention rows; it excludes {0}", value=readout,
            others=("kind",))),
        (reverse and kind != "cross", Problem(
            "reverse", "combines cross-attention links; it excludes {0}", others=("kind",))),
        (reverse and not needs_links, Problem(
            "reverse", "combines links: add {0}, {1} or {2}", others=("pharaoh", "json", "gold"))),
        (reverse and level != "word", Problem(
            "reverse", "needs {0} word: the two models' pieces differ, their words do not",
            others=("level",))),
        (symmetrize not in SYMMETRIZATIONS, Problem(
            "symmetrize", f"invalid choice {symmetrize!r}; expected one of "
            f"{', '.join(SYMMETRIZATIONS)}")),
    ]
    return [problem for bad, problem in checks if bad]


@dataclass
class AlignReport:
    """What a run did: pairs aligned, seconds, and with gold the corpus scores."""

    pairs: int = 0
    seconds: float = 0.0
    scores: AlignScores | None = None
    invalid_utf8: list[InvalidUtf8] = field(default_factory=list)
    unmapped: list[str] = field(default_factory=list)  # FILE:LINE of lines shown in other words
    missing_glyphs: set[str] = field(default_factory=set)  # heatmap labels' boxes

    def note_unmapped(self, pairs: list[Pair], words: list[PairWords], *, src: Path,
                      tgt: Path | None) -> None:
        """Record the lines read whose whitespace words the tokenizer could not follow
        (`pair_words`): their links index the words their pieces decode to."""
        for pair, (src_w, tgt_w) in zip(pairs, words, strict=True):
            if src_w is None:
                self.unmapped.append(f"{src}:{pair.index + 1}")
            if tgt_w is None and tgt is not None:
                self.unmapped.append(f"{tgt}:{pair.index + 1}")

    def summary(self) -> str:
        s = max(self.seconds, 1e-9)
        pairs = "sentence pair" if self.pairs == 1 else "sentence pairs"
        return (f"aligned {self.pairs} {pairs} in {self.seconds:.2f}s "
                f"({self.pairs / s:.1f}/s)")


class _Sinks:
    """The outputs of one run, fed one matrix at a time in input order."""

    def __init__(self, outputs: AlignOutputs, golds: list[Gold] | None, console: Console | None,
                 pharaoh: IO[str] | None, what: str, *, src: Path,
                 reverse: Reverse | None = None) -> None:
        self.o = outputs
        self.golds = golds
        self.console = console
        self.pharaoh = pharaoh
        self.what = what
        self.src = src
        self.reverse = reverse
        self.records: list[dict] = []
        self.links: list[set[Link]] = []
        self.missing_glyphs: set[str] = set()
        self.heatmaps = None if outputs.heatmap_dir is None else HeatmapFolder(
            outputs.heatmap_dir)

    def add(self, index: int, matrix: AlignMatrix, reverse: AlignMatrix | None = None) -> None:
        """One pair's outputs; `reverse`: the reverse model's (S, T) word matrix of the pair,
        whose links are combined with the forward ones."""
        o = self.o
        if o.show and self.console is not None:
            print_matrix(matrix, self.console, title=f"sentence {index} ({self.what}, "
                         f"{matrix.level} level)")
        if self.heatmaps is not None:
            self.heatmaps.claim(heatmap_name(index, o.heatmap_format))
            # matplotlib's UserWarnings, once per image: of an empty sentence's empty frame
            # (nothing to say), of characters its font lacks, drawn as boxes in PNG and PDF
            # (said once, by the command; SVG keeps text, drawn by the viewer's fonts)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", UserWarning)
                write_heatmap(matrix, o.heatmap_dir, index, fmt=o.heatmap_format)
            for w in caught:
                if not issubclass(w.category, UserWarning):
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)
                elif o.heatmap_format != "svg" and (m := re.match(
                        r"Glyph (\d+) \(.*\) missing from", str(w.message))):
                    self.missing_glyphs.add(chr(int(m[1])))
        if not o.needs_links:
            return
        if matrix.axes != ("source", "target"):  # self-attention: matrices, no links
            if o.json is not None:
                self.records.append(matrix_record(matrix, index=index))
            return
        links = extract_links(matrix.weights, o.method, threshold=o.threshold)
        if reverse is not None:
            assert self.reverse is not None
            links = combined_links(links, matrix, reverse, how=self.reverse.symmetrize,
                                   method=o.method, threshold=o.threshold,
                                   where=f"{self.src}:{index + 1}")
        self.links.append(links)
        scores = None
        if self.golds is not None:
            scores = score_links(links, self.golds[index])  # bounds checked by _read_golds
        if self.pharaoh is not None:
            self.pharaoh.write(format_pharaoh(links) + "\n")
        if o.json is not None:
            self.records.append(matrix_record(matrix, index=index, links=links, scores=scores))


def _read_golds(outputs: AlignOutputs, tok: Tokenizer, pairs: list[Pair], src: Path,
                tgt: Path | None) -> tuple[list[Gold] | None, list[PairWords] | None]:
    """The gold links, one line per pair, and the pairs' words (`pair_words`), the links
    checked against those words before any output is written; (None, None) without gold."""
    if outputs.gold is None:
        return None, None
    golds = read_gold(outputs.gold, one_based=outputs.one_based)
    if len(golds) != len(pairs):
        raise DataError(f"{outputs.gold}: {len(golds)} line{'s' * (len(golds) != 1)} of gold "
                        f"links for {len(pairs)} "
                        "sentence pairs; expected one line per pair")
    words = pair_words(tok, pairs)
    for gold, pair, pw in zip(golds, pairs, words, strict=True):
        assert pair.tgt_text is not None, "gold links need given targets (AlignOutputs.check)"
        counts = []
        for path, text, ids, w, pieces in ((src, pair.src_text, pair.src, pw[0], tok.src_pieces),
                                           (tgt, pair.tgt_text, pair.tgt, pw[1], tok.tgt_pieces)):
            n = len(text.split())
            counts.append(n if w is not None else len(piece_words(pieces(ids)).labels))
            if counts[-1] != n and gold.possible:  # the links would index other words
                raise DataError(f"{gold.where}: gold links count the whitespace words of "
                                f"{path}:{pair.index + 1} ({n}), which its sentencepiece pieces "
                                "cannot be matched to (its normalization drops or adds a break "
                                "between words); mend the line or leave its gold line empty")
        check_gold_bounds(gold, *counts)
    return golds, words


def align_files(model: Translator, tok: Tokenizer, src: Path, tgt: Path | None, *,
                attention: AttentionChoice, outputs: AlignOutputs, decode: DecodeConfig,
                device: torch.device, readout: Readout = DEFAULT_READOUT,
                reverse: Reverse | None = None, max_len: int | None = None,
                console: Console | None = None, stdout: IO[str] | None = None,
                checkpoint: Path | None = None) -> AlignReport:
    """Align every line of `src` with the same line of `tgt` (forced decoding) or, without
    `tgt`, with its translation by `decode`'s search; write the requested outputs.

    The cross-attention's rows are those of `readout` (`mtkit.align.readout`); with `reverse`,
    a model of the other direction aligns each pair too (with its own read-out) and the links
    written and scored are the two directions' combined (`reverse.symmetrize`); the matrices
    shown are the forward model's. The models must be in eval mode on `device`; `console`
    receives --print tables; `stdout` receives the Pharaoh lines when outputs.pharaoh is '-';
    `checkpoint`, the model's file, is named in the JSON output. A line of more than `max_len`
    tokens (the model's data.max_len) is refused: attention costs memory quadratic in it.
    Inputs and gold links are checked before any model work; output files are written
    atomically (none on an error)."""
    outputs.check()
    problems = reading_problems(
        kind=attention.kind, readout=readout, reverse=reverse is not None,
        symmetrize=reverse.symmetrize if reverse else "grow-diag-final",
        needs_links=outputs.needs_links, level=outputs.level)
    if problems:
        raise OptionError(*problems)
    check_inputs(src, tgt, outputs.gold)
    start = time.perf_counter()
    report = AlignReport()
    pairs = read_pairs(tok, src, tgt, report.invalid_utf8)
    check_lengths(model, pairs, src, tgt, max_len=max_len)
    report.pairs = len(pairs)
    golds, gold_words = _read_golds(outputs, tok, pairs, src, tgt)
    with ExitStack() as stack:
        pharaoh = None
        if outputs.pharaoh is not None and str(outputs.pharaoh) == "-":
            assert stdout is not None, "Pharaoh output to '-' needs a stdout stream"
            pharaoh = stdout
        elif outputs.pharaoh is not None:
            pharaoh = stack.enter_context(atomic_write(outputs.pharaoh))
        what = attention.describe() + ("" if readout == "current" else f", {readout} read-out")
        sinks = _Sinks(outputs, golds, console, pharaoh, what, src=src, reverse=reverse)
        for a in range(0, len(pairs), CHUNK_PAIRS):
            chunk = pairs[a: a + CHUNK_PAIRS]
            if tgt is None:
                translate_pairs(model, chunk, decode, device=device)
            maps = pair_attention(model, chunk, attention, device=device,
                                  batch_tokens=decode.batch_tokens)
            backward: list[AlignMatrix | None] = [None] * len(chunk)
            if reverse is not None:
                backward = list(reverse_matrices(reverse, tok, chunk, device=device,
                                                 batch_tokens=decode.batch_tokens))
            words = gold_words[a: a + CHUNK_PAIRS] if gold_words else pair_words(tok, chunk)
            report.note_unmapped(chunk, words, src=src, tgt=tgt)
            for pair, weights, rev, w in zip(chunk, maps, backward, words, strict=True):
                sinks.add(pair.index, label(tok, pair, weights, attention.kind, outputs.level,
                                            readout, w), rev)
    if sinks.heatmaps is not None:
        sinks.heatmaps.finish()
        report.missing_glyphs = sinks.missing_glyphs
    if golds is not None:
        report.scores, _ = score_corpus(sinks.links, golds)
    if outputs.json is not None:
        write_json(outputs.json, sinks.records, scores=report.scores, stdout=stdout,
                   settings=settings_record(checkpoint, attention, readout, outputs,
                                            None if tgt is not None else decode, reverse))
    report.seconds = time.perf_counter() - start
    return report


def settings_record(checkpoint: Path | None, attention: AttentionChoice, readout: Readout,
                    outputs: AlignOutputs, search: DecodeConfig | None,
                    reverse: Reverse | None) -> dict[str, Any]:
    """What made a run's matrices and links, for its JSON output: the checkpoint, the
    attention read (and its read-out), the level, the link method, the search that made the
    targets (None: they were given) and the reverse model's part."""
    def attn(choice: AttentionChoice, read: Readout) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": choice.kind, "layer": choice.layer, "head": choice.head}
        if choice.view != "chosen":
            out["view"] = choice.view
        return out | ({"readout": read} if choice.kind == "cross" else {})

    rec: dict[str, Any] = {"checkpoint": None if checkpoint is None else str(checkpoint),
                           "attention": attn(attention, readout), "level": outputs.level}
    if outputs.needs_links and attention.kind == "cross":  # self-attention makes no links
        rec["method"] = outputs.method
        if outputs.method == "threshold":
            rec["threshold"] = (DEFAULT_THRESHOLD if outputs.threshold is None
                                else outputs.threshold)
    rec["targets"] = "given" if search is None else {
        "search": search.method, **({"beam_size": search.beam_size, "length_penalty":
                                     search.length_penalty, **({"alpha": search.alpha} if
                                     search.length_penalty == "gnmt" else {})}
                                    if search.method == "beam" else {}),
        "max_len_a": search.max_len_a, "max_len_b": search.max_len_b,
        "min_len": search.min_len}
    if reverse is not None:
        rec["reverse"] = {"checkpoint": None if reverse.checkpoint is None
                          else str(reverse.checkpoint),
                          "attention": attn(reverse.attention, reverse.readout),
                          "symmetrize": reverse.symmetrize}
    return rec


def format_scores(scores: AlignScores) -> str:
    """One line: 'AER 0.0312  precision 0.9700  recall 0.9650  (412 links; gold 410 sure,
    430 possible)'."""
    return (f"AER {scores.aer:.4f}  precision {scores.precision:.4f}  recall {scores.recall:.4f}"
            f"  ({scores.hyp} links; gold {scores.sure} sure, {scores.possible} possible)")
