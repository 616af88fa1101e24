"""Beam search whose batch takes new sentences while it runs (continuous batching).

Shapes: Ba sentences searching, K beam size, S source length, L the longest output a
sentence may have (its limit + 1), V vocabulary. Row ``b * K + k`` is beam k of sentence b.

`BeamStepper.join` adds sentences at any step: their encoder rows and fresh decoder states
are appended to the batch (`Translator.join`: each row keeps its own clock), and `step` runs
one model step for every row and returns the sentences that are done. Each sentence follows
`mtkit.decode.beam.beam_search`'s rules (the 2K candidates, EOS among the first K finishes,
its stopping rule), counted from its own first step, so it gets what it gets decoded alone.
Unlike `beam_search`, a row's tokens, log-probs and attention travel with it (reordered at
every step) instead of as backpointers: a sentence that joins late has no history before
its first step to trace through. Greedy search is this with K = 1 (beam 1 is exactly
greedy). Prefixes are not taken: a request with one is decoded by `decode_batch`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable

import torch

from mtkit.config import DecodeConfig
from mtkit.decode.beam import select_candidates
from mtkit.decode.scoring import Hypothesis, length_penalty, step_logprobs, to_hypotheses
from mtkit.models.base import Encoded, Translator
from mtkit.models.vocab import BOS_ID, EOS_ID, PAD_ID


def stepper_config(cfg: DecodeConfig) -> DecodeConfig:
    """The beam `cfg` asks for: greedy as a beam of one (the same outputs and scores)."""
    if cfg.method == "greedy":
        return dataclasses.replace(cfg, method="beam", beam_size=1, nbest=1)
    assert cfg.method == "beam", cfg.method
    return cfg


def _pad(x: torch.Tensor, dim: int, size: int, value: float = 0) -> torch.Tensor:
    """x with dimension `dim` padded with `value` up to `size` (left as it is if longer)."""
    if x.size(dim) >= size:
        return x
    shape = list(x.shape)
    shape[dim] = size - x.size(dim)
    return torch.cat([x, x.new_full(shape, value)], dim)


class BeamStepper:
    """Sentences in (`join`), finished ones out (`step`), each with its `Hashable` handle."""

    def __init__(self, model: Translator, cfg: DecodeConfig, *, need_attn: bool = False
                 ) -> None:
        """model: one whose `joins` is True; cfg: beam or greedy (`stepper_config`)."""
        assert model.joins, "a model whose searches cannot take rows"
        self.model, self.cfg, self.need_attn = model, stepper_config(cfg), need_attn
        self.k = self.cfg.beam_size
        self.handles: list[Hashable] = []  # (Ba,) host side
        self.t = 0  # steps since the batch was last empty

    @property
    def size(self) -> int:
        """Sentences searching."""
        return len(self.handles)

    def join(self, enc: Encoded, max_len: torch.Tensor, handles: list[Hashable]) -> None:
        """Add the sentences of `enc` (B rows, as `encode` made it) with their output limits
        max_len (B,) (`mtkit.decode.output_limits`); their first step is the next `step`."""
        k, b, device = self.k, len(handles), enc.src_mask.device
        new = self.model.expand(enc, k)
        scores = torch.full((b, k), -math.inf, device=device)
        scores[:, 0] = 0.0  # all K rows start identical: only one may expand at first
        width = int(max_len.max()) + 1
        tok = torch.full((b * k, width), PAD_ID, dtype=torch.long, device=device)
        lps = torch.zeros(b * k, width, device=device)
        attn = torch.zeros(b * k, width, enc.src_mask.size(1), device=device) \
            if self.need_attn else None
        fin = torch.full((b, k), -math.inf, device=device)
        if not self.handles:
            self.t = 0
            self.state, self.enc, self.order = self.model.init_state(new), new, None
            self.scores, self.limit = scores, max_len.repeat_interleave(k)
            self.start = torch.zeros(b, dtype=torch.long, device=device)
            self.prev = torch.full((b * k,), BOS_ID, dtype=torch.long, device=device)
            self.tok, self.lps, self.attn = tok, lps, attn
            self.fin, self.fin_tok, self.fin_lps = fin, tok.view(b, k, -1).clone(), \
                lps.view(b, k, -1).clone()
            self.fin_attn = None if attn is None else attn.view(b, k, *attn.shape[1:]).clone()
            self.handles = list(handles)
            return
        raw = next(iter(self.state.values())).size(0)  # the state's rows, not yet reordered
        order = torch.arange(raw, device=device) if self.order is None else self.order
        self.state, self.enc = self.model.join(self.state, self.enc, new)
        self.order = torch.cat([order, raw + torch.arange(b * k, device=device)])
        self.scores = torch.cat([self.scores, scores])
        self.limit = torch.cat([self.limit, max_len.repeat_interleave(k)])
        self.start = torch.cat([self.start, torch.full((b,), self.t, dtype=torch.long,
                                                              device=device)])
        self.prev = torch.cat([self.prev, torch.full((b * k,), BOS_ID, dtype=torch.long,
                                                        device=device)])
        self.fin = torch.cat([self.fin, fin])
        width = max(width, self.tok.size(1))
        self.tok = torch.cat([_pad(self.tok, 1, width, PAD_ID), _pad(tok, 1, width, PAD_ID)])
        self.lps = torch.cat([_pad(self.lps, 1, width), _pad(lps, 1, width)])
        self.fin_tok = torch.cat([_pad(self.fin_tok, 2, width, PAD_ID),
                                  _pad(tok.view(b, k, -1), 2, width, PAD_ID)])
        self.fin_lps = torch.cat([_pad(self.fin_lps, 2, width), _pad(lps.view(b, k, -1), 2,
                                                                      width)])
        if attn is not None and self.attn is not None:
            s = self.enc.src_mask.size(1)
            self.attn = torch.cat([_pad(_pad(self.attn, 1, width), 2, s),
                                   _pad(_pad(attn, 1, width), 2, s)])[:, :, :s]
            self.fin_attn = torch.cat([_pad(_pad(self.fin_attn, 2, width), 3, s),
                                       _pad(_pad(attn.view(b, k, *attn.shape[1:]), 2, width),
                                            3, s)])[..., :s]
        self.handles.extend(handles)

    def step(self) -> list[tuple[Hashable, list[Hypothesis]]]:
        """One model step for every row; the sentences it finished, each with its nbest
        hypotheses sorted by score, in the order they joined."""
        if not self.handles:
            return []
        k, cfg = self.k, self.cfg
        out = self.model.step(self.prev, self.state, self.enc, need_attn=self.need_attn,
                              order=self.order)
        local = self.t - self.start  # (Ba,) each sentence's own step
        row_local = local.repeat_interleave(k)
        # Each row's limit as `beam_search` applies it at its step: its limit counted from
        # now, min_len banned per row below (step_logprobs' `t` is one for all rows).
        lp = step_logprobs(out.logits, 0, 0, self.limit - row_local)
        early = (row_local < cfg.min_len) & (self.limit > row_local)
        lp[:, EOS_ID] = lp[:, EOS_ID].masked_fill(early, -math.inf)
        top_score, top_row, top_tok, new_scores, keep = select_candidates(self.scores, lp, k)
        first_score, first_row = top_score[:, :k], top_row[:, :k]
        is_fin = (top_tok[:, :k] == EOS_ID) & torch.isfinite(first_score)
        penalty = length_penalty(local.unsqueeze(1) + 1, cfg.length_penalty, cfg.alpha)
        self._finish((first_score / penalty).masked_fill(~is_fin, -math.inf), first_row,
                     lp[first_row, EOS_ID], row_local, out.attn)
        parent = top_row.gather(1, keep).view(-1)
        token = top_tok.gather(1, keep).view(-1)
        at = row_local.unsqueeze(1)
        self.tok = self.tok.index_select(0, parent).scatter_(1, at, token.unsqueeze(1))
        self.lps = self.lps.index_select(0, parent).scatter_(
            1, at, lp[parent, token].unsqueeze(1))
        if self.attn is not None and out.attn is not None:
            self.attn = self.attn.index_select(0, parent)
            self.attn[torch.arange(parent.numel()), row_local] = \
                out.attn.float().index_select(0, parent)
        self.scores, self.state, self.prev, self.order = new_scores, out.state, token, parent
        self.t += 1
        return self._leave(self._done(new_scores))

    def _finish(self, score: torch.Tensor, row: torch.Tensor, eos_lp: torch.Tensor,
                row_local: torch.Tensor, attn: torch.Tensor | None) -> None:
        """Merge candidates score (Ba, K) (-inf: none), ending with EOS after model rows
        row (Ba, K), into each sentence's K best finished (`beam._Finished.merge`)."""
        k = self.k
        flat = row.reshape(-1)
        at = row_local.index_select(0, flat).unsqueeze(1)
        tok = self.tok.index_select(0, flat).scatter_(1, at, EOS_ID)
        lps = self.lps.index_select(0, flat).scatter_(1, at, eos_lp.reshape(-1, 1))
        best, idx = torch.cat([self.fin, score], 1).topk(k, dim=1)
        self.fin = best

        def merged(old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
            both = torch.cat([old, new.view(old.shape)], 1)
            return both.gather(1, idx.view(*idx.shape, *[1] * (both.dim() - 2)).expand(
                -1, -1, *both.shape[2:]))

        self.fin_tok, self.fin_lps = merged(self.fin_tok, tok), merged(self.fin_lps, lps)
        if self.attn is not None and attn is not None:
            cand = self.attn.index_select(0, flat)
            cand[torch.arange(flat.numel()), at.squeeze(1)] = attn.float().index_select(0, flat)
            self.fin_attn = merged(self.fin_attn, cand)

    def _done(self, scores: torch.Tensor) -> torch.Tensor:
        """(Ba,) bool: sentences whose search is over (`beam._done`'s rule)."""
        cfg = self.cfg
        limit = self.limit.view(-1, self.k)[:, 0] + 1
        bound = scores[:, 0] / length_penalty(limit, cfg.length_penalty, cfg.alpha)
        return (torch.isfinite(self.fin).sum(1) >= self.k) | (bound <= self.fin[:, cfg.nbest - 1])

    def _leave(self, done: torch.Tensor) -> list[tuple[Hashable, list[Hypothesis]]]:
        """Drop the sentences in `done` (Ba,) from the batch; their hypotheses."""
        gone = done.nonzero().squeeze(1)
        if not gone.numel():
            return []
        n, k = self.cfg.nbest, self.k
        tokens = self.fin_tok[gone, :n].flatten(0, 1)
        lps = self.fin_lps[gone, :n].flatten(0, 1)
        attn = None if self.fin_attn is None else self.fin_attn[gone, :n].flatten(0, 1)
        lens = self.enc.src_mask.sum(1).tolist()  # per enc row (a group per sentence)
        per_sentence = lens if self.enc.group == k else lens[::k]
        src_lens = [per_sentence[i] for i in gone.tolist() for _ in range(n)]
        hyps = to_hypotheses(tokens, lps, attn, src_lens, kind=self.cfg.length_penalty,
                             alpha=self.cfg.alpha)
        found = torch.isfinite(self.fin[gone, :n]).view(-1).tolist()
        out = []
        for j, i in enumerate(gone.tolist()):
            mine = [hyps[m] for m in range(j * n, (j + 1) * n) if found[m]]
            out.append((self.handles[i], sorted(mine, key=lambda h: -h.score)))
        self._keep((~done).nonzero().squeeze(1))
        return out

    def drop(self, handles: set[Hashable]) -> None:
        """Stop searching the sentences of `handles` (their results are not wanted)."""
        if any(h in handles for h in self.handles):
            keep = [i for i, h in enumerate(self.handles) if h not in handles]
            self._keep(torch.tensor(keep, dtype=torch.long, device=self.scores.device))

    def _keep(self, keep: torch.Tensor) -> None:
        """Only the sentences `keep` (Ba',) stay, in order."""
        k = self.k
        rows = (keep.unsqueeze(1) * k + torch.arange(k, device=keep.device)).view(-1)
        self.handles = [self.handles[i] for i in keep.tolist()]
        if not self.handles:
            return
        self.scores, self.fin, self.start = self.scores[keep], self.fin[keep], self.start[keep]
        self.fin_tok, self.fin_lps = self.fin_tok[keep], self.fin_lps[keep]
        self.limit, self.prev = self.limit[rows], self.prev[rows]
        self.order = rows if self.order is None else self.order[rows]
        self.tok, self.lps = self.tok[rows], self.lps[rows]
        self.enc = self.enc.index_select(rows)
        if self.attn is not None:
            self.attn, self.fin_attn = self.attn[rows], self.fin_attn[keep]
