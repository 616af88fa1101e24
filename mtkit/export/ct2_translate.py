"""`mtkit translate DIR` for an exported directory: the same line handling as mtkit's own
search (`mtkit.translation.lines.LineTranslator`: streaming, input order, empty lines, n-best,
jsonl, alignments), with CTranslate2 doing the search.

How mtkit's decoding options map onto the engine's (`Translator.translate_batch`):
- beam_size, nbest -> beam_size, num_hypotheses; greedy is beam_size 1;
- length penalty: the engine divides by |Y|^p with |Y| counting EOS, so mtkit's `average` is
  p = 1 and `none` p = 0; `gnmt` has no equivalent and is refused (`engine_problems`);
- min_len -> min_decoding_length (EOS banned at steps t < min_len in both). The engine bans it
  before its log-softmax, renormalising those steps, and mtkit after: greedy output is the
  same, a beam's can differ (noted to the user); every output is scored again (score_batch);
- the output limit floor(a * n + b) is per sentence in mtkit, per call in the engine: the
  engine runs to the batch's largest limit + 1 and each output is cut to its own limit, which
  is where mtkit forces EOS, and scored again as cut. Greedy and sampled output is then
  mtkit's; a beam that ran past a sentence's limit is searched again to that limit alone
  (`_search`: the engine's last step keeps its beam's best candidates, which end there by EOS,
  where mtkit forces EOS on every hypothesis, so a beam could in principle still keep another
  hypothesis than mtkit's);
- PAD and BOS are never produced (suppress_sequences), as in mtkit. The engine renormalises
  over the tokens it allows and mtkit does not: a trained model gives those two tokens little
  mass, so rankings agree and scores differ by up to ~1e-3 (an output scored again, cut at
  its limit, has the model's);
- sampling: temperature, top_k (0 = the whole vocabulary in both), top_p, seed; nbest samples
  come from the source repeated nbest times;
- a target prefix -> target_prefix. The engine counts it in max_decoding_length, as mtkit
  counts it in the output limit (raised to the prefix's length where shorter), gives its
  tokens attention rows, and leaves their log-probabilities out of its score: an output with
  a prefix is scored again, so its score is the model's, as mtkit's is. The engine's beam
  ranks by its own score, so under the `average` penalty (which divides a sum without the
  prefix) its beam can keep other hypotheses than mtkit's; greedy output, and a beam's under
  `none`, are the same.

Hypotheses carry the engine's score (or the model's, scored again) and, with --align, its
attention (T, S): without the source EOS's column where the engine adds the EOS (exports
before added it in mtkit, and the column is there). The engine reports no per-token
log-probabilities (token_logprobs is empty).
"""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path
from typing import Any, NamedTuple

from mtkit.config import DecodeConfig
from mtkit.data.hypothesis import Hypothesis
from mtkit.errors import CheckpointError, OptionError, Problem
from mtkit.export.ct2_dir import Export, engine_length_penalty
from mtkit.export.engine import ctranslate2
from mtkit.models.vocab import BOS_ID, EOS_ID, PAD_ID
from mtkit.translation.formats import OutputFormat
from mtkit.translation.lines import CHUNK_LINES, AlignFn, LineTranslator, Stopped

# Source pieces per search call to the engine on a CPU (counting a sampled source's nbest
# copies). translate_batch cannot be interrupted, and a whole 8,000-token batch kept Ctrl-C
# waiting 13-19 s on a busy machine; calls of 1,000 cost ~10% in a whole command, 2,000 are as
# fast as whole batches (bench/RESULTS.md, "Engine calls an interrupt can wait for"). An
# interrupt then waits for one such call (--align's first-step pass and the rescoring of cut
# outputs still take whole batches, at one step or one pass each). A GPU gets whole batches:
# not measured there.
ENGINE_TOKENS = 2000


def engine_problems(cfg: DecodeConfig) -> list[Problem]:
    """Decoding choices an exported model cannot honour, each about its DecodeConfig field."""
    out = []
    if cfg.length_penalty == "gnmt":  # sampled n-best lists are ranked by it too
        out.append(Problem("length_penalty", "CTranslate2 has no GNMT penalty; use average "
                           "(its length_penalty 1), power or none"))
    if cfg.method == "sample" and not 0 <= cfg.seed < 2**32:  # two seeds would draw alike
        out.append(Problem("seed", f"CTranslate2 takes a seed from 0 to {2**32 - 1}, got "
                           f"{cfg.seed}"))
    return out


