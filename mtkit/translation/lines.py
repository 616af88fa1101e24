"""Batch translation of a stream of lines: length-sorted token-bounded batches, output in
input order, bounded memory (a run's own evaluation splits: `mtkit.score.split_translation`).

Input is read in chunks of `chunk_lines` lines; each chunk is sorted by length, cut into batches
of at most `DecodeConfig.batch_tokens` padded source tokens, decoded, and written back in input
order (then flushed) before the next chunk is read. Memory therefore stays bounded by the chunk,
whatever the input size, and a downstream pipe (`| head`) sees output as soon as the first
chunk is done.

With `workers` > 1 the batches of a chunk are decoded that many at a time, each by its own
thread (torch and CTranslate2 decode without Python's lock); the chunk is then cut into a
multiple of `workers` batches of about equal real tokens, so that the workers finish together.
"""

from __future__ import annotations

import copy
import errno
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from mtkit.config import DecodeConfig, Recipe
from mtkit.config.guided import Readout
from mtkit.data.batching import parallel_batches
from mtkit.data.hypothesis import Hypothesis
from mtkit.data.spm import Tokenizer
from mtkit.errors import CheckpointError, DataError, Problem
from mtkit.process.pipes import watching_reader
from mtkit.translation.formats import FORMATS, OutputFormat, record

# torch (and with it the search, the models, the aligner) is imported where mtkit's own
# decoder runs, not here, nor numpy: an exported model translates through `LineTranslator`
# without them (torch takes 2.5-3.5 s to import on 2 cores, numpy 0.2 s).
if TYPE_CHECKING:
    import torch

    from mtkit.align import Words
    from mtkit.decode.shortlist import OutputShortlist
    from mtkit.models.base import Translator
    from mtkit.translation.terms import Glossary, Match

# Maps (source pieces, target pieces, attention (T, S), the source line's words or None) to
# Pharaoh word links "i-j ...".
AlignFn = Callable[[list[str], list[str], "torch.Tensor", "Words | None"], str]
# Lines per chunk: large enough for well-filled length-sorted batches, small enough that
# memory stays flat and a pipe sees output early.
CHUNK_LINES = 2000


def aligner_problems(method: str | None, readout: str | None) -> list[Problem]:
    """What is wrong with a choice of `pharaoh_aligner`'s method and read-out (None: its
    default), named as the Python API's fields (align_method, readout)."""
    from mtkit.config.guided import READOUTS

    problems = []
    if method is not None:  # mtkit.align imports numpy: only when named
        from mtkit.align.links import link_problems

        problems += link_problems(method, None, option="align_method", thresholds=False)
    if readout is not None and readout not in READOUTS:
        problems.append(Problem("readout", f"invalid choice {readout!r}; expected one of "
                                f"{', '.join(READOUTS)}"))
    return problems


def pharaoh_aligner(method: str = "argmax-tgt", readout: Readout = "current") -> AlignFn:
    """Word alignments from a hypothesis's attention: the rows of `readout`, pieces merged
    into words, EOS dropped (mtkit.align). No second pass is needed for the shift read-out:
    a search's attention (`Hypothesis.attn`, mtkit's or CTranslate2's) ends with the step that
    produced EOS, which is the step whose input is the last token."""
    from mtkit.align import extract_links, format_pharaoh, from_attention, select_rows

    def align(src_pieces: list[str], tgt_pieces: list[str], attn: torch.Tensor,
              src_words: Words | None) -> str:
        rows = select_rows(attn, len(tgt_pieces), readout)
        matrix = from_attention(rows, src_pieces, tgt_pieces, level="word", src_words=src_words)
        return format_pharaoh(extract_links(matrix.weights, method))

    return align


