"""`mtkit align`: a model's attention for sentence pairs, as terminal tables, heatmaps, Pharaoh
word alignments, JSON, and scores against gold alignments.

The pipeline: read source lines (and target lines with -t) -> sentencepiece ids -> without
targets, translate with the given search and take the best hypothesis -> the teacher-forced
attention of the chosen kind, layer and head (`Translator.attention_maps`), in length-sorted
batches of bounded size -> each pair's matrix sliced to its real lengths -> an
`mtkit.align.AlignMatrix` (EOS dropped, pieces merged into words at word level) -> outputs.

Translations are aligned by forcing the hypothesis through the model again rather than by
reading `Hypothesis.attn`: in eval mode both give the same weights for the model's own layer
(the search tests check that forced attention equals the search's), and only the forced pass
can show any layer, head or self-attention.

Shapes: B batch, S source length, T target length (each with EOS), h heads.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np
import torch
from rich.console import Console

from mtkit import fileio
from mtkit.align import (
    DEFAULT_METHOD,
    AlignMatrix,
    AlignScores,
    Gold,
    Level,
    Link,
    check_gold_bounds,
    extract_links,
    format_pharaoh,
    from_attention,
    matrix_record,
    read_gold,
    score_corpus,
    score_links,
    write_json,
)
from mtkit.align.viz import FORMATS, print_matrix, write_heatmap
from mtkit.config import DecodeConfig, Recipe
from mtkit.data.batch import collate
from mtkit.data.spm import Tokenizer
from mtkit.decode import decode_batch
from mtkit.errors import ConfigError, DataError
from mtkit.fileio import InvalidUtf8, atomic_write
from mtkit.models.base import AttentionChoice, AttentionKind, Translator
from mtkit.translate import token_batches

# Lines read, translated and aligned at a time: bounds memory on big inputs.
CHUNK_PAIRS = 1000


def choose_attention(model: Translator, recipe: Recipe, kind: str, layer: int | None,
                     head: int | str | None) -> AttentionChoice:
    """`model.choose_attention`, except that a Transformer trained with guided alignment reads
    by default the attention its training supervised (model.transformer.align_layer and
    align_head) rather than the top layer's head mean."""
    guided, tf = recipe.train.guided_alignment.enabled, recipe.model.transformer
    if kind == "cross" and guided and recipe.model.arch == "transformer":
        layer = tf.align_layer if layer is None else layer
        head = ("mean" if tf.align_head is None else tf.align_head) if head is None else head
    return model.choose_attention(kind, layer, head)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- pairs and batches


@dataclass
class Pair:
    """One sentence pair: its 0-based line number and piece ids without BOS/EOS (tgt is the
    given target, or the translation once made)."""

    index: int
    src: list[int]
    tgt: list[int] = field(default_factory=list)


def read_lines(path: Path, what: str, invalid: list[InvalidUtf8]) -> list[str]:
    """Every line of a text file (plain or .gz) under mtkit's text policy (`mtkit.fileio`),
    without line ends; appends to `invalid` when invalid UTF-8 was replaced."""
    if not Path(path).is_file():
        raise DataError(f"{path}: {what} file not found")
    report = InvalidUtf8(str(path))
    try:
        lines = [line.rstrip("\r") for line in fileio.read_lines(path, report)]
    except (OSError, EOFError) as e:
        raise DataError(f"{path}: cannot read the {what} file ({e})") from None
    if report.lines:
        invalid.append(report)
    return lines


def check_inputs(src: Path, tgt: Path | None, gold: Path | None) -> None:
    """Fail early (before a model is loaded) when an input file is missing."""
    for path, what in ((src, "source"), (tgt, "target"), (gold, "gold alignment")):
        if path is not None and not Path(path).is_file():
            raise DataError(f"{path}: {what} file not found")


def read_pairs(tok: Tokenizer, src: Path, tgt: Path | None,
               invalid: list[InvalidUtf8]) -> list[Pair]:
    """Sentence pairs from a source file and an optional target file of as many lines."""
    src_lines = read_lines(src, "source", invalid)
    src_ids = tok.encode_src_lines(src_lines)
    if tgt is None:
        return [Pair(i, ids) for i, ids in enumerate(src_ids)]
    tgt_lines = read_lines(tgt, "target", invalid)
    if len(tgt_lines) != len(src_lines):
        raise DataError(f"{tgt}: {len(tgt_lines)} lines, but the source {src} has "
                        f"{len(src_lines)}; -t needs one target line per source line")
    tgt_ids = tok.encode_tgt_lines(tgt_lines)
    return [Pair(i, s, t) for i, (s, t) in enumerate(zip(src_ids, tgt_ids, strict=True))]


