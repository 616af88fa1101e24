"""Several models of one vocabulary translating as one, by averaging their next-token
log-probabilities (default; log-linear) or probabilities (linear, as fairseq does) at every step
(Sennrich et al. 2016, WMT). An `Ensemble` is itself a `Translator`, so every search drives it.

Shapes: B batch (times beam), S source length, T target length, V vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, get_args

import torch
from torch import nn

from mtkit.errors import MtkitError, OptionError, Problem, choice
from mtkit.models.base import (
    AttentionChoice,
    AttentionKind,
    Encoded,
    Output,
    State,
    Step,
    Translator,
)


def _prefixed(state: State, i: int) -> State:
    return {f"{i}.{k}": v for k, v in state.items()}


def _unprefixed(state: State, i: int) -> State:
    p = f"{i}."
    return {k[len(p):]: v for k, v in state.items() if k.startswith(p)}


def _combine(logprobs: list[torch.Tensor], mode: str) -> torch.Tensor:
    """Members' log-probabilities (..., V) -> the ensemble's, normalised.

    'logprob': the mean of the log-probabilities, renormalised (a product of experts, the
    log-linear ensemble); 'prob': log of the mean probability (the linear ensemble)."""
    sizes = {lp.size(-1) for lp in logprobs}
    if len(sizes) > 1:
        raise MtkitError(f"ensemble members have different target vocabularies "
                         f"({', '.join(str(lp.size(-1)) for lp in logprobs)} entries); "
                         "only checkpoints trained on the same data can be ensembled")
    stacked = torch.stack(logprobs)
    if mode == "logprob":
        return torch.log_softmax(stacked.mean(0), dim=-1)
    return torch.logsumexp(stacked, 0) - math.log(len(logprobs))


def _mean_attn(attns: list[torch.Tensor | None]) -> torch.Tensor | None:
    """The mean over members that returned attention; None when none did."""
    given = [a for a in attns if a is not None]
    return torch.stack(given).mean(0) if given else None


EnsembleMode = Literal["logprob", "prob"]


class Ensemble(Translator):
    """Members decode in lockstep; their Encoded and states are packed into one, under
    keys prefixed with the member's index, so `reorder` and `Encoded.index_select` work
    on the ensemble as on any model. Logits returned are normalised log-probabilities,
    combined by `mode` (see `_combine`: 'logprob' averages log-probabilities, 'prob'
    probabilities); attention is the mean over members that have it."""

    MODES: tuple[EnsembleMode, ...] = get_args(EnsembleMode)

    @classmethod
    def mode_problems(cls, mode: str) -> list[Problem]:
        if mode in cls.MODES:
            return []
        return [Problem("ensemble_mode", f"invalid choice {mode!r}; expected "
                        f"{' or '.join(cls.MODES)}")]

    def __init__(self, models: Sequence[Translator], mode: str = "logprob") -> None:
        super().__init__()
        if not models:
            raise MtkitError("an ensemble needs at least one model")
        if problems := self.mode_problems(mode):
            raise OptionError(*problems)
        self.mode = mode
        self.members = nn.ModuleList(models)
        self.has_attention = any(m.has_attention for m in models)
        limits = [m.max_target_len for m in models if m.max_target_len is not None]
        self.max_target_len = min(limits) if limits else None
        sources = [(m.max_source_len, m.source_len_key) for m in models
                   if m.max_source_len is not None]
        if sources:
            self.max_source_len, self.source_len_key = min(sources)

    def restricted(self, rows: torch.Tensor) -> Ensemble:
        return Ensemble([m.restricted(rows) for m in self.members], self.mode).train(
            self.training)

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> Encoded:
        """Each member's Encoded: member 0's memory as the ensemble's own, the others' under
        ``"{i}:memory"``, every extra as ``"{i}.{key}"``. The source mask is one for all: every
        model derives it from the same `src` and `src_lens`."""
        encs = [m.encode(src, src_lens) for m in self.members]
        extras: State = {}
        for i, e in enumerate(encs):
            if i:
                extras[f"{i}:memory"] = e.memory
            extras.update(_prefixed(e.extras, i))
        return Encoded(encs[0].memory, encs[0].src_mask, extras)

    def _member_enc(self, enc: Encoded, i: int) -> Encoded:
        memory = enc.memory if i == 0 else enc.extras[f"{i}:memory"]
        return Encoded(memory, enc.src_mask, _unprefixed(enc.extras, i))

    def init_state(self, enc: Encoded) -> State:
        state: State = {}
        for i, m in enumerate(self.members):
            state.update(_prefixed(m.init_state(self._member_enc(enc, i)), i))
        return state

    def step(self, prev: torch.Tensor, state: State, enc: Encoded, *,
             need_attn: bool = True, order: torch.Tensor | None = None) -> Step:
        """prev: (B,) -> logits (B, V), the members' combined log-probabilities."""
        logprobs, attns, new_state = [], [], {}
        for i, m in enumerate(self.members):
            out = m.step(prev, _unprefixed(state, i), self._member_enc(enc, i),
                         need_attn=need_attn, order=order)
            logprobs.append(torch.log_softmax(out.logits.float(), dim=-1))
            attns.append(out.attn)
            new_state.update(_prefixed(out.state, i))
        return Step(_combine(logprobs, self.mode), _mean_attn(attns), new_state)

    def forward(self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor,
                return_attn: bool = False) -> Output:
        """Teacher forcing: logits (B, T, V) as combined log-probabilities; attn (B, T, S)."""
        outs = [m(src, src_lens, tgt_in, return_attn=return_attn) for m in self.members]
        logits = _combine([torch.log_softmax(o.logits.float(), dim=-1) for o in outs], self.mode)
        return Output(logits, _mean_attn([o.attn for o in outs]))

    def _with_attention(self) -> list[Translator]:
        with_attn = [m for m in self.members if m.has_attention]
        if not with_attn:
            raise MtkitError("no model of this ensemble has attention")
        return with_attn

    def choose_attention(self, kind: str = "cross", layer: int | None = None,
                         head: int | str | None = None) -> AttentionChoice:
        """The choice as asked, once every member with attention has accepted it; each
        member fills in its own defaults (an RNN has no layers, a Transformer does)."""
        for m in self._with_attention():
            m.choose_attention(kind, layer, head)
        return AttentionChoice(choice("kind", kind, AttentionKind), layer, head)

    def attention_maps(self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor,
                       choice: AttentionChoice) -> torch.Tensor:
        """The mean of the members' maps (see `Translator.attention_maps`), over the
        members that have attention, each read as it resolves `choice`."""
        return torch.stack([
            m.attention_maps(src, src_lens, tgt_in,
                             m.choose_attention(choice.kind, choice.layer, choice.head))
            for m in self._with_attention()]).mean(0)