@dataclass
class TranslateStats:
    sentences: int = 0  # input lines, empty ones included
    tokens: int = 0  # target subword tokens produced (best hypothesis, without EOS)
    seconds: float = 0.0
    truncated: int = 0  # input lines cut to the model's maximum length...
    max_src_len: int = 0  # ... this many source tokens
    empty: int = 0
    capped: int = 0  # output limits lowered to the model's longest output...
    max_out_len: int | None = None  # ... this many tokens before EOS (None: no such limit)

    def truncation(self) -> str:
        return (f"{self.truncated} input line(s) longer than {self.max_src_len} source tokens "
                "(the model's data.max_len) were truncated")

    def capping(self, name: Callable[[str], str] = str) -> str:
        """The note on capped output limits, the options named by `name` (of their fields)."""
        return (f"{self.capped} output limit(s) ({name('max_len_a')}/{name('max_len_b')}) "
                f"lowered to {self.max_out_len} tokens, the most the model's positions allow")

    def summary(self) -> str:
        s = max(self.seconds, 1e-9)
        sentences = "sentence" if self.sentences == 1 else "sentences"
        return (f"translated {self.sentences} {sentences}, {self.tokens} tokens in "
                f"{self.seconds:.2f}s: {self.sentences / s:.1f} sentences/s, "
                f"{self.tokens / s:.1f} tokens/s")


@dataclass
class Item:
    """One input line as decoded: its hypotheses best first (none for an empty line)."""

    index: int  # line number in the whole input, from 0
    line: str
    ids: list[int]
    nbest: list[Hypothesis] = field(default_factory=list)
    source: tuple[list[str], Words | None] | None = None  # pieces and words, made for --align
    truncated: bool = False  # cut to the model's longest source
    prefix: list[int] = field(default_factory=list)  # target ids every output starts with
    terms: list[Match] = field(default_factory=list)  # glossary terms found in the line
    # the prefix ends with a term: the output's next token must begin a new word
    new_word: bool = False
    tagged: int = 0  # source pieces of the language tag put before the line's own


