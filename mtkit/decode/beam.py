"""Beam search over a whole batch at once: sentences and beams are rows of one tensor.

Shapes: B sentences (Ba of them still searching), K beam size, S source length,
V vocabulary. Row ``b * K + k`` of the model's batch is beam k of alive sentence b.

Each step scores the K x V continuations of every sentence and keeps the 2K best
(Ott et al. 2019, fairseq): EOS candidates ranked among the first K leave the beam for the
sentence's finished list, the K best others stay active. Finished lists live in (B, K)
tensors, so the loop never goes to the host except for one count per step that decides
whether to stop or drop finished sentences from the batch. Histories are kept as
backpointers and traced back once at the end, attention included, so each hypothesis gets
its own attention rows however the beam was reordered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from mtkit.config import DecodeConfig
from mtkit.decode.scoring import (
    Hypothesis,
    Prefix,
    Scratch,
    as_lengths,
    force_prefix,
    length_penalty,
    source_lengths,
    step_logprobs,
    to_hypotheses,
)
from mtkit.models.base import Encoded, State, Translator
from mtkit.models.vocab import BOS_ID, EOS_ID, PAD_ID

# Finished sentences leave the batch once they are at least 1/PRUNE_SHARE of it: dropping them
# copies the encoder's tensors (the state's rows go with the next step's `order`), which at
# every finish cost more than their rows; 1/8 was as fast as dropping at every finish and
# faster than 1/4 on test2016 (bench/RESULTS.md, "Batches in parallel, a cheaper top-k").
PRUNE_SHARE = 8
# Columns per chunk of `row_topk` (64: a whole number of vector registers; 8,000 = 125 x 64).
CHUNK = 64


@dataclass
class _Finished:
    """The K best finished hypotheses of every sentence, best first; empty slots score -inf.

    score: (B, K) penalised; step: (B, K) the step that produced the EOS; row: (B, K) the
    model row (at that step) the EOS came from; eos_lp: (B, K) the EOS's log-probability.
    """

    score: torch.Tensor
    step: torch.Tensor
    row: torch.Tensor
    eos_lp: torch.Tensor

    @classmethod
    def empty(cls, batch: int, k: int, device: torch.device) -> _Finished:
        zeros = torch.zeros(batch, k, dtype=torch.long, device=device)
        return cls(torch.full((batch, k), -math.inf, device=device), zeros, zeros.clone(),
                   torch.zeros(batch, k, device=device))

    def merge(self, alive: torch.Tensor, score: torch.Tensor, step: int, row: torch.Tensor,
              eos_lp: torch.Tensor) -> None:
        """Add candidates (Ba, C) of the alive sentences (Ba,) and keep the K best."""
        k = self.score.size(1)
        all_score = torch.cat([self.score[alive], score], 1)
        best, idx = all_score.topk(k, dim=1)
        self.score[alive] = best
        steps = torch.full_like(row, step)
        self.step[alive] = torch.cat([self.step[alive], steps], 1).gather(1, idx)
        self.row[alive] = torch.cat([self.row[alive], row], 1).gather(1, idx)
        self.eos_lp[alive] = torch.cat([self.eos_lp[alive], eos_lp], 1).gather(1, idx)


@dataclass
class _History:
    """Per step t: token (rows after t), its log-prob, parent (row at t it extends), and
    attention (B*K at t, S) of the rows the model was run on."""

    token: list[torch.Tensor] = field(default_factory=list)
    logprob: list[torch.Tensor] = field(default_factory=list)
    parent: list[torch.Tensor] = field(default_factory=list)
    attn: list[torch.Tensor] = field(default_factory=list)

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Drop finished sentences from the newest step's outgoing rows."""
        for seq in (self.token, self.logprob, self.parent):
            seq[-1] = seq[-1].index_select(0, rows)


@dataclass
class _Beam:
    """The search's moving parts for the alive sentences (Ba of them)."""

    alive: torch.Tensor  # (Ba,) original sentence indices
    scores: torch.Tensor  # (Ba, K) log-probs of active hypotheses; -inf for empty slots
    max_len: torch.Tensor  # (Ba*K,) per-row output limit
    prev: torch.Tensor  # (Ba*K,) last token of each active hypothesis
    enc: Encoded  # Ba*K rows
    state: State  # as the last step left it: its rows are reordered by the next step...
    order: torch.Tensor | None  # ... (Ba*K,): the state row each hypothesis continues
    prefix: Prefix | None = None  # the Ba*K rows' forced first tokens


