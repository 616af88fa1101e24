"""Batch translation of a stream of lines: length-sorted token-bounded batches, output in
input order, bounded memory.

Input is read in chunks of `chunk_lines` lines; each chunk is sorted by length, cut into batches
of at most `DecodeConfig.batch_tokens` padded source tokens, decoded, and written back in input
order before the next chunk is read. Memory therefore stays bounded by the chunk, whatever the
input size, and a downstream pipe (`| head`) sees output as soon as the first chunk is done.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

import torch

from mtkit.align import extract_links, format_pharaoh, from_attention
from mtkit.config import DecodeConfig, Recipe
from mtkit.data.batch import collate
from mtkit.data.spm import Tokenizer
from mtkit.decode import Hypothesis, decode_batch
from mtkit.errors import CheckpointError
from mtkit.models.base import Translator

OutputFormat = Literal["text", "jsonl"]
# Maps (source pieces, target pieces, attention (T, S)) to Pharaoh word links "i-j ...".
AlignFn = Callable[[list[str], list[str], torch.Tensor], str]


def pharaoh_aligner(method: str = "argmax-tgt") -> AlignFn:
    """Word alignments from attention: pieces merged into words, EOS dropped (mtkit.align)."""

    def align(src_pieces: list[str], tgt_pieces: list[str], attn: torch.Tensor) -> str:
        matrix = from_attention(attn, src_pieces, tgt_pieces, level="word")
        return format_pharaoh(extract_links(matrix.weights, method))

    return align


@dataclass
class TranslateStats:
    sentences: int = 0
    tokens: int = 0  # target subword tokens produced (best hypothesis, without EOS)
    seconds: float = 0.0
    truncated: int = 0  # input lines cut to the model's maximum length
    empty: int = 0

    def summary(self) -> str:
        s = max(self.seconds, 1e-9)
        return (f"translated {self.sentences} sentences, {self.tokens} tokens in "
                f"{self.seconds:.2f}s: {self.sentences / s:.1f} sentences/s, "
                f"{self.tokens / s:.1f} tokens/s")


@dataclass
class _Item:
    index: int
    line: str
    ids: list[int]
    nbest: list[Hypothesis] = field(default_factory=list)


def _chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line.rstrip("\r\n"))
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _token_batches(items: list[_Item], batch_tokens: int) -> Iterator[list[_Item]]:
    """Longest first (a bad batch size shows at once), each batch's padded size ≤ budget."""
    batch: list[_Item] = []
    for it in sorted(items, key=lambda x: -len(x.ids)):
        width = len(batch[0].ids) + 1 if batch else len(it.ids) + 1
        if batch and width * (len(batch) + 1) > batch_tokens:
            yield batch
            batch = []
        batch.append(it)
    if batch:
        yield batch