def _chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line.rstrip("\r\n"))
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class PrefixError(DataError):
    """The prefixes do not fit the input or the model; `reason` says how, for a caller to
    name where the prefixes came from (`prefix: ...` by default)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"prefix: {reason}")
        self.reason = reason


def _paired(lines: Iterable[str], prefixes: Iterable[str] | None, size: int
            ) -> Iterator[tuple[list[str], list[str] | None]]:
    """`_chunks` of the lines, each with the prefixes of its lines (one per line, in order;
    None: no prefixes), read as far as the lines are."""
    if prefixes is None:
        for chunk in _chunks(lines, size):
            yield chunk, None
        return
    more = iter(prefixes)
    seen = 0
    for chunk in _chunks(lines, size):
        given = [p.rstrip("\r\n") for _, p in zip(range(len(chunk)), more, strict=False)]
        seen += len(given)
        if len(given) < len(chunk):
            raise PrefixError(f"{seen} prefixes for more input lines; expected one per line "
                              "(an empty one for none)")
        yield chunk, given
    if next(more, None) is not None:
        raise PrefixError(f"more prefixes than the {seen} input lines; expected one per line")


class LineTranslator:
    """Translates lines with one decoding configuration; subclasses bring the search
    (`_search`): mtkit's own (`StreamTranslator`) or an exported model's engine.

    Every input line gives one record: a text line (with ``--nbest`` one Moses n-best line per
    hypothesis) or one JSON object. An empty (or blank) line gives an empty translation; a
    line of more than `max_src_len` source tokens is cut to that length and counted in
    `TranslateStats.truncated`.
    """

    def __init__(self, tokenizer: Tokenizer, cfg: DecodeConfig, *, max_src_len: int,
                 max_out_len: int | None = None, fmt: OutputFormat = "text",
                 align_fn: AlignFn | None = None, chunk_lines: int = CHUNK_LINES,
                 workers: int = 1, tags: Sequence[str] = ()) -> None:
        """max_out_len: the most tokens before EOS the model's positions allow (None: no
        limit); a sentence's decode.max_len_a/b limit above it is lowered and counted; tags:
        the model's language tags (data.*.tag), one of which `configured` may choose."""
        assert fmt in FORMATS and chunk_lines >= 1 and workers >= 1, (fmt, chunk_lines, workers)
        self.tok = tokenizer
        self.cfg = cfg
        self.max_src_len = max_src_len
        self.max_out_len = max_out_len
        self.fmt = fmt
        self.align_fn = align_fn
        # whether searches return each hypothesis's attention (`Hypothesis.attn`)
        self.need_attn = align_fn is not None
        self._pools: dict[int, ThreadPoolExecutor] = {}  # by worker count: see `_pool`
        self._pools_lock = threading.Lock()
        self.chunk_lines = chunk_lines
        self.workers = workers
        self.terms: Glossary | None = None  # terms every output must hold (mtkit.translation.terms)
        self.tags: tuple[str, ...] = tuple(tags)  # the model's language tags...
        self.tag: str | None = None  # ... and the one put before every source line

    def configured(self, cfg: DecodeConfig, *, align_fn: AlignFn | None = None,
                   attention: bool = False, chunk_lines: int | None = None,
                   terms: Glossary | None = None, tag: str | None = None,
                   fmt: OutputFormat | None = None,
                   max_out_len: int | None = None) -> LineTranslator:
        """This translator with another decoding configuration, aligner (none by default),
        chunk size, glossary (none by default), language tag (one of `tags`; none by
        default) and output format (`run`'s; this one's by default), sharing its model or
        engine: how a caller with per-request options (`mtkit.api`) decodes. attention:
        searches return each hypothesis's attention even without an aligner. max_out_len: a
        lower cap on outputs than the model's (a server's operator's). `cfg` must have passed
        `decode_problems`. Sampling decodes one batch at a time, since its draws depend on how
        a chunk is split."""
        assert fmt is None or fmt in FORMATS, fmt
        other = copy.copy(self)
        other.fmt = self.fmt if fmt is None else fmt
        if max_out_len is not None:
            other.max_out_len = min(max_out_len, self.max_out_len or max_out_len)
        other.cfg = cfg
        other.align_fn = align_fn
        other.need_attn = attention or align_fn is not None
        other.chunk_lines = self.chunk_lines if chunk_lines is None else chunk_lines
        other.workers = 1 if cfg.method == "sample" else self.workers
        other.terms = terms
        other.tag = tag
        return other

    @property
    def notes(self) -> list[str]:
        """What the user should know of this engine and decoding configuration, a line each
        (mtkit's own decoder: nothing)."""
        return []

    def decode_problems(self, cfg: DecodeConfig) -> list[Problem]:
        """Decoding choices this translator cannot honour, each about its DecodeConfig field."""
        if self.max_out_len is not None and cfg.min_len > self.max_out_len:
            return [Problem("min_len", f"{cfg.min_len} tokens before EOS, but the model's "
                            f"outputs end by {self.max_out_len} tokens (its positions)")]
        return []

    def run(self, lines: Iterable[str], out: IO[str],
            on_batch: Callable[[int], None] | None = None,
            prefixes: Iterable[str] | None = None) -> TranslateStats:
        """Translate every line, writing one output record per input line to `out`, flushed
        after each chunk; `on_batch(n)` is called after each decoded batch of n sentences;
        `prefixes`: as for `decoded`."""
        stats = TranslateStats(max_src_len=self.max_src_len, max_out_len=self.max_out_len)
        start = time.perf_counter()
        stop, gone = threading.Event(), threading.Event()

        def reader_gone() -> None:  # `| head`: what is still to decode is not wanted
            gone.set()
            stop.set()

        try:
            with watching_reader(out, reader_gone):
                for items in self.decoded(lines, stats, stop=stop, on_batch=on_batch,
                                          prefixes=prefixes):
                    out.write("".join(self._format(it) for it in items))
                    out.flush()
        except Stopped:
            if not gone.is_set():
                raise
            raise BrokenPipeError(errno.EPIPE, "the output's reader has gone") from None
        stats.seconds = time.perf_counter() - start
        return stats

    def decoded(self, lines: Iterable[str], stats: TranslateStats, *,
                stop: threading.Event | None = None,
                on_batch: Callable[[int], None] | None = None,
                prefixes: Iterable[str] | None = None) -> Iterator[list[Item]]:
        """Every line decoded, a chunk of `Item`s at a time in input order, counted in
        `stats`; `prefixes`: one target text per line that its outputs start with (empty:
        none). Once `stop` is set, the search ends at its next step by raising `Stopped`
        (an engine's search runs to the end of its call)."""
        stop = threading.Event() if stop is None else stop

        def search(batch: list[Item]) -> list[list[Hypothesis]]:
            ids, where = [it.ids for it in batch], [it.index for it in batch]
            if not any(it.prefix for it in batch):
                return self._search(ids, stop, where)
            return self._search(ids, stop, where, [it.prefix for it in batch])

        pool = self._pool()
        started: list[Future[list[list[Hypothesis]]]] = []
        try:
            for chunk, chunk_prefixes in _paired(lines, prefixes, self.chunk_lines):
                items = self._prepare(chunk, stats.sentences, stats, chunk_prefixes)
                # Lines with terms are searched apart, with attention to place them: the
                # others decode as they would without a glossary.
                termed = self._find_terms(items)
                plain = [it for it in items if not it.terms] if termed else items
                self._decode_chunk(plain, stats, search=search, stop=stop, on_batch=on_batch,
                                   pool=pool, started=started)
                if termed:
                    self._place_terms(termed, stats, stop, on_batch)
                stats.sentences += len(items)
                stats.empty += sum(1 for it in items if not it.ids)
                yield items
        finally:
            # On an interrupt (or a worker's error) batches not yet started are dropped, and
            # running ones end at their next step rather than run to their end.
            stop.set()
            for future in started:
                future.cancel()
            wait(started)

    def _find_terms(self, items: list[Item]) -> list[Item]:
        """The items whose lines hold glossary terms (each item's `terms` set)."""
        if self.terms is None:
            return []
        for it in items:
            if it.ids:
                it.terms = self.terms.matches(it.line)
        return [it for it in items if it.terms]

    def _place_terms(self, items: list[Item], stats: TranslateStats, stop: threading.Event,
                     on_batch: Callable[[int], None] | None) -> None:
        from mtkit.translation.terms import place_terms

        assert self.terms is not None
        with_attn = self.configured(self.cfg, align_fn=self.align_fn, attention=True,
                                    chunk_lines=self.chunk_lines, tag=self.tag)
        place_terms(with_attn, items, self.terms, stop)
        stats.tokens += sum(len(it.nbest[0].tokens) for it in items)
        if on_batch is not None:
            on_batch(len(items))

    def search_items(self, items: list[Item], stop: threading.Event) -> None:
        """Search `items` (with their prefixes) again, in length-sorted batches, one at a
        time; their `nbest` is replaced."""
        for idx in parallel_batches([len(it.ids) + 1 for it in items], self.cfg.batch_tokens,
                                    1):
            batch = [items[i] for i in idx]
            ids, where = [it.ids for it in batch], [it.index for it in batch]
            found = self._search(ids, stop, where, [it.prefix for it in batch],
                                 [it.new_word for it in batch])
            for it, nbest in zip(batch, found, strict=True):
                it.nbest = nbest

    def forced_items(self, items: list[Item], targets: list[list[int]],
                     stop: threading.Event) -> list[Hypothesis]:
        """Each item's source with its target (ids without EOS) scored by the model, as a
        Hypothesis with the length penalty of `cfg` and attention when `need_attn`."""
        out: list[Hypothesis | None] = [None] * len(items)
        for idx in parallel_batches([len(it.ids) + 1 for it in items], self.cfg.batch_tokens,
                                    1):
            if stop.is_set():
                raise Stopped
            found = self._forced([items[i].ids for i in idx], [targets[i] for i in idx])
            for i, hyp in zip(idx, found, strict=True):
                out[i] = hyp
        return [h for h in out if h is not None]

    def _forced(self, ids: list[list[int]], targets: list[list[int]]) -> list[Hypothesis]:
        """Source ids (without EOS) and target ids (without EOS) of one batch -> each pair's
        Hypothesis as `forced_items` says."""
        raise NotImplementedError

    def close(self) -> None:
        """End the workers' threads (after the batches they hold), for this translator and
        its `configured` copies; a later run starts new ones."""
        with self._pools_lock:
            pools = list(self._pools.values())
            self._pools.clear()
        for pool in pools:
            pool.shutdown(wait=True)

    def _pool(self) -> ThreadPoolExecutor | None:
        """The workers' threads, made once and shared by the translator's `configured`
        copies (a server's requests do not start threads of their own)."""
        if self.workers == 1:
            return None
        with self._pools_lock:
            if self.workers not in self._pools:
                self._pools[self.workers] = ThreadPoolExecutor(
                    self.workers, thread_name_prefix="mtkit-decode")
            return self._pools[self.workers]

    def _decode_chunk(self, items: list[Item], stats: TranslateStats, *,
                      search: Callable[[list[Item]], list[list[Hypothesis]]],
                      stop: threading.Event, on_batch: Callable[[int], None] | None,
                      pool: ThreadPoolExecutor | None,
                      started: list[Future[list[list[Hypothesis]]]]) -> None:
        """Each item's hypotheses, decoded in length-sorted batches (by the pool's workers,
        whose futures are added to `started`)."""
        work = [it for it in items if it.ids]
        # Longest first: a batch size too big for the device shows at once.
        batches = [[work[i] for i in idx] for idx in parallel_batches(
            [len(it.ids) + 1 for it in work], self.cfg.batch_tokens, self.workers)]
        if pool is None:
            found: Iterable[list[list[Hypothesis]]] = map(search, batches)
        else:
            futures = [pool.submit(search, batch) for batch in batches]
            started.extend(futures)
            found = (f.result() for f in futures)  # in batch order; a worker's error here
        for batch, results in zip(batches, found, strict=True):
            if stop.is_set():
                raise Stopped
            for it, nbest in zip(batch, results, strict=True):
                it.nbest = nbest
                stats.tokens += len(nbest[0].tokens)
            if on_batch is not None:
                on_batch(len(batch))
        started.clear()  # all consumed: their results are the items' now

    def prepared(self, lines: list[str], stats: TranslateStats) -> list[Item]:
        """`lines` as `decoded` would search them (ids, tag, truncation), counted in `stats`,
        without their search."""
        items = self._prepare(lines, stats.sentences, stats)
        stats.sentences += len(items)
        stats.empty += sum(1 for it in items if not it.ids)
        return items

    @property
    def refills(self) -> bool:
        """Whether a search that takes lines while it runs (`mtkit.translation.refill`) can
        have this translator's options: not an engine's, and see `StreamTranslator.refills`.
        (The search is made by its caller, so that this module needs none of it.)"""
        return False

    def _prepare(self, chunk: list[str], offset: int, stats: TranslateStats,
                 prefixes: list[str] | None = None) -> list[Item]:
        encoded = self.tok.encode_src_lines(chunk)  # a blank line encodes to no ids
        targets = self.prefix_ids(prefixes, offset) if prefixes else [[] for _ in chunk]
        tags = self._tag_ids(chunk, encoded)
        items = []
        for i, (line, ids, prefix) in enumerate(zip(chunk, encoded, targets, strict=True)):
            ids = tags[i] + ids
            truncated = len(ids) > self.max_src_len
            if truncated:
                ids = ids[: self.max_src_len]
                stats.truncated += 1
            if (self.max_out_len is not None and ids
                    and self.cfg.output_limit(len(ids)) > self.max_out_len):
                stats.capped += 1
            items.append(Item(offset + i, line, ids, truncated=truncated,
                              prefix=prefix if ids else [], tagged=len(tags[i])))
        return items

    def _tag_ids(self, chunk: list[str], encoded: list[list[int]]) -> list[list[int]]:
        """The ids of `tag` for each line to put it before: not a blank one, nor one that
        starts with a tag of the model already (a prepared split's text does)."""
        if self.tag is None:
            return [[] for _ in chunk]
        ids = self.tok.encode_src(self.tag)
        return [[] if not enc or line.split(maxsplit=1)[0] in self.tags else ids
                for line, enc in zip(chunk, encoded, strict=True)]

    def prefix_ids(self, prefixes: list[str], offset: int = 0) -> list[list[int]]:
        """Each prefix's target ids (`offset`: the first one's line, from 0); one the model's
        positions cannot hold is refused (`PrefixError`)."""
        out = self.tok.encode_tgt_lines(prefixes)
        for i, ids in enumerate(out):
            if self.max_out_len is not None and len(ids) > self.max_out_len:
                raise PrefixError(f"line {offset + i + 1}'s has {len(ids)} target tokens, but "
                                  f"the model's outputs end by {self.max_out_len} tokens (its "
                                  "positions)")
        return out

    def _search(self, ids: list[list[int]], stop: threading.Event, lines: list[int],
                prefixes: list[list[int]] | None = None,
                new_word: list[bool] | None = None) -> list[list[Hypothesis]]:
        """Source ids (without EOS) of one batch -> each sentence's hypotheses, best first;
        `lines`: their 0-based lines in the input (sampling draws a batch's own random stream
        from the first); `prefixes`: each sentence's forced first target ids (empty: none),
        or None when no sentence has one; `new_word`: with `prefixes`, the sentences whose
        next token after the prefix must begin a word (`force_prefix`; None: none), which an
        engine that cannot honour it ignores. Called from `workers` threads at once: it may not
        change the translator. Once `stop` is set, the search may end early by raising
        `Stopped` (its result is not wanted)."""
        raise NotImplementedError

    def alignment(self, it: Item, hyp: Hypothesis | None, text: str) -> str:
        """The links of `hyp`, whose decoded text is `text`."""
        if self.align_fn is None or hyp is None or hyp.attn is None:
            return ""
        if not text.split():  # bare '▁' pieces: no word to link
            return ""

        # Source indices count the line's whitespace words, as `mtkit align` does (a line cut
        # to the model's length keeps the words its pieces decode to); made once for all of
        # the line's hypotheses.
        pieces, words, attn = self.source_view(it, hyp.attn)
        return self.align_fn(pieces, self.tok.tgt_pieces(hyp.tokens), attn, words)

    def source_view(self, it: Item, attn: torch.Tensor) -> tuple[list[str], Words | None,
                                                                  torch.Tensor]:
        """The line's own source pieces and words, and `attn` (T, S) without the columns of
        the tag put before it (`Item.tagged`): what word links count."""
        from mtkit.align import line_words

        # Source indices count the line's whitespace words, as `mtkit align` does (a line cut
        # to the model's length keeps the words its pieces decode to); made once for all of
        # the line's hypotheses.
        own = it.ids[it.tagged:]
        if it.source is None:
            it.source = (self.tok.src_pieces(own), line_words(self.tok.encode_src, it.line, own))
        pieces, words = it.source
        return pieces, words, attn[:, it.tagged:] if it.tagged else attn

    def _format(self, it: Item) -> str:
        # An empty line has no hypotheses: it is written as one empty one scoring 0.
        hyps: list[Hypothesis | None] = list(it.nbest) or [None]
        texts = [self.tok.decode_tgt(h.tokens) if h else "" for h in hyps]
        link = None if self.align_fn is None else \
            (lambda k: self.alignment(it, hyps[k], texts[k]))
        return record(self.fmt, it.index, it.line, hyps, texts, nbest=self.cfg.nbest > 1,
                      link=link)


