"""Sentence pairs for `mtkit align`: reading them, translating sources that have no target,
a model's teacher-forced attention for them, and labelling it as an `AlignMatrix`.

Shapes: B batch, S source length, T target length (each with EOS), h heads.
"""

from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from mtkit import fileio
from mtkit.align.matrix import AlignMatrix, Level, Words, from_attention, line_words
from mtkit.align.readout import Readout, select_rows
from mtkit.config import DecodeConfig
from mtkit.data.batch import collate
from mtkit.data.batching import token_batches
from mtkit.data.spm import Tokenizer
from mtkit.decode import decode_batch
from mtkit.errors import DataError, OptionError
from mtkit.fileio import InvalidUtf8
from mtkit.models.base import AttentionChoice, AttentionKind, Translator


@dataclass
class Pair:
    """One sentence pair: its 0-based line number and piece ids without BOS/EOS (tgt is the
    given target, or the translation once made); src_text and tgt_text: the lines as read
    (tgt_text None for a translation), which a model with another vocabulary re-encodes."""

    index: int
    src: list[int]
    tgt: list[int] = field(default_factory=list)
    src_text: str = ""
    tgt_text: str | None = None


def read_lines(path: Path, what: str, invalid: list[InvalidUtf8]) -> list[str]:
    """Every line of a text file (plain or .gz; - for standard input, either) under mtkit's
    text policy (`mtkit.fileio`), without line ends; appends to `invalid` when invalid UTF-8
    was replaced."""
    if str(path) == "-":
        report = InvalidUtf8("<stdin>")
        lines = [line.rstrip("\r") for line in fileio.decode_lines(fileio.stdin_binary(), report)]
        if report.found:
            invalid.append(report)
        return lines
    if problem := fileio.missing_input(path, what):
        raise DataError(problem)
    report = InvalidUtf8(str(path))
    try:
        lines = [line.rstrip("\r") for line in fileio.read_lines(path, report)]
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"{path}: cannot read the {what} file ({e})") from None
    if report.found:
        invalid.append(report)
    return lines


def check_inputs(src: Path, tgt: Path | None, gold: Path | None) -> None:
    """Fail early (before a model is loaded) when an input file is missing; - (standard
    input) may stand for the source or the target, not both, nor for the gold links."""
    if str(src) == str(tgt) == "-":
        raise OptionError.about(None, "{0} - and {1} -: standard input can be one of them; give "
                                "the other a file", others=("src", "tgt"))
    if gold is not None and str(gold) == "-":
        raise OptionError.about("gold", "give the gold links as a file", value="-")
    for option, path, what in (("src", src, "source"), ("tgt", tgt, "target"),
                               ("gold", gold, "gold alignment")):
        if path is not None and str(path) != "-" and (
                problem := fileio.missing_input(path, what)):
            raise OptionError.about(option, problem.removeprefix(f"{path}: "), value=path)


def check_lengths(model: Translator, pairs: list[Pair], src: Path, tgt: Path | None, *,
                  max_len: int | None = None) -> None:
    """Refuse, naming its line, a sentence longer than the model accepts (its source with EOS,
    its target with BOS: `Translator.max_source_len`, `max_target_len`): it failed mid-run
    with neither file nor line named; and one of more than `max_len` tokens (the recipe's
    data.max_len, which `translate` cuts lines to), since attention's memory is quadratic in
    the length."""
    for p in pairs:
        for option, path, ids, limit in (("src", src, p.src, model.max_source_len),
                                         ("tgt", tgt, p.tgt, model.max_target_len)):
            if limit is not None and path is not None and len(ids) + 1 > limit:
                raise OptionError.about(option, value=f"{path}:{p.index + 1}", why=(
                    f"{len(ids)} tokens, more than the model's {limit} positions allow (with "
                    f"EOS or BOS; {model.source_len_key})"))
    for p in pairs:
        for option, path, ids in (("src", src, p.src), ("tgt", tgt, p.tgt)):
            if max_len is not None and path is not None and len(ids) > max_len:
                raise OptionError.about(option, value=f"{path}:{p.index + 1}", why=(
                    f"{len(ids)} tokens, more than the model's data.max_len ({max_len}); "
                    "align lines of at most that length (split the line)"))