@torch.inference_mode()
def translate_pairs(model: Translator, pairs: list[Pair], cfg: DecodeConfig, *,
                    device: torch.device) -> None:
    """Set each pair's target to the best hypothesis of cfg's search over its source."""
    for idx in token_batches([len(p.src) + 1 for p in pairs], cfg.batch_tokens):
        batch = collate([pairs[i].src for i in idx], None, idx).to(device)
        for i, nbest in zip(idx, decode_batch(model, batch, cfg), strict=True):
            pairs[i].tgt = list(nbest[0].tokens)


@torch.inference_mode()
def pair_attention(model: Translator, pairs: list[Pair], choice: AttentionChoice, *,
                   device: torch.device, batch_tokens: int) -> list[np.ndarray]:
    """Each pair's teacher-forced attention sliced to its real tokens, in `pairs` order:
    cross (n_tgt + 1, n_src + 1) with the EOS step and the source EOS; encoder
    (n_src + 1, n_src + 1) with the source EOS; decoder (n_tgt, n_tgt) without the BOS
    position (queries and keys are the target tokens fed to the decoder)."""
    out: list[np.ndarray] = [np.zeros((0, 0))] * len(pairs)
    sizes = [len(p.src) + len(p.tgt) + 2 for p in pairs]
    for idx in token_batches(sizes, batch_tokens):
        batch = collate([pairs[i].src for i in idx], [pairs[i].tgt for i in idx],
                        idx).to(device)
        assert batch.tgt_in is not None
        maps = model.attention_maps(batch.src, batch.src_lens, batch.tgt_in, choice)
        maps = maps.float().cpu().numpy()
        for row, i in enumerate(idx):
            s, t = len(pairs[i].src) + 1, len(pairs[i].tgt) + 1
            if choice.kind == "cross":
                out[i] = maps[row, :t, :s]
            elif choice.kind == "encoder":
                out[i] = maps[row, :s, :s]
            else:
                out[i] = maps[row, 1:t, 1:t]
    return out


def label(tok: Tokenizer, pair: Pair, weights: np.ndarray, kind: AttentionKind,
          level: Level) -> AlignMatrix:
    """Tokens on both axes, EOS dropped (rows renormalised), pieces merged at word level.
    Cross: target rows, source columns; encoder/decoder: that sentence on both axes."""
    src, tgt = tok.src_pieces(pair.src), tok.tgt_pieces(pair.tgt)
    rows, cols = {"cross": (tgt, src), "encoder": (src, src), "decoder": (tgt, tgt)}[kind]
    matrix = from_attention(weights, cols, rows, level=level)
    if kind != "cross":  # self-attention: rows are queries, columns keys
        matrix = dataclasses.replace(matrix, axes=("key", "query"))
    return matrix


# --------------------------------------------------------------------------- outputs


@dataclass(frozen=True)
class AlignOutputs:
    """What to make of the matrices (any combination). show: print each matrix to the console;
    heatmap_dir/heatmap_format: one image per pair; pharaoh: a file of word links, one line
    per pair ('-': standard output); json: matrices, tokens, links (and gold scores) of every
    pair; gold/one_based: gold links to score against; level: matrices over words (pieces
    merged) or pieces; method and threshold: link extraction (mtkit.align.extract_links)."""

    show: bool = False
    heatmap_dir: Path | None = None
    heatmap_format: str = "png"
    pharaoh: Path | None = None
    json: Path | None = None
    gold: Path | None = None
    one_based: bool = False
    level: Level = "word"
    method: str = DEFAULT_METHOD
    threshold: float | None = None

    @property
    def needs_links(self) -> bool:
        return self.pharaoh is not None or self.json is not None or self.gold is not None

    def check(self) -> None:
        """Raise ConfigError when nothing is asked for or a value is not one of the choices."""
        if not (self.show or self.heatmap_dir or self.needs_links):
            raise ConfigError("nothing to do: give at least one of --print, --heatmap DIR, "
                              "--pharaoh FILE, --json FILE, --gold FILE")
        if self.level not in ("word", "subword"):
            raise ConfigError(f"--level: invalid choice {self.level!r}; expected word or subword")
        if self.heatmap_format not in FORMATS:
            raise ConfigError(f"--format: invalid choice {self.heatmap_format!r}; expected one "
                              f"of {', '.join(FORMATS)}")
        extract_links(np.ones((1, 1)), self.method, threshold=self.threshold)  # validates


@dataclass
class AlignReport:
    """What a run did: pairs aligned, seconds, and with gold the corpus scores."""

    pairs: int = 0
    seconds: float = 0.0
    scores: AlignScores | None = None
    invalid_utf8: list[InvalidUtf8] = field(default_factory=list)

    def summary(self) -> str:
        s = max(self.seconds, 1e-9)
        return (f"aligned {self.pairs} sentence pairs in {self.seconds:.2f}s "
                f"({self.pairs / s:.1f}/s)")