class StreamTranslator(LineTranslator):
    """`LineTranslator` with mtkit's own search over one model (or ensemble) on `device`,
    in float32, or under autocast to `dtype` (bfloat16 on a GPU: `mtkit serve`'s default);
    with a `shortlist`, searches score only the ids it names for each batch (the forced
    paths keep the whole vocabulary)."""

    def __init__(self, model: Translator, tokenizer: Tokenizer, cfg: DecodeConfig, *,
                 device: torch.device, max_src_len: int, max_out_len: int,
                 fmt: OutputFormat = "text", align_fn: AlignFn | None = None,
                 chunk_lines: int = CHUNK_LINES, workers: int = 1,
                 dtype: torch.dtype | None = None, tags: Sequence[str] = (),
                 shortlist: OutputShortlist | None = None) -> None:
        """max_out_len: the cap on outputs (`Recipe.output_cap`); learned positions end an
        output by their last one in any case (mtkit.decode.decode_batch)."""
        if model.max_target_len is not None:
            max_out_len = min(max_out_len, model.max_target_len - 1)
        super().__init__(tokenizer, cfg, max_src_len=max_src_len, max_out_len=max_out_len,
                         fmt=fmt, align_fn=align_fn, chunk_lines=chunk_lines, workers=workers,
                         tags=tags)
        self.model = model.eval()
        self.device = device
        self.dtype = dtype
        self.shortlist = shortlist
        self._continues: torch.Tensor | None = None  # made once (`_continuing`)

    def _search(self, ids: list[list[int]], stop: threading.Event, lines: list[int],
                prefixes: list[list[int]] | None = None,
                new_word: list[bool] | None = None) -> list[list[Hypothesis]]:
        import torch

        from mtkit.data.batch import collate
        from mtkit.decode import Prefix, decode_batch

        with torch.inference_mode(), torch.autocast(self.device.type, dtype=self.dtype,
                                                    enabled=self.dtype is not None):
            b = collate(ids, None, lines).to(self.device, non_blocking=True)
            prefix = None if prefixes is None else Prefix.of(prefixes, new_word).to(self.device)
            continuing = None
            if prefixes is not None and new_word is not None and any(new_word):
                continuing = self._continuing()
            searched = _Searched(self.model, stop, max_target_len=self.max_out_len + 1)
            return decode_batch(searched, b, self.cfg, need_attn=self.need_attn, prefix=prefix,
                                continuing=continuing, shortlist=self.shortlist)

    @property
    def refills(self) -> bool:
        """Not for sampling (its draws follow a batch's lines), a shortlist (its columns are
        a batch's union), an ensemble and models without a per-row clock
        (`Translator.joins`: the RNNs)."""
        return self.cfg.method != "sample" and self.shortlist is None and self.model.joins

    def _continuing(self) -> torch.Tensor:
        """(V,) bool: the target pieces that continue a word (no word-start mark, and a
        letter or digit first), which may not follow a `new_word` prefix."""
        import torch

        if self._continues is None:
            pieces = self.tok.tgt_pieces(range(self.tok.tgt_vocab_size))
            self._continues = torch.tensor([p[:1].isalnum() for p in pieces])
            self._continues &= ~torch.from_numpy(self.tok.starts_word("tgt"))
        return self._continues

    def _forced(self, ids: list[list[int]], targets: list[list[int]]) -> list[Hypothesis]:
        import torch

        from mtkit.data.batch import collate
        from mtkit.decode import forced, length_penalty

        with torch.inference_mode(), torch.autocast(self.device.type, dtype=self.dtype,
                                                    enabled=self.dtype is not None):
            b = collate(ids, targets, range(len(ids))).to(self.device, non_blocking=True)
            found = forced(self.model, b, need_attn=self.need_attn)
        kind, alpha = self.cfg.length_penalty, self.cfg.alpha
        return [Hypothesis(h.tokens, h.logprob / float(length_penalty(len(h.tokens) + 1, kind,
                                                                      alpha)),
                           h.logprob, h.token_logprobs, h.attn) for h in found]


