"""The Transformer's input embeddings: tokens scaled by √d (or not) plus positions,
sinusoidal or learned (Vaswani et al. 2017, §3.4-3.5). Shapes: B batch, T length, d model
size."""

from __future__ import annotations

import math

import torch
from torch import nn

from mtkit.errors import MtkitError


def sinusoids(length: int, d_model: int, start: int = 0, *, halves: bool = False
              ) -> torch.Tensor:
    """Positions start..start+length-1 -> (length, d): sin on even, cos on odd features
    (Vaswani et al. 2017, §3.5); halves: the same waves with the sines in the first
    ceil(d/2) features and the cosines after them, as Marian lays them out (computed in
    float64, as transformers' MarianSinusoidalPositionalEmbedding does, so that an imported
    model's positions are its own to the last bit)."""
    if halves:
        pos = torch.arange(start, start + length, dtype=torch.float64).unsqueeze(1)
        angle = pos / 10000.0 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
        return torch.cat([torch.sin(angle), torch.cos(angle[:, : d_model // 2])], 1).float()
    pos = torch.arange(start, start + length, dtype=torch.float32).unsqueeze(1)
    freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32)
                     * (-math.log(10000.0) / d_model))
    table = torch.zeros(length, d_model)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq[: d_model // 2])
    return table


class ScaledEmbedding(nn.Module):
    """Token embedding × √d (§3.4; × 1 when not `scaled`) plus positions, then dropout.
    Positions are sinusoidal (any length; `halves`: Marian's layout, see `sinusoids`) or
    learned (up to max_positions); the token table may be shared."""

    def __init__(self, tokens: nn.Embedding, *, learned: bool, max_positions: int,
                 dropout: float, scaled: bool = True, halves: bool = False) -> None:
        super().__init__()
        self.tokens = tokens
        d = tokens.embedding_dim
        self.scale = math.sqrt(d) if scaled else 1.0
        self.halves = halves
        self.learned = nn.Embedding(max_positions, d) if learned else None
        # Not saved with checkpoints: rebuilt from the formula.
        self.register_buffer("table", sinusoids(max_positions, d, halves=halves),
                             persistent=False)
        self.dropout = nn.Dropout(dropout)

    def positions(self, start: int, length: int) -> torch.Tensor:
        """(length, d) embeddings of positions start..start+length-1."""
        end = start + length
        if self.learned is not None:
            if end > self.learned.num_embeddings:
                raise MtkitError(f"sequence of {end} tokens is longer than "
                                 f"model.transformer.max_positions "
                                 f"({self.learned.num_embeddings}) of learned positions")
            return self.learned.weight[start:end]
        if end > self.table.size(0):
            return sinusoids(length, self.table.size(1), start, halves=self.halves
                             ).to(self.table)
        return self.table[start:end]

    def at(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """One token per row at its own position: tokens, positions (B,) -> (B, 1, d), what
        `forward` gives row b of ``tokens[b:b+1, None]`` at ``start=positions[b]`` (rows
        that joined a search at different steps: `Transformer.join`)."""
        last = int(positions.max()) + 1 if positions.numel() else 0
        table = self.positions(0, last)
        x = self.tokens(tokens) * self.scale + table.index_select(0, positions)
        return self.dropout(x.unsqueeze(1))

    def forward(self, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
        """tokens (B, T) at positions start.. -> (B, T, d)."""
        x = self.tokens(tokens) * self.scale + self.positions(start, tokens.size(1))
        return self.dropout(x)
