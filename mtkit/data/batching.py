"""Batches for inference: sentences sorted by length into batches of bounded padded size
(`token_batches`, for translation and alignment), those batches re-cut for workers decoding
at once (`parallel_batches`), and how CPU threads are shared among the workers
(`decode_parallelism`). Plain Python: an exported model's decoding loads no torch."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from mtkit.config import DecodeConfig


def token_batches(sizes: Sequence[int], budget: int, *, share: int | None = None
                  ) -> Iterator[list[int]]:
    """Positions into `sizes` grouped into batches, longest first, so that each batch's
    padded size (its longest item times its count) stays within `budget` (an item bigger than
    the budget goes alone), and, given `share`, its items' total size too. For inference,
    where every sentence is decoded once (`align` batches this way too)."""
    return _grouped(_longest_first(sizes), sizes, budget, share)


def _longest_first(sizes: Sequence[int]) -> list[int]:
    return sorted(range(len(sizes)), key=lambda k: -sizes[k])


def _grouped(order: list[int], sizes: Sequence[int], budget: int, share: int | None
             ) -> Iterator[list[int]]:
    """`token_batches` over positions already sorted longest first."""
    batch: list[int] = []
    total = 0
    for i in order:
        if batch and (sizes[batch[0]] * (len(batch) + 1) > budget
                      or (share is not None and total + sizes[i] > share)):
            yield batch
            batch, total = [], 0
        batch.append(i)
        total += sizes[i]
    if batch:
        yield batch


def decode_parallelism(threads: int, cfg: DecodeConfig, *, cpu: bool, streaming: bool,
                       default: int) -> tuple[int, int]:
    """How `threads` CPU threads (0: `default`, the engine's own count) decode: (workers,
    threads per worker, 0 for the engine's default).

    On a CPU, beam and greedy search decode batches in parallel: W = 2^floor(log2 sqrt(2N))
    workers (2 for 2-7 threads, 4 for 8-31, 8 for 32-127) of N // W threads each. A worker
    waits for no other at every operation, and one worker's Python runs while another
    computes; but many small single-threaded batches lose to fewer wider ones (the rule fits
    measurements on 2 and 16 cores: bench/RESULTS.md, "Batches in parallel"). Sampling draws
    from a generator seeded per batch, whose draws would then depend on the split: it keeps
    one batch at a time, as do line-by-line input and the GPU."""
    if not cpu or streaming or cfg.method == "sample":
        return 1, threads
    n = max(1, threads or default)
    workers = 1 << ((2 * n).bit_length() - 1) // 2
    return workers, n // workers


def parallel_batches(sizes: Sequence[int], budget: int, workers: int) -> list[list[int]]:
    """`token_batches` for `workers` decoding at once: as many batches as at the given budget,
    rounded up to a multiple of `workers`, each holding about the same number of real tokens
    (the smallest `share` that makes no more), so that no worker waits for another's last
    one. A sentence's decoding costs about its length: batches of equal padded size are not
    equal work (test2016's first 300 lines make a batch of 216 sentences padded to 37 tokens
    and one of 84 padded to 12: 5.4 s and 1.4 s on one thread each)."""
    order = _longest_first(sizes)  # sorted once for every trial cut below
    batches = list(_grouped(order, sizes, budget, None))
    if workers <= 1:
        return batches
    want = min(-(-len(batches) // workers) * workers, len(sizes))

    def count(share: int) -> int:
        return sum(1 for _ in _grouped(order, sizes, budget, share))

    lo, hi = 0, max(sum(sizes), 1)  # count(lo) > want >= count(hi) (unless want is all items)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if count(mid) <= want else (mid, hi)
    return list(_grouped(order, sizes, budget, hi))
