"""The batch every model, loss and search consumes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mtkit.data.vocab import BOS_ID, EOS_ID, PAD_ID


@dataclass(frozen=True)
class Batch:
    """src: (B, S) ids ending in EOS, right-padded with PAD; src_lens: (B,);
    tgt_in: (B, T) BOS + target ids; tgt_out: (B, T) target ids + EOS (PAD where padded);
    ids: (B,) positions of the sentences in their split (to restore input order)."""

    src: torch.Tensor
    src_lens: torch.Tensor
    tgt_in: torch.Tensor | None
    tgt_out: torch.Tensor | None
    ids: torch.Tensor

    @property
    def num_tgt_tokens(self) -> int:
        return 0 if self.tgt_out is None else int((self.tgt_out != PAD_ID).sum())

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        def mv(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device, non_blocking=non_blocking)

        return Batch(mv(self.src), mv(self.src_lens), mv(self.tgt_in), mv(self.tgt_out),
                     mv(self.ids))

    def pin_memory(self) -> Batch:
        def pin(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.pin_memory()

        return Batch(pin(self.src), pin(self.src_lens), pin(self.tgt_in), pin(self.tgt_out),
                     pin(self.ids))


def collate(src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]] | None,
            ids: Sequence[int], max_len: int | None = None) -> Batch:
    """Build a padded batch from token-id lists (without BOS/EOS); truncates to max_len."""
    def cut(s: Sequence[int]) -> list[int]:
        return list(s[:max_len]) if max_len is not None else list(s)

    srcs = [cut(s) + [EOS_ID] for s in src]
    s_len = max(len(s) for s in srcs)
    src_t = torch.full((len(srcs), s_len), PAD_ID, dtype=torch.long)
    for i, s in enumerate(srcs):
        src_t[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    lens = torch.tensor([len(s) for s in srcs], dtype=torch.long)
    tin = tout = None
    if tgt is not None:
        tgts = [cut(t) for t in tgt]
        t_len = max(len(t) for t in tgts) + 1
        tin = torch.full((len(tgts), t_len), PAD_ID, dtype=torch.long)
        tout = torch.full((len(tgts), t_len), PAD_ID, dtype=torch.long)
        for i, t in enumerate(tgts):
            tt = torch.tensor(t, dtype=torch.long)
            tin[i, 0] = BOS_ID
            tin[i, 1 : len(t) + 1] = tt
            tout[i, : len(t)] = tt
            tout[i, len(t)] = EOS_ID
    return Batch(src_t, lens, tin, tout, torch.tensor(list(ids), dtype=torch.long))