class _Sinks:
    """The outputs of one run, fed one matrix at a time in input order."""

    def __init__(self, outputs: AlignOutputs, golds: list[Gold] | None, console: Console | None,
                 pharaoh: IO[str] | None, what: str) -> None:
        self.o = outputs
        self.golds = golds
        self.console = console
        self.pharaoh = pharaoh
        self.what = what
        self.records: list[dict] = []
        self.links: list[set[Link]] = []

    def add(self, index: int, matrix: AlignMatrix) -> None:
        o = self.o
        if o.show and self.console is not None:
            print_matrix(matrix, self.console, title=f"sentence {index} ({self.what}, "
                         f"{matrix.level} level)")
        if o.heatmap_dir is not None:
            with warnings.catch_warnings():  # an empty sentence draws an empty frame
                warnings.simplefilter("ignore", UserWarning)
                write_heatmap(matrix, o.heatmap_dir, index, fmt=o.heatmap_format)
        if not o.needs_links:
            return
        links = extract_links(matrix.weights, o.method, threshold=o.threshold)
        self.links.append(links)
        scores = None
        if self.golds is not None:
            gold = self.golds[index]
            check_gold_bounds(gold, len(matrix.src_tokens), len(matrix.tgt_tokens))
            scores = score_links(links, gold)
        if self.pharaoh is not None:
            self.pharaoh.write(format_pharaoh(links) + "\n")
        if o.json is not None:
            self.records.append(matrix_record(matrix, index=index, links=links, scores=scores))


def _read_golds(outputs: AlignOutputs, pairs: int) -> list[Gold] | None:
    if outputs.gold is None:
        return None
    golds = read_gold(outputs.gold, one_based=outputs.one_based)
    if len(golds) != pairs:
        raise DataError(f"{outputs.gold}: {len(golds)} lines of gold links for {pairs} sentence "
                        "pairs; expected one line per pair")
    return golds


def align_files(model: Translator, tok: Tokenizer, src: Path, tgt: Path | None, *,
                attention: AttentionChoice, outputs: AlignOutputs, decode: DecodeConfig,
                device: torch.device, console: Console | None = None,
                stdout: IO[str] | None = None) -> AlignReport:
    """Align every line of `src` with the same line of `tgt` (forced decoding) or, without
    `tgt`, with its translation by `decode`'s search; write the requested outputs.

    The model must be in eval mode on `device`; `console` receives --print tables; `stdout`
    receives the Pharaoh lines when outputs.pharaoh is '-'. Inputs and gold links are checked
    before any model work; output files are written atomically (none on an error)."""
    outputs.check()
    check_inputs(src, tgt, outputs.gold)
    start = time.perf_counter()
    report = AlignReport()
    pairs = read_pairs(tok, src, tgt, report.invalid_utf8)
    report.pairs = len(pairs)
    golds = _read_golds(outputs, len(pairs))
    with ExitStack() as stack:
        pharaoh = None
        if outputs.pharaoh is not None and str(outputs.pharaoh) == "-":
            assert stdout is not None, "Pharaoh output to '-' needs a stdout stream"
            pharaoh = stdout
        elif outputs.pharaoh is not None:
            pharaoh = stack.enter_context(atomic_write(outputs.pharaoh))
        sinks = _Sinks(outputs, golds, console, pharaoh, attention.describe())
        for a in range(0, len(pairs), CHUNK_PAIRS):
            chunk = pairs[a: a + CHUNK_PAIRS]
            if tgt is None:
                translate_pairs(model, chunk, decode, device=device)
            maps = pair_attention(model, chunk, attention, device=device,
                                  batch_tokens=decode.batch_tokens)
            for pair, weights in zip(chunk, maps, strict=True):
                sinks.add(pair.index, label(tok, pair, weights, attention.kind, outputs.level))
    if golds is not None:
        report.scores, _ = score_corpus(sinks.links, golds)
    if outputs.json is not None:
        write_json(outputs.json, sinks.records, scores=report.scores)
    report.seconds = time.perf_counter() - start
    return report


def format_scores(scores: AlignScores) -> str:
    """One line: 'AER 0.0312  precision 0.9700  recall 0.9650  (412 links; gold 410 sure,
    430 possible)'."""
    return (f"AER {scores.aer:.4f}  precision {scores.precision:.4f}  recall {scores.recall:.4f}"
            f"  ({scores.hyp} links; gold {scores.sure} sure, {scores.possible} possible)")
