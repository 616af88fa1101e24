"""Decoding over a vocabulary shortlist: each group of GROUP sentences of a batch has an
output projection that computes only the target ids its sources' shortlists name
(`mtkit.data.shortlist`), the frequent ones and the special ids, so every step's projection,
log-softmax and top-k run over V' columns, not V; the fewer sentences, the fewer pieces
their lists name together.

The search itself is unchanged: it runs in the group's own id space (column j stands for
target id ``rows[j]``). The special ids 0-3 are always the first columns, so PAD, BOS and
EOS keep their ids there; prefixes are given in that space and the outputs mapped back.

Shapes: B sentences, S source length, V target vocabulary, V' the group's columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mtkit.data.hypothesis import Hypothesis
from mtkit.models.base import Step, Translator
from mtkit.models.vocab import EOS_ID, PAD_ID

SPECIALS = EOS_ID + 1  # ids 0..EOS_ID: pad, unk, bos, eos
# Sentences that share one output layer: a batch's union of lists grows with its sentences
# (half of a 32k vocabulary for 800 short ones), so a batch is searched in groups of this
# many, each over its own union (groups of 16-64 measured alike; bench/RESULTS.md, "A
# shortlist searched in groups").
GROUP = 64


@dataclass(frozen=True)
class OutputShortlist:
    """table (Vs, K) target ids per source id; frequent (F,) target ids; both long, on the
    model's device; tgt_vocab: V."""

    table: torch.Tensor
    frequent: torch.Tensor
    tgt_vocab: int

    @classmethod
    def of(cls, table: np.ndarray, frequent: np.ndarray, tgt_vocab: int, device: torch.device
           ) -> OutputShortlist:
        return cls(torch.from_numpy(np.asarray(table, dtype=np.int64)).to(device),
                   torch.from_numpy(np.asarray(frequent, dtype=np.int64)).to(device), tgt_vocab)

    def rows(self, src: torch.Tensor, prefix: torch.Tensor | None = None) -> torch.Tensor:
        """(V',) the sorted target ids batch `src` (B, S) may output: its pieces' lists, the
        frequent ids, the special ids and every id of `prefix` (B, P) (PAD after each)."""
        parts = [torch.arange(SPECIALS, device=src.device), self.frequent,
                 self.table.index_select(0, src.reshape(-1)).reshape(-1)]
        if prefix is not None:
            parts.append(prefix[prefix > PAD_ID].reshape(-1))
        keep = torch.zeros(self.tgt_vocab, dtype=torch.bool, device=src.device)
        keep[torch.cat(parts)] = True
        return keep.nonzero().squeeze(1)


class InColumns:
    """A model restricted to `rows` (`Translator.restricted`: logits (B, V') in columns) as a
    search drives it: the previous tokens it is given are columns too, fed to the model as
    the ids they stand for. Every other attribute is the model's own."""

    def __init__(self, model: Translator, rows: torch.Tensor) -> None:
        self._model, self._rows = model, rows

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def step(self, prev: torch.Tensor, *args: Any, **kwargs: Any) -> Step:
        return self._model.step(self._rows.index_select(0, prev), *args, **kwargs)


def to_columns(ids: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Target ids (any shape; every one in `rows`) as columns of `rows`."""
    return torch.searchsorted(rows, ids)


def to_ids(hyps: list[list[Hypothesis]], rows: torch.Tensor) -> list[list[Hypothesis]]:
    """The searches' hypotheses with their tokens (columns of `rows`) as target ids."""
    table = rows.tolist()
    return [[Hypothesis([table[t] for t in h.tokens], h.score, h.logprob, h.token_logprobs,
                        h.attn) for h in sent] for sent in hyps]