class StreamTranslator:
    """Translates lines with one model (or ensemble) and one decoding configuration."""

    def __init__(self, model: Translator, tokenizer: Tokenizer, cfg: DecodeConfig, *,
                 device: torch.device, max_src_len: int, fmt: OutputFormat = "text",
                 align_fn: AlignFn | None = None, chunk_lines: int = 2000) -> None:
        self.model = model.eval()
        self.tok = tokenizer
        self.cfg = cfg
        self.device = device
        self.max_src_len = max_src_len
        self.fmt = fmt
        self.align_fn = align_fn
        self.chunk_lines = chunk_lines
        self.stats = TranslateStats()

    def run(self, lines: Iterable[str], out: IO[str],
            on_batch: Callable[[int], None] | None = None) -> TranslateStats:
        """Translate every line, writing one output record per input line to `out`."""
        start = time.perf_counter()
        for chunk in _chunks(lines, self.chunk_lines):
            encoded = self.tok.encode_src_lines([ln if ln.strip() else "" for ln in chunk])
            items = [self._prepare(i, line, ids)
                     for i, (line, ids) in enumerate(zip(chunk, encoded, strict=True))]
            work = [it for it in items if it.ids]
            for batch in _token_batches(work, self.cfg.batch_tokens):
                self._decode(batch)
                if on_batch is not None:
                    on_batch(len(batch))
            for it in items:
                out.write(self._format(it))
            out.flush()
            self.stats.sentences += len(items)
            self.stats.empty += len(items) - len(work)
        self.stats.seconds = time.perf_counter() - start
        return self.stats

    def _prepare(self, index: int, line: str, ids: list[int]) -> _Item:
        if len(ids) > self.max_src_len:
            ids = ids[: self.max_src_len]
            self.stats.truncated += 1
        return _Item(index, line, ids)

    @torch.inference_mode()
    def _decode(self, batch: list[_Item]) -> None:
        b = collate([it.ids for it in batch], None, [it.index for it in batch])
        b = b.to(self.device, non_blocking=True)
        results = decode_batch(self.model, b, self.cfg, need_attn=self.align_fn is not None)
        for it, nbest in zip(batch, results, strict=True):
            it.nbest = nbest
            self.stats.tokens += len(nbest[0].tokens)

    def _align(self, it: _Item, hyp: Hypothesis) -> str:
        if self.align_fn is None or hyp.attn is None:
            return ""
        return self.align_fn(self.tok.src_pieces(it.ids), self.tok.tgt_pieces(hyp.tokens),
                             hyp.attn)

    def _format(self, it: _Item) -> str:
        hyps = it.nbest
        texts = [self.tok.decode_tgt(h.tokens) for h in hyps]
        if self.fmt == "jsonl":
            rec: dict = {"id": it.index + self.stats.sentences, "source": it.line,
                         "hypothesis": texts[0] if hyps else "",
                         "score": hyps[0].score if hyps else 0.0,
                         "tokens": len(hyps[0].tokens) if hyps else 0}
            if self.cfg.nbest > 1:
                rec["nbest"] = [{"hypothesis": t, "score": h.score, "tokens": len(h.tokens)}
                                for t, h in zip(texts, hyps, strict=True)]
            if self.align_fn is not None:
                rec["alignment"] = self._align(it, hyps[0]) if hyps else ""
            return json.dumps(rec, ensure_ascii=False) + "\n"
        if self.cfg.nbest > 1:  # Moses n-best format: id ||| hypothesis ||| score
            n = it.index + self.stats.sentences
            if not hyps:
                return f"{n} |||  ||| 0.0000\n"
            return "".join(f"{n} ||| {t} ||| {h.score:.4f}\n"
                           for t, h in zip(texts, hyps, strict=True))
        text = texts[0] if hyps else ""
        if self.align_fn is not None:
            return f"{text} ||| {self._align(it, hyps[0]) if hyps else ''}\n"
        return text + "\n"


def load_translator(paths: list[Path], device: torch.device
                    ) -> tuple[Translator, Recipe, Tokenizer]:
    """One model, or an ensemble averaging the probabilities of several checkpoints that share
    one vocabulary. Returns the model in eval mode, the first model's recipe and tokenizer."""
    from mtkit.models.ensemble import Ensemble
    from mtkit.train.checkpoint import load_model

    loaded = [load_model(p, device) for p in paths]
    model, recipe, tok = loaded[0]
    if len(loaded) == 1:
        return model, recipe, tok
    for p, (_, _, other) in zip(paths[1:], loaded[1:], strict=True):
        if not _same_vocab(tok, other):
            raise CheckpointError(f"{p}: its vocabulary differs from {paths[0]}'s; an ensemble "
                                  "needs checkpoints trained on the same sentencepiece model")
    return Ensemble([m for m, _, _ in loaded]).eval(), recipe, tok


def _same_vocab(a: Tokenizer, b: Tokenizer) -> bool:
    if (a.src_vocab_size, a.tgt_vocab_size) != (b.src_vocab_size, b.tgt_vocab_size):
        return False
    return (a.src_pieces(range(a.src_vocab_size)) == b.src_pieces(range(b.src_vocab_size))
            and a.tgt_pieces(range(a.tgt_vocab_size)) == b.tgt_pieces(range(b.tgt_vocab_size)))
