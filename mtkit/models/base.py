"""The one interface every translation model offers; search, training and alignment use only this.

Shapes: B batch (times beam), S source length, T target length, H hidden, V vocabulary.

Every tensor in an `Encoded` and in a decoder state has the batch on dimension 0, so a single
``index_select(0, idx)`` (see `reorder`) both tiles a batch for beam search and reorders it
after each step. States are returned as new values, never mutated.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

# A decoder state: a flat mapping of named tensors, each batch-first. Models choose the names.
State = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Encoded:
    """The encoder's output for one batch.

    memory: (B, S, H) encoder states; src_mask: (B, S) bool, True on real tokens;
    extras: further batch-first tensors a model needs at every step (e.g. final states,
    precomputed cross-attention keys and values).
    """

    memory: torch.Tensor
    src_mask: torch.Tensor
    extras: State

    def index_select(self, idx: torch.Tensor) -> Encoded:
        return Encoded(self.memory.index_select(0, idx), self.src_mask.index_select(0, idx),
                       reorder(self.extras, idx))


@dataclass(frozen=True)
class Step:
    """One decoder step: logits (B, V); attn (B, S), rows summing to 1 over real source tokens
    and exactly 0 on padding, or None for a model without attention; the NEW state."""

    logits: torch.Tensor
    attn: torch.Tensor | None
    state: State


@dataclass(frozen=True)
class Output:
    """A teacher-forced pass: logits (B, T, V); attn (B, T, S) when asked and available."""

    logits: torch.Tensor
    attn: torch.Tensor | None


def reorder(state: State, idx: torch.Tensor) -> State:
    """Select (tile or reorder) batch rows of every tensor in a state: idx (B',) -> (B', ...)."""
    return {k: v.index_select(0, idx) for k, v in state.items()}


class Translator(nn.Module):
    """Base class of every model. Subclasses implement the four methods below.

    `bos`, `eos`, `pad` are token ids (see `mtkit.data.vocab`). `has_attention` is False only
    for the fixed-vector baseline (attention `none`), whose steps return attn=None.
    """

    has_attention: bool = True

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> Encoded:
        """src: (B, S) token ids, padded; src_lens: (B,) lengths (incl. EOS)."""
        raise NotImplementedError

    def init_state(self, enc: Encoded) -> State:
        """The decoder state before the first target token."""
        raise NotImplementedError

    def step(self, prev: torch.Tensor, state: State, enc: Encoded) -> Step:
        """prev: (B,) the previous target token (BOS at the first step)."""
        raise NotImplementedError

    def forward(self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor,
                return_attn: bool = False) -> Output:
        """Teacher forcing over tgt_in: (B, T), which starts with BOS."""
        raise NotImplementedError

    def parameter_counts(self) -> dict[str, int]:
        """Trainable parameters per top-level component, plus 'total'."""
        counts = {name: sum(p.numel() for p in m.parameters() if p.requires_grad)
                  for name, m in self.named_children()}
        seen: set[int] = set()
        counts["total"] = sum(p.numel() for p in self.parameters()
                              if p.requires_grad and not (id(p) in seen or seen.add(id(p))))
        return counts