def device_problems(device: str) -> list[Problem]:
    """Why the engine cannot run on `device`, if it cannot."""
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", device):
        return [Problem("device", "an exported model runs on auto, cpu, cuda or cuda:N, "
                        f"got {device!r}")]
    if device.startswith("cuda") and ctranslate2().get_cuda_device_count() == 0:
        # (the engine's own error blamed the driver's version)
        return [Problem("device", f"'{device}' requested but CTranslate2 sees no CUDA device; "
                        "use auto or cpu")]
    return []


def _load_engine(path: Path, device: str, *, threads: int, workers: int) -> Any:
    """CTranslate2's Translator for the export at `path`; threads: per worker (0: the
    engine's default); workers: engine replicas (its inter_threads)."""
    ct2 = ctranslate2()
    name, index = _engine_device(device)
    level = ct2.get_log_level()
    # The engine logs a warning of its own, every time, when it converts weights its device
    # cannot compute in; `CT2Translator.notes` says the same in one line of mtkit's.
    ct2.set_log_level(logging.ERROR)
    try:
        return ct2.Translator(str(path), device=name, device_index=index,
                              inter_threads=workers, intra_threads=threads)
    except (RuntimeError, ValueError, OSError) as e:  # no such device, a damaged file
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        where = "" if device == "auto" else f" on {device}"
        raise CheckpointError(f"{path}: CTranslate2 cannot load it{where} "
                              f"({reason})") from None
    finally:
        ct2.set_log_level(level)


def _engine_device(spec: str) -> tuple[str, int]:
    name, _, index = spec.partition(":")
    return name, int(index or 0)


def _weights(compute_type: str) -> str:
    """The weights' type of a compute type: 'int8' for int8_float32 (int8 weights, float32
    activations), which is what an int8 export computes in on a CPU."""
    return compute_type.partition("_")[0]


def runs_on_cpu(device: str) -> bool:
    """Whether the engine decodes on the CPU for --device (auto: when it sees no GPU)."""
    return device == "cpu" or (device == "auto" and ctranslate2().get_cuda_device_count() == 0)


_penalty = engine_length_penalty