def _select(beam: _Beam, lp: torch.Tensor, k: int) -> tuple[torch.Tensor, ...]:
    """Expand every active hypothesis by every token and pick candidates.

    lp: (Ba*K, V) masked log-probs. Returns the top 2K candidates' scores, source rows and
    tokens, each (Ba, 2K), and the K best non-EOS among them: their scores and their
    indices into the 2K, each (Ba, K), best first.
    """
    n_alive = beam.scores.size(0)
    # The 2K best of a sentence's K x V sums are among the 2K best tokens of each row (a
    # row's score is the same for all its tokens), so the sums are formed for K x 2K tokens
    # only: no (Ba, K x V) tensor is written and read again (bench/RESULTS.md).
    width = min(2 * k, lp.size(1))
    row_lp, row_tok = row_topk(lp, width)  # (Ba*K, W)
    cand = (row_lp.view(n_alive, k, width) + beam.scores.unsqueeze(2)).view(n_alive, -1)
    top_score, top_idx = cand.topk(2 * k, dim=1)
    base = torch.arange(n_alive, device=lp.device).unsqueeze(1) * k
    top_row = base + top_idx // width
    top_tok = row_tok.view(n_alive, -1).gather(1, top_idx)
    keep_score, keep = top_score.masked_fill(top_tok == EOS_ID, -math.inf).topk(k, dim=1)
    return top_score, top_row, top_tok, keep_score, keep


def row_topk(x: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's `width` largest values, largest first, and their columns: x (R, V) ->
    (R, W) twice, as ``x.topk(width, dim=1)`` (which of exactly equal values comes first may
    differ).

    On the CPU, torch's top-k copies each row into (value, index) pairs before selecting, the
    beam step's costliest pass after the matrix products. Here the row is cut into chunks of
    CHUNK columns; only the `width` chunks with the largest maxima can hold the `width`
    largest values (a value in any other chunk is below `width` chunk maxima of other
    chunks), so the top-k runs over those chunks' columns alone, in about half the time for a
    beam's log-probs (bench/RESULTS.md, "A cheaper top-k"). Elsewhere (CUDA's top-k is a
    radix select) and for rows of few chunks, the plain top-k.
    """
    rows, v = x.shape
    n = v // CHUNK
    if x.device.type != "cpu" or n < 4 * width or not x.is_contiguous():
        return x.topk(width, dim=1)
    tail = v - n * CHUNK
    chunk_max = x[:, : n * CHUNK].unflatten(1, (n, CHUNK)).amax(2)
    if tail:  # the last `tail` columns are one more chunk, read from column V - CHUNK on
        chunk_max = torch.cat([chunk_max, x[:, n * CHUNK:].amax(1, keepdim=True)], 1)
    chunk = chunk_max.topk(width, dim=1, sorted=False).indices  # (R, W)
    first = (chunk * CHUNK).clamp_(max=v - CHUNK)  # each chosen chunk's first column
    # Every CHUNK-long run of the row-major memory, as the rows of one (overlapping) view.
    runs = x.view(-1).as_strided((x.numel() - CHUNK + 1, CHUNK), (1, 1))
    starts = first + torch.arange(rows, device=x.device).unsqueeze(1) * v
    cand = runs.index_select(0, starts.view(-1)).view(rows, width, CHUNK)
    if tail:  # the tail chunk's window also covers columns of the chunk before it
        cand[:, :, : CHUNK - tail].masked_fill_((chunk == n).unsqueeze(2), -math.inf)
    val, pos = cand.view(rows, width * CHUNK).topk(width, dim=1)
    return val, first.gather(1, pos // CHUNK) + pos % CHUNK


def _penalised(raw: torch.Tensor, length: torch.Tensor | int, cfg: DecodeConfig) -> torch.Tensor:
    return raw / length_penalty(length, cfg.length_penalty, cfg.alpha)


def _advance(beam: _Beam, lp: torch.Tensor, attn: torch.Tensor | None, t: int,
             fin: _Finished, hist: _History, cfg: DecodeConfig
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One search step after the model's: finish EOS candidates, record history.

    Returns the new active scores (Ba, K), their parent rows (Ba*K,) and tokens (Ba*K,).
    """
    k = cfg.beam_size
    top_score, top_row, top_tok, new_scores, keep = _select(beam, lp, k)
    # Only EOS among the K best candidates finishes: one ranked lower would not have been
    # in a K-wide beam (this is also what makes beam size 1 exactly greedy).
    first_score, first_row = top_score[:, :k], top_row[:, :k]
    is_fin = (top_tok[:, :k] == EOS_ID) & torch.isfinite(first_score)
    fin_score = _penalised(first_score, t + 1, cfg).masked_fill(~is_fin, -math.inf)
    fin.merge(beam.alive, fin_score, t, first_row, lp[first_row, EOS_ID])
    parent = top_row.gather(1, keep).view(-1)
    token = top_tok.gather(1, keep).view(-1)
    hist.token.append(token)
    hist.logprob.append(lp[parent, token])
    hist.parent.append(parent)
    if attn is not None:
        hist.attn.append(attn.float())
    return new_scores, parent, token