class Stopped(Exception):
    """A search given up because its result is no longer wanted (`LineTranslator._search`)."""


class _Searched:
    """A model as the searches use it: its next step raises `Stopped` once `stop` is set (an
    interrupt, a reader gone, a caller that gave up), and its `max_target_len` is the
    translator's cap, so the searches themselves need not know of either. Every other
    attribute is the model's own."""

    def __init__(self, model: Translator, stop: threading.Event, *, max_target_len: int
                 ) -> None:
        self._model, self._stop = model, stop
        self.max_target_len = max_target_len

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def step(self, *args: Any, **kwargs: Any) -> Any:
        if self._stop.is_set():
            raise Stopped
        return self._model.step(*args, **kwargs)

    def restricted(self, rows: torch.Tensor) -> _Searched:
        return _Searched(self._model.restricted(rows), self._stop,
                         max_target_len=self.max_target_len)


def load_translator(paths: list[Path], device: torch.device, *, mode: str = "logprob"
                    ) -> tuple[Translator, Recipe, Tokenizer]:
    """One model, or an ensemble of several checkpoints that share one vocabulary, combining
    their log-probabilities by `mode` (see `Ensemble`). Returns the model in eval mode, the
    first model's recipe and tokenizer."""
    from mtkit.models.ensemble import Ensemble
    from mtkit.run import load_model

    loaded = [load_model(p, device) for p in paths]
    model, recipe, tok = loaded[0]
    if len(loaded) == 1:
        return model, recipe, tok
    for p, (_, _, other) in zip(paths[1:], loaded[1:], strict=True):
        if not _same_pieces(tok, other):
            raise CheckpointError(f"{p}: its vocabulary differs from {paths[0]}'s; an ensemble "
                                  "needs checkpoints trained on the same sentencepiece model")
    return Ensemble([m for m, _, _ in loaded], mode=mode).eval(), recipe, tok


def _same_pieces(a: Tokenizer, b: Tokenizer) -> bool:
    """Whether two tokenizers give the same pieces the same ids, which an ensemble's
    averaged distributions need (their sentencepiece files may differ in settings only)."""
    if (a.src_vocab_size, a.tgt_vocab_size) != (b.src_vocab_size, b.tgt_vocab_size):
        return False
    return (a.src_pieces(range(a.src_vocab_size)) == b.src_pieces(range(b.src_vocab_size))
            and a.tgt_pieces(range(a.tgt_vocab_size)) == b.tgt_pieces(range(b.tgt_vocab_size)))