class CT2Translator(LineTranslator):
    """`LineTranslator` over an exported directory, decoding with CTranslate2. Its `cfg`
    must have passed `decode_problems` (`mtkit.api.open_model` checks it)."""

    def __init__(self, export: Export, cfg: DecodeConfig, *, device: str = "cpu",
                 threads: int = 0, fmt: OutputFormat = "text", align_fn: AlignFn | None = None,
                 chunk_lines: int = CHUNK_LINES, workers: int = 1) -> None:
        """threads: per worker (0: the engine's default); workers: batches decoded at once,
        by as many engine replicas (CTranslate2's inter_threads); the language tags are the
        export's recipe's (data.*.tag)."""
        problems = device_problems(device)
        # The exported positions end an output by the last one: a learned table's, or the
        # sinusoid rows the export wrote (the engine fails past them; mtkit's own decoder
        # caps its outputs at the same place: Recipe.output_cap).
        self.max_target = export.recipe.output_cap()
        super().__init__(export.tokenizer, cfg, max_src_len=export.recipe.data.max_len,
                         max_out_len=self.max_target, fmt=fmt, align_fn=align_fn,
                         chunk_lines=chunk_lines, workers=workers,
                         tags=export.recipe.data.tags())
        if problems:
            raise OptionError(*problems)
        self.engine = _load_engine(export.path, device, threads=threads, workers=workers)
        used = self.engine.compute_type
        self.load_notes: list[str] = []  # for the user, one line each
        if _weights(used) != _weights(export.quantization):
            self.load_notes.append(
                f"{export.path}: {export.quantization} weights run as {used} here (CTranslate2 "
                f"has no efficient {export.quantization} computation on {self.engine.device})")
        self.engine_tokens = ENGINE_TOKENS if runs_on_cpu(device) else None
        self.src_pieces, self.tgt_pieces = export.src_pieces, export.tgt_pieces
        self.adds_eos = export.adds_source_eos
        self.tgt_ids = {p: i for i, p in enumerate(self.tgt_pieces)}
        self._seed(cfg)

    @property
    def notes(self) -> list[str]:
        """What the user should know of this engine and decoding configuration."""
        notes = list(self.load_notes)
        if self.cfg.min_len > 0 and self.cfg.method == "beam" and self.cfg.beam_size > 1:
            notes.append(
                "decode.min_len: CTranslate2's beam ranks the first steps by probabilities "
                "renormalised without EOS (mtkit's own search by the model's), so its output "
                "can differ from `mtkit translate` of the checkpoint; scores are the model's")
        return notes

    def decode_problems(self, cfg: DecodeConfig) -> list[Problem]:
        return super().decode_problems(cfg) + engine_problems(cfg)

    def configured(self, cfg: DecodeConfig, **kwargs: Any) -> LineTranslator:
        other = super().configured(cfg, **kwargs)
        self._seed(cfg)
        return other

    @staticmethod
    def _seed(cfg: DecodeConfig) -> None:
        if cfg.method == "sample":  # the engine's one random stream, per process
            ctranslate2().set_random_seed(cfg.seed)  # an unsigned 32-bit one

    def _limits(self, ids: list[list[int]], prefixes: list[list[int]]) -> list[int]:
        """Per-sentence output limits, as mtkit.decode.decode_batch computes them."""
        return [max(min(self.cfg.output_limit(len(s)), self.max_target), len(p))
                for s, p in zip(ids, prefixes, strict=True)]

    def _options(self, steps: int) -> dict[str, Any]:
        cfg = self.cfg
        opts: dict[str, Any] = dict(
            max_decoding_length=steps, min_decoding_length=cfg.min_len,
            length_penalty=_penalty(cfg), return_scores=True, return_end_token=True,
            return_attention=self.need_attn, max_input_length=0,
            suppress_sequences=[[self.tgt_pieces[PAD_ID]], [self.tgt_pieces[BOS_ID]]])
        if cfg.method == "beam":
            opts.update(beam_size=cfg.beam_size, num_hypotheses=cfg.nbest)
        elif cfg.method == "greedy":
            opts.update(beam_size=1)
        else:
            opts.update(beam_size=1, sampling_topk=cfg.top_k, sampling_topp=cfg.top_p,
                        sampling_temperature=cfg.temperature)
        return opts

    def _search(self, ids: list[list[int]], stop: threading.Event, lines: list[int],
                prefixes: list[list[int]] | None = None,
                new_word: list[bool] | None = None) -> list[list[Hypothesis]]:
        # `lines` is not needed: samples come from the engine's own random stream, seeded
        # once per run (`set_random_seed`). `stop` is looked at between engine calls
        # (`_decode`).
        # The engine cannot make a prefix's next token begin a word: `new_word` is not used,
        # and a term continued into a longer word is put back by `mtkit.translation.terms`.
        given = prefixes or [[] for _ in ids]
        limits = self._limits(ids, given)
        repeat = self.cfg.nbest if self.cfg.method == "sample" else 1
        eos = [] if self.adds_eos else [self.src_pieces[EOS_ID]]
        src = [[self.src_pieces[i] for i in s] + eos for s in ids]
        pre = None if prefixes is None else [[self.tgt_pieces[i] for i in p] for p in given]
        outputs = self._decode(src, max(limits) + 1, repeat, stop, pre)
        if self.cfg.method == "beam":
            # A beam that ran past a sentence's own limit (the batch's is the largest) is
            # searched again to that limit. The engine's last step keeps its beam_size best
            # candidates, unfinished ones scored without EOS (they end by it in _finish), and
            # returns its best num_hypotheses by those scores: hypotheses that ended earlier
            # would be crowded out, so all it found are asked for (at most 2K - 1: patience 2
            # allows 2K; the search to the limit is the same). mtkit forces EOS on every
            # hypothesis at the limit: the two differ only when an EOS candidate was among the
            # best at the last step (mtkit then keeps one more unfinished one).
            past: dict[int, list[int]] = {}
            for i, (limit, found) in enumerate(zip(limits, outputs, strict=True)):
                if any(len(o.ids) + (not o.ended) > limit for o in found):  # ran past it
                    past.setdefault(limit, []).append(i)
            k = self.cfg.beam_size
            for limit, members in past.items():
                again = self._decode([src[i] for i in members], max(limit, 1), 1, stop,
                                     None if pre is None else [pre[i] for i in members],
                                     num_hypotheses=2 * k, patience=2)
                for i, found in zip(members, again, strict=True):
                    outputs[i] = found
        return self._finish(src, limits, outputs, [bool(p) for p in given])

    def _decode(self, src: list[list[str]], steps: int, repeat: int, stop: threading.Event,
                prefixes: list[list[str]] | None = None, **engine: Any) -> list[list[_Output]]:
        """Each source's engine outputs (`repeat` samples each when sampling), of at most
        `steps` tokens (EOS included), starting with its prefix's pieces if given; `engine`:
        options over _options'. The sources go to the engine (on a CPU) ENGINE_TOKENS at a
        time, and once `stop` is set the next part raises Stopped instead."""
        opts = {**self._options(steps), **engine}
        results: list[Any] = []
        per_call = None if self.engine_tokens is None else max(self.engine_tokens // repeat, 1)
        start = 0
        for part in _parts(src, per_call):
            if stop.is_set():
                raise Stopped
            if prefixes is not None:
                opts["target_prefix"] = [p for p in prefixes[start:start + len(part)]
                                         for _ in range(repeat)]
            start += len(part)
            results += self.engine.translate_batch([s for s in part for _ in range(repeat)],
                                                   **opts)
        first = None
        if self.need_attn and self.cfg.method == "beam" and self.cfg.beam_size > 1:
            assert repeat == 1, "one source per sentence: row i of `first` is sentence i's"
            first = self._first_rows(src)
        out = []
        for i in range(len(src)):
            found = []
            for r in results[i * repeat: (i + 1) * repeat]:
                for pieces, score, attn in zip(r.hypotheses, r.scores,
                                               r.attention or [None] * len(r.hypotheses),
                                               strict=True):
                    tokens = [self.tgt_ids[p] for p in pieces]
                    ended = bool(tokens) and tokens[-1] == EOS_ID
                    found.append(_Output(tokens[:-1] if ended else tokens, float(score),
                                         attn if first is None or attn is None
                                         else [first[i], *attn[1:]], ended))
            out.append(found)
        return out

    def _finish(self, src: list[list[str]], limits: list[int], outputs: list[list[_Output]],
                prefixed: list[bool]) -> list[list[Hypothesis]]:
        """mtkit's hypotheses: an output longer than its sentence's limit is cut there, where
        mtkit forces EOS, and scored again as cut (the model's log-probabilities of its
        tokens and EOS, by the engine's score_batch); so is every output of a sentence with
        a prefix (`prefixed`), whose tokens the engine's score leaves out. In a beam's n-best
        list a cut that repeats another output is dropped."""
        p, beam = _penalty(self.cfg), self.cfg.method == "beam"
        # With min_len the engine scores the first steps renormalised without EOS (mtkit
        # leaves the model's probabilities as they are): every output is scored again.
        again = [(i, o) for i, found in enumerate(outputs) for o in found
                 if len(o.ids) > limits[i] or not o.ended or self.cfg.min_len > 0
                 or prefixed[i]]
        rescored: dict[int, float] = {}
        if again:
            scores = self.engine.score_batch(
                [src[i] for i, _ in again],
                [[self.tgt_pieces[t] for t in o.ids[:limits[i]]] for i, o in again],
                max_input_length=0)
            rescored = {id(o): float(sum(r.log_probs)) for (_, o), r in zip(again, scores,
                                                                           strict=True)}
        short = [(i, o) for i, o in again  # ended by the engine's limit: no EOS step's row
                 if o.attn is not None and len(o.attn) <= min(len(o.ids), limits[i])]
        last_rows = dict(zip((id(o) for _, o in short), self._next_rows(
            [src[i] for i, _ in short], [o.ids[:limits[i]] for i, o in short]), strict=True))
        out = []
        for limit, found in zip(limits, outputs, strict=True):
            hyps: dict[object, Hypothesis] = {}
            for o in found:
                ids = o.ids[:limit]
                n = len(ids) + 1  # the length the penalty counts: tokens and EOS
                if id(o) in rescored:
                    logprob = rescored[id(o)]
                    score = logprob / n ** p
                else:
                    score, logprob = o.score, o.score * n ** p
                # Row t of the attention belongs to the step that produced token t; the step
                # after the last kept token is the EOS step (whether the engine chose EOS there
                # or not).
                rows = o.attn if id(o) not in last_rows else [*o.attn[:n - 1], last_rows[id(o)]]
                weights = None if rows is None else _matrix(rows)[:n]
                hyp = Hypothesis(ids, score, logprob, [], weights)
                hyps.setdefault(tuple(ids) if beam else len(hyps), hyp)
            ranked = sorted(hyps.values(), key=lambda h: -h.score)
            out.append(ranked[:self.cfg.nbest] if beam else ranked)
        return out

    def _forced(self, ids: list[list[int]], targets: list[list[int]]) -> list[Hypothesis]:
        """Pairs scored by the engine (score_batch), with the attention of the targets forced
        as a prefix when asked for (one step past each, for its EOS row)."""
        eos = [] if self.adds_eos else [self.src_pieces[EOS_ID]]
        src = [[self.src_pieces[i] for i in s] + eos for s in ids]
        tgt = [[self.tgt_pieces[t] for t in t_ids] for t_ids in targets]
        scored = self.engine.score_batch(src, tgt, max_input_length=0)
        rows: list[Any] = [None] * len(ids)
        if self.need_attn:
            done = self.engine.translate_batch(
                src, target_prefix=tgt, beam_size=1,
                max_decoding_length=max(len(t) for t in tgt) + 1, min_decoding_length=0,
                max_input_length=0, return_attention=True, return_end_token=True)
            rows = [_matrix(r.attention[0][:len(t) + 1]) for r, t in zip(done, tgt, strict=True)]
        p = _penalty(self.cfg)
        out = []
        for t_ids, r, attn in zip(targets, scored, rows, strict=True):
            lps = [float(x) for x in r.log_probs]
            logprob = sum(lps)
            out.append(Hypothesis(list(t_ids), logprob / (len(t_ids) + 1) ** p, logprob, lps,
                                  attn))
        return out

    def _next_rows(self, src: list[list[str]], prefixes: list[list[int]]) -> list[list[float]]:
        """The attention of the step after each target prefix (the EOS step of a hypothesis
        that the engine's limit ended): the prefix forced, one step more."""
        if not src:
            return []
        done = self.engine.translate_batch(
            src, target_prefix=[[self.tgt_pieces[t] for t in p] for p in prefixes],
            beam_size=1, max_decoding_length=max(len(p) for p in prefixes) + 1,
            min_decoding_length=0, max_input_length=0, return_attention=True,
            return_end_token=True)
        return [r.attention[0][len(p)] for r, p in zip(done, prefixes, strict=True)]

    def _first_rows(self, src: list[list[str]]) -> list[list[float]]:
        """Each sentence's attention at the first target step, from one greedy step.

        CTranslate2's beam search (4.x, CPU) gives sentence i of a batch the first step's
        attention of sentence i // beam_size: it runs that step once per sentence, tiles the
        rows beam_size times, then picks rows by sentence index (decoding.cc). Only the first
        sentence of a batch keeps its own; on 200 lines of test2016 (beam 5) 14 lines of
        links differed from mtkit's. The first step is the same in every search (the source
        and BOS), so a greedy step, which the engine gets right, gives the row (at the cost of
        encoding the batch again: with --align only)."""
        one = self.engine.translate_batch(
            src, beam_size=1, max_decoding_length=1, min_decoding_length=0, max_input_length=0,
            return_attention=True, return_end_token=True)
        return [r.attention[0][0] for r in one]


def _parts(src: list[list[str]], tokens: int | None) -> list[list[list[str]]]:
    """`src` cut, in order, into runs of at most `tokens` pieces (a longer source alone;
    None: one run)."""
    if tokens is None:
        return [src]
    parts: list[list[list[str]]] = []
    size = tokens
    for s in src:
        if size + len(s) > tokens:
            parts.append([])
            size = 0
        parts[-1].append(s)
        size += len(s)
    return parts


class _Output(NamedTuple):
    """One engine output: target ids without EOS, the engine's score, attention rows."""

    ids: list[int]
    score: float
    attn: list | None
    ended: bool  # by EOS (else by the engine's limit)


def _matrix(rows: list) -> Any:
    """The engine's attention as the (T, S) float32 numpy array mtkit's aligner, terms and
    heatmaps read (`mtkit.align.as_array` takes either kind): an export never imports torch,
    which takes longer to import than the engine to start (numpy comes with the engine)."""
    import numpy as np

    return np.asarray(rows, dtype=np.float32)


def open_export(path: Path) -> Export:
    """The exported directory at `path`, read back (its engine is loaded by CT2Translator)."""
    from mtkit.export.ct2_dir import load_export

    return load_export(path)