def _done(beam: _Beam, scores: torch.Tensor, fin: _Finished, cfg: DecodeConfig) -> torch.Tensor:
    """(Ba,) bool: sentences whose search is over.

    A sentence is done when it has K finished hypotheses (fairseq's rule; with a length
    penalty a longer active one could in principle still overtake), or when no active
    hypothesis can beat its nbest-th finished one: log-probs only fall with length and the
    penalty only grows, so score / penalty(max_len + 1) bounds every continuation.
    """
    k = cfg.beam_size
    f = fin.score[beam.alive]
    limit = beam.max_len.view(-1, k)[:, 0] + 1
    bound = _penalised(scores[:, 0], limit, cfg)
    return (torch.isfinite(f).sum(1) >= k) | (bound <= f[:, cfg.nbest - 1])


def _next_beam(beam: _Beam, state: State, scores: torch.Tensor, order: torch.Tensor,
               token: torch.Tensor, done: torch.Tensor | None, hist: _History) -> _Beam:
    """The beam after selection: `order` (Ba*K,) the state row each new hypothesis extends,
    dropping the sentences in `done` (Ba,) if given."""
    if done is None:
        return _Beam(beam.alive, scores, beam.max_len, token, beam.enc, state, order,
                     beam.prefix)
    k = scores.size(1)
    keep = (~done).nonzero().squeeze(1)
    rows = (keep.unsqueeze(1) * k + torch.arange(k, device=keep.device)).view(-1)
    hist.keep_rows(rows)
    return _Beam(beam.alive[keep], scores[keep], beam.max_len[rows], token[rows],
                 beam.enc.index_select(rows), state, order[rows],
                 None if beam.prefix is None else beam.prefix.select(rows))


