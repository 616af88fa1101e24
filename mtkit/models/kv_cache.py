"""The Transformer decoder's self-attention cache, kept in buffers with room to grow.

Shapes: B rows (sentences times beam), h heads, t positions decoded, c positions a buffer
holds (c >= t), dh head size, n spare elements per row.

Each decoder layer keeps its keys and its values as a cache (B, h, t, dh): a view of the
first t positions of a buffer (B, h, c, dh), so every head's positions stay contiguous (the
attention's matmuls read it without a copy) and the next position has its place already.
A step (`extend`) then:
- without reordering (greedy, sampling: `order` None) writes the new position into the
  buffer in place: nothing of the old cache is copied;
- reordering rows (beam parents, finished rows dropped) copies the buffer's rows, whole, into
  the spare memory in the order asked for and writes the new position there; the old
  buffer's memory becomes the next spare. Whole rows make it one contiguous row gather
  (copied position by position, a row cost microseconds whatever its length);
- when the buffer is full, moves the cache into one with GROW_BY more positions (reordered
  first into the spare, so that only the new buffer is fresh memory).
A growth allocates the new buffer, and the next reordering step a spare of its size; the
steps between growths allocate nothing.

What it replaces: `torch.cat` to append and `index_select` to reorder, each allocating a new
tensor the size of the cache for every layer at every step. A beam of 5 over 300 sentences
holds 46 MB per tensor at 30 positions; blocks that large come fresh from mmap, pages the
kernel zeroes on first touch, and the allocation then cost more than the copy (bench/
RESULTS.md, "A beam step without fresh buffers").

Because a step writes into the memory of the state it was given, a state is spent once it
has been stepped: see `mtkit.models.base.Translator.step`.
"""

from __future__ import annotations

import torch

# Positions a buffer gains when the cache outgrows it. A reordering step copies whole
# buffers, so unused positions cost copying: a few, at most GROW_BY - 1 per head.
GROW_BY = 8


def empty(rows: int, heads: int, head_dim: int, like: torch.Tensor
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """A cache (rows, h, 0, dh) and a spare (rows, 0) on like's device: the first step
    allocates the memory, when it knows the dtype it writes."""
    return like.new_empty(rows, heads, 0, head_dim), like.new_empty(rows, 0)


def extend(cache: torch.Tensor, spare: torch.Tensor, new: torch.Tensor,
           order: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The cache one position longer, with the rows the search continues.

    cache (B, h, t, dh): a view into its buffer, or any tensor of that shape (from `empty`,
    `mtkit.models.base.reorder`); spare (B, n); new (B', h, 1, dh): this step's keys (or
    values); order (B',): row r continues cache row order[r] (beam parents, or the rows
    still decoding), or None: each row its own (B' = B).
    Returns the cache (B', h, t+1, dh) and the next spare (B', n').
    """
    rows, heads, _, head_dim = new.shape
    t = cache.size(2)
    if torch.is_grad_enabled() and (new.requires_grad or cache.requires_grad):
        # Writes into given memory (out=) cannot be differentiated: a step under autograd
        # allocates, as the searches, which run without it, never do.
        kept = cache if order is None else cache.index_select(0, order)
        return torch.cat([kept, new], dim=2), spare
    buffer = _buffer(cache)
    held = 0 if buffer is None or buffer.dtype != new.dtype else buffer.size(2)
    if order is None and t < held:  # in place: the buffer has room and rows stay
        into = buffer
    elif t < held:  # reordered into the spare: contiguous to contiguous
        into = into_spare(spare, rows, heads * held * head_dim, new).view(rows, heads, held,
                                                                        head_dim)
        torch.index_select(buffer, 0, order, out=into)
        spare = spare_of(cache, rows)  # the old cache's memory
    else:  # a new buffer: the first step, a full one, or a cache from elsewhere
        whole = cache if buffer is None else buffer  # contiguous rows gather fast
        if order is not None:  # reordered first, into the spare's (already touched) memory
            into = into_spare(spare, rows, whole[0].numel(), whole).view(rows, *whole.shape[1:])
            whole = torch.index_select(whole, 0, order, out=into)
        into = new.new_empty(rows, heads, t + GROW_BY, head_dim)
        into[:, :, :t] = whole[:, :, :t]
        spare = spare_of(cache, rows)  # the old cache's memory
    out = into[:, :, : t + 1]
    out[:, :, t:] = new
    return out, spare


def _buffer(cache: torch.Tensor) -> torch.Tensor | None:
    """The whole buffer (B, h, c, dh) `cache` is the first positions of, or None when it is
    not such a view (its memory then counts as holding its own positions only)."""
    b, h, t, dh = cache.shape
    st = cache.stride()
    if dh == 0 or st[3] != 1 or st[2] != dh or st[1] % dh or cache.storage_offset():
        return None
    room = st[1] // dh
    if room < t or st[0] != h * room * dh:
        return None
    if cache.untyped_storage().nbytes() < b * h * room * dh * cache.element_size():
        return None
    return cache.as_strided((b, h, room, dh), st)


def spare_of(t: torch.Tensor, rows: int) -> torch.Tensor:
    """All the memory under `t`, as a (rows, n) tensor to be overwritten as scratch.

    `t` is a tensor that only its (spent) state used: a cache this module wrote into a spare,
    one from `empty`, a fresh copy made by `mtkit.models.base.reorder`, or a step's logits
    (`into_spare`), which the caller reads only until the next step."""
    n = t.untyped_storage().nbytes() // t.element_size() // max(rows, 1)
    return t.as_strided((rows, n), (n, 1), 0)


def into_spare(spare: torch.Tensor, rows: int, cols: int, like: torch.Tensor) -> torch.Tensor:
    """A (rows, cols) tensor of like's dtype in the spare's memory, or in a new buffer when it
    does not fit (a search's rows only shrink, so that is its first step)."""
    size = rows * cols
    if spare.numel() < size or spare.dtype != like.dtype or spare.device != like.device:
        spare = like.new_empty(size)
    return spare.view(-1)[:size].view(rows, cols)
