"""The Transformer decoder's self-attention cache, moved between two reused buffers.

Shapes: B rows (sentences times beam), h heads, t positions decoded, dh head size, n spare
elements per row.

Each decoder layer keeps its keys and its values as a cache (B, h, t, dh), contiguous (the
fused attention kernel reads strided keys up to twice as slowly), plus a spare buffer (B, n)
of scratch memory. A step writes the cache one position longer, its rows in the order the
search asks for, into the spare memory (`extend`), and the memory of the old cache becomes the
next spare. That is one copy of the cache per step and, once the buffers have grown to fit
(doubling from `FIRST_POSITIONS`), no allocation.

What it replaces: `torch.cat` to append and `index_select` to reorder, each allocating a new
tensor the size of the cache for every layer at every step. A beam of 5 over 300 sentences
holds 46 MB per tensor at 30 positions; blocks that large come fresh from mmap, pages the
kernel zeroes on first touch, and the allocation then cost more than the copy (measured in
bench/RESULTS.md, issue 14).

Because a step writes into the spare memory of the state it was given, a state is spent once
it has been stepped: see `mtkit.models.base.Translator.step`.
"""

from __future__ import annotations

import torch

# Positions the first buffers hold; they double when a sentence outgrows them.
FIRST_POSITIONS = 16


def empty(rows: int, heads: int, head_dim: int, like: torch.Tensor
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """A cache (rows, h, 0, dh) and a spare (rows, 0) on like's device: the first step
    allocates the memory, when it knows the dtype it writes."""
    return like.new_empty(rows, heads, 0, head_dim), like.new_empty(rows, 0)


def extend(cache: torch.Tensor, spare: torch.Tensor, new: torch.Tensor,
           order: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The cache one position longer, with the rows the search continues.

    cache (B, h, t, dh); spare (B, n); new (B', h, 1, dh): this step's keys (or values);
    order (B',): row r continues cache row order[r] (beam parents, or the rows still
    decoding), or None: each row its own (B' = B).
    Returns the cache (B', h, t+1, dh), written into the spare's memory (a new, larger buffer
    when it is too small), and the next spare (B', n'): the old cache's memory.
    """
    rows, heads, _, head_dim = new.shape
    t = cache.size(2)
    if torch.is_grad_enabled() and (new.requires_grad or cache.requires_grad):
        # Writes into given memory (out=) cannot be differentiated: a step under autograd
        # allocates, as the searches, which run without it, never do.
        kept = cache if order is None else cache.index_select(0, order)
        return torch.cat([kept, new], dim=2), spare
    size = rows * heads * (t + 1) * head_dim
    if spare.numel() < size or spare.dtype != new.dtype:
        spare = new.new_empty(rows, heads * _positions(t + 1) * head_dim)
    out = spare.view(-1)[:size].view(rows, heads, t + 1, head_dim)
    if order is None:
        return torch.cat([cache, new], dim=2, out=out), _memory(cache, rows)
    if cache.dtype == out.dtype:
        torch.index_select(cache, 0, order, out=out[:, :, :t])  # no temporary
    else:  # a cache from `empty` before the first write, or from another precision
        out[:, :, :t] = cache.index_select(0, order)
    out[:, :, t:] = new
    return out, _memory(cache, rows)


def _positions(needed: int) -> int:
    """The positions a new buffer holds: FIRST_POSITIONS doubled until `needed` fit."""
    n = FIRST_POSITIONS
    while n < needed:
        n *= 2
    return n


def _memory(t: torch.Tensor, rows: int) -> torch.Tensor:
    """All the memory under `t`, as a (rows, n) tensor to be overwritten as scratch.

    `t` is a cache that only its (spent) state used: one this module wrote into a spare,
    one from `empty`, or a fresh copy made by `mtkit.models.base.reorder`."""
    n = t.untyped_storage().nbytes() // t.element_size() // max(rows, 1)
    return t.as_strided((rows, n), (n, 1), 0)