@torch.no_grad()
def beam_search(model: Translator, enc: Encoded, cfg: DecodeConfig, *,
                max_len: torch.Tensor | int, need_attn: bool = False,
                prefix: Prefix | None = None, continuing: torch.Tensor | None = None
                ) -> list[list[Hypothesis]]:
    """Beam search (cfg.beam_size, cfg.nbest, cfg.min_len, length penalty) for every
    sentence of `enc` (B rows); max_len: int or (B,) limits (see `max_lengths`); prefix:
    the target ids every hypothesis of each sentence starts with, and
    continuing (V,) (`force_prefix`): while inside it a sentence's beam holds that one
    hypothesis.

    Returns per sentence, in batch order, its nbest hypotheses sorted by score (fewer only
    when fewer than nbest distinct outputs exist).
    """
    k, batch, device = cfg.beam_size, enc.src_mask.size(0), enc.src_mask.device
    assert cfg.nbest <= k, "DecodeConfig validation keeps nbest <= beam_size"
    rows = torch.arange(batch, device=device).repeat_interleave(k)  # sentence of each row
    scores = torch.full((batch, k), -math.inf, device=device)
    scores[:, 0] = 0.0  # all K rows start identical: only one may expand at first
    limits = as_lengths(max_len, batch, device)
    shortest = int(limits.min())  # rows only leave, so the shortest limit only grows
    beam = _Beam(torch.arange(batch, device=device), scores, limits.index_select(0, rows),
                 torch.full((batch,), BOS_ID, dtype=torch.long, device=device),
                 model.expand(enc, k), model.init_state(enc), None,
                 None if prefix is None else prefix.select(rows))
    fin, hist, scratch = _Finished.empty(batch, k, device), _History(), Scratch(device)
    for t in range(int(limits.max()) + 1):
        if t == 0:
            # The K rows of a sentence are identical before the first step: it runs once
            # per sentence, and its output is tiled (the state by the next step's order).
            out = model.step(beam.prev, beam.state, enc, need_attn=need_attn)
            first = step_logprobs(out.logits, t, cfg.min_len, limits, shortest=shortest)
            lp = torch.index_select(
                force_prefix(first, t, prefix, continuing), 0, rows,
                out=scratch.take("logprobs", (rows.numel(), out.logits.size(1))))
            attn = out.attn.index_select(0, rows) if need_attn and out.attn is not None \
                else None
        else:
            out = model.step(beam.prev, beam.state, beam.enc, need_attn=need_attn,
                             order=beam.order)
            lp = force_prefix(step_logprobs(out.logits, t, cfg.min_len, beam.max_len,
                                            shortest=shortest, scratch=scratch),
                              t, beam.prefix, continuing)
            attn = out.attn if need_attn else None
        scores, parent, token = _advance(beam, lp, attn, t, fin, hist, cfg)
        order = rows[parent] if t == 0 else parent  # rows of the state each extends
        done = _done(beam, scores, fin, cfg)
        n_done = int(done.sum())
        if n_done == done.numel():
            break
        if n_done * PRUNE_SHARE < done.numel():
            # Few finished: they stay in the batch, inert (no active hypothesis scores above
            # -inf, so none is expanded or finished again), and the encoder's tensors are
            # not copied for every sentence that finishes.
            if n_done:
                scores = scores.masked_fill(done.unsqueeze(1), -math.inf)
            done = None
        beam = _next_beam(beam, out.state, scores, order, token, done, hist)
    return _collect(fin, hist, enc.src_mask, cfg)


def _trace(hist: _History, step: torch.Tensor, row: torch.Tensor, eos_lp: torch.Tensor
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Follow backpointers from N finished hypotheses (EOS at `step` from model `row`).

    Returns tokens (N, T) (EOS at each one's step, PAD after), log-probs (N, T) and, when
    recorded at every step, attention (N, T, S).
    """
    n, steps = step.numel(), len(hist.token)
    tokens = torch.full((n, steps), PAD_ID, dtype=torch.long, device=step.device)
    lps = torch.zeros(n, steps, device=step.device)
    with_attn = len(hist.attn) == steps
    attn = torch.zeros(n, steps, hist.attn[0].size(1), device=step.device) if with_attn else None
    cur = row.clone()  # row at step t + 1 (= outgoing row of step t) of each hypothesis
    zero = torch.zeros_like(cur)
    for t in reversed(range(steps)):
        at_end, before = step == t, step > t
        k = torch.where(before, cur, zero)
        src_row = torch.where(before, hist.parent[t][k], torch.where(at_end, cur, zero))
        tok = torch.where(at_end, EOS_ID, PAD_ID)
        tokens[:, t] = torch.where(before, hist.token[t][k], tok)
        lps[:, t] = torch.where(before, hist.logprob[t][k], torch.where(at_end, eos_lp, 0.0))
        if attn is not None:
            attn[:, t] = torch.where((before | at_end).unsqueeze(1), hist.attn[t][src_row], 0.0)
        cur = torch.where(before | at_end, src_row, cur)
    return tokens, lps, attn


def _collect(fin: _Finished, hist: _History, src_mask: torch.Tensor,
             cfg: DecodeConfig) -> list[list[Hypothesis]]:
    """The nbest finished hypotheses of every sentence, traced back and sorted by score."""
    n = cfg.nbest
    tokens, lps, attn = _trace(hist, fin.step[:, :n].reshape(-1), fin.row[:, :n].reshape(-1),
                               fin.eos_lp[:, :n].reshape(-1))
    src_lens = [s for s in source_lengths(src_mask) for _ in range(n)]
    hyps = to_hypotheses(tokens, lps, attn, src_lens, kind=cfg.length_penalty, alpha=cfg.alpha)
    found = torch.isfinite(fin.score[:, :n]).view(-1).tolist()
    out = []
    for b in range(fin.score.size(0)):
        mine = [hyps[i] for i in range(b * n, (b + 1) * n) if found[i]]
        out.append(sorted(mine, key=lambda h: -h.score))
    return out