def read_pairs(tok: Tokenizer, src: Path, tgt: Path | None,
               invalid: list[InvalidUtf8]) -> list[Pair]:
    """Sentence pairs from a source file and an optional target file of as many lines."""
    src_lines = read_lines(src, "source", invalid)
    src_ids = tok.encode_src_lines(src_lines)
    if tgt is None:
        return [Pair(i, ids, src_text=line)
                for i, (ids, line) in enumerate(zip(src_ids, src_lines, strict=True))]
    tgt_lines = read_lines(tgt, "target", invalid)
    if len(tgt_lines) != len(src_lines):
        raise DataError(f"{tgt}: {len(tgt_lines)} lines, but the source {src} has "
                        f"{len(src_lines)}; -t needs one target line per source line")
    tgt_ids = tok.encode_tgt_lines(tgt_lines)
    return [Pair(i, s, t, s_line, t_line) for i, (s, t, s_line, t_line) in enumerate(
        zip(src_ids, tgt_ids, src_lines, tgt_lines, strict=True))]


@torch.inference_mode()
def translate_pairs(model: Translator, pairs: list[Pair], cfg: DecodeConfig, *,
                    device: torch.device) -> None:
    """Set each pair's target to the best hypothesis of cfg's search over its source; an
    empty source gets an empty target, as `mtkit translate` gives it an empty line (a search
    from the source's EOS alone produced a sentence out of nothing)."""
    todo = [p for p in pairs if p.src]
    for idx in token_batches([len(p.src) + 1 for p in todo], cfg.batch_tokens):
        batch = collate([todo[i].src for i in idx], None, [todo[i].index for i in idx]
                        ).to(device)
        for i, nbest in zip(idx, decode_batch(model, batch, cfg), strict=True):
            todo[i].tgt = list(nbest[0].tokens)


@torch.inference_mode()
def pair_attention(model: Translator, pairs: list[Pair], choice: AttentionChoice, *,
                   device: torch.device, batch_tokens: int) -> list[np.ndarray]:
    """Each pair's teacher-forced attention sliced to its real tokens, in `pairs` order:
    cross (n_tgt + 1, n_src + 1), one row per decoder input (BOS and every target token: the
    rows both read-outs choose from, see `mtkit.align.readout`) and the source EOS; encoder
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


PairWords = tuple[Words | None, Words | None]  # (source, target) of one pair


def pair_words(tok: Tokenizer, pairs: list[Pair]) -> list[PairWords]:
    """Each pair's whitespace words and which of them each piece belongs to (`line_words`);
    a translation's words (None) are those its pieces decode to."""
    return [(line_words(tok.encode_src, p.src_text, p.src),
             None if p.tgt_text is None else line_words(tok.encode_tgt, p.tgt_text, p.tgt))
            for p in pairs]


def label(tok: Tokenizer, pair: Pair, weights: np.ndarray, kind: AttentionKind,
          level: Level, readout: Readout = "current",
          words: PairWords = (None, None)) -> AlignMatrix:
    """Tokens on both axes, EOS dropped (rows renormalised), pieces merged at word level
    into `words` (`pair_words`; a side without them: the words its pieces decode to).
    Cross: target rows (those of `readout`), source columns; encoder/decoder: that sentence
    on both axes (the read-out applies to the cross-attention only)."""
    src, tgt = tok.src_pieces(pair.src), tok.tgt_pieces(pair.tgt)
    rows, cols = {"cross": (tgt, src), "encoder": (src, src), "decoder": (tgt, tgt)}[kind]
    src_w, tgt_w = words
    row_w, col_w = {"cross": (tgt_w, src_w), "encoder": (src_w, src_w),
                    "decoder": (tgt_w, tgt_w)}[kind]
    if kind == "cross":
        weights = select_rows(weights, len(pair.tgt), readout)
    else:
        assert readout == "current", "a read-out chooses cross-attention rows"
    matrix = from_attention(weights, cols, rows, level=level, src_words=col_w, tgt_words=row_w)
    if kind != "cross":  # self-attention: rows are queries, columns keys
        matrix = dataclasses.replace(matrix, axes=("key", "query"))
    return matrix
