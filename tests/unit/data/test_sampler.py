"""Token-budget batching: budget, coverage, determinism, sharding, and `iterate_batches`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mtkit.data.batch import Batch, iterate_batches
from mtkit.data.sampler import TokenBatchSampler
from mtkit.data.store import ParallelData
from mtkit.models.vocab import BOS_ID, EOS_ID, PAD_ID
from mtkit.run import data_dir


def _lens(n: int = 2000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    src = rng.integers(1, 60, n)
    tgt = np.clip(src + rng.integers(-5, 6, n), 1, None)
    return src, tgt


def _padded(b: list[int], lens: np.ndarray) -> int:
    return len(b) * (int(lens[b].max()) + 1)


def test_token_budget_respected_on_both_sides() -> None:
    src, tgt = _lens()
    sampler = TokenBatchSampler(src, tgt, batch_tokens=300, seed=1)
    batches = list(sampler)
    assert len(batches) == len(sampler) > 20
    for b in batches:
        assert _padded(b, src) <= 300 and _padded(b, tgt) <= 300
    # Greedy filling: batches are not needlessly small.
    assert np.mean([_padded(b, src) for b in batches]) > 0.8 * 300


def test_every_sentence_exactly_once_per_epoch() -> None:
    src, tgt = _lens()
    sampler = TokenBatchSampler(src, tgt, batch_tokens=500, seed=3)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        flat = [i for b in sampler for i in b]
        assert sorted(flat) == list(range(len(src)))


def test_same_seed_same_order_other_seed_or_epoch_differs() -> None:
    src, tgt = _lens()

    def order(seed: int, epoch: int) -> list[list[int]]:
        s = TokenBatchSampler(src, tgt, batch_tokens=500, seed=seed)
        s.set_epoch(epoch)
        return list(s)

    assert order(1, 0) == order(1, 0)
    assert order(1, 0) != order(2, 0)
    assert order(1, 0) != order(1, 1)
    # Not only the batch order: sentences of equal lengths change company between epochs.
    assert {tuple(sorted(b)) for b in order(1, 0)} != {tuple(sorted(b)) for b in order(1, 1)}
    # ...while the number of batches stays the same.
    assert len(order(1, 0)) == len(order(1, 1)) == len(order(2, 5))


def test_no_shuffle_is_sorted_by_length_and_fixed() -> None:
    src, tgt = _lens()
    s = TokenBatchSampler(src, tgt, batch_tokens=500, seed=1, shuffle=False)
    first = list(s)
    s.set_epoch(4)
    assert list(s) == first
    longest = [max(src[b].max(), tgt[b].max()) for b in first]
    assert longest == sorted(longest)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_shards_are_disjoint_and_equal(world_size: int) -> None:
    src, tgt = _lens(1003)
    full = TokenBatchSampler(src, tgt, batch_tokens=400, seed=1)
    shards = [TokenBatchSampler(src, tgt, batch_tokens=400, seed=1, rank=r,
                                world_size=world_size) for r in range(world_size)]
    for epoch in (0, 1):
        for s in [full, *shards]:
            s.set_epoch(epoch)
        got = [list(s) for s in shards]
        counts = {len(g) for g in got}
        assert counts == {len(shards[0])} == {len(full) // world_size}
        seen = [i for g in got for b in g for i in b]
        assert len(seen) == len(set(seen))  # disjoint
        # Only the remainder batches (< world_size of them) are dropped, from the full epoch.
        full_batches = {tuple(b) for b in full}
        assert {tuple(b) for g in got for b in g} <= full_batches
        assert len(full_batches) - sum(len(g) for g in got) == len(full) % world_size


def test_bad_rank() -> None:
    with pytest.raises(ValueError, match="rank 2"):
        TokenBatchSampler([1], [1], batch_tokens=16, seed=1, rank=2, world_size=2)


def test_overlong_sentence_alone_and_truncated_lengths_counted() -> None:
    src = np.array([3, 3, 3, 500, 3, 3])
    tgt = np.array([3, 3, 3, 4, 3, 3])
    s = TokenBatchSampler(src, tgt, batch_tokens=16, seed=1)
    batches = list(s)
    assert [3] in batches
    assert sorted(i for b in batches for i in b) == list(range(6))
    # With max_len, the long sentence counts as 7 + 1 tokens: it joins another batch.
    s = TokenBatchSampler(src, tgt, batch_tokens=16, seed=1, max_len=7)
    assert [3] not in list(s)
    for b in s:
        assert len(b) * (min(int(src[b].max()), 7) + 1) <= 16


def test_empty_input() -> None:
    s = TokenBatchSampler(np.array([], dtype=int), np.array([], dtype=int), batch_tokens=16,
                          seed=1)
    assert list(s) == [] and len(s) == 0


def test_iterate_batches_pads_truncates_and_keeps_ids(toy_run) -> None:
    data = ParallelData.load(data_dir(toy_run), "train")
    sampler = TokenBatchSampler(data.src_lens, data.tgt_lens, batch_tokens=128, seed=1,
                                max_len=4)
    batches = list(iterate_batches(data, sampler, max_len=4))
    assert len(batches) == len(sampler)
    ids = torch.cat([b.ids for b in batches]).tolist()
    assert sorted(ids) == list(range(len(data)))
    for b in batches:
        assert isinstance(b, Batch)
        assert b.src.numel() <= 128 and b.tgt_in.numel() <= 128
        assert b.src.shape[1] <= 5 and b.tgt_out.shape[1] <= 5
        i = int(b.ids[0])
        want = data.src(i)[:4].tolist()
        assert b.src[0, : len(want) + 1].tolist() == [*want, EOS_ID]
        assert b.src_lens[0] == len(want) + 1
        tgt = data.tgt(i)[:4].tolist()
        assert b.tgt_in[0, : len(tgt) + 1].tolist() == [BOS_ID, *tgt]
        assert b.tgt_out[0, : len(tgt) + 1].tolist() == [*tgt, EOS_ID]
        assert (b.tgt_out[0, len(tgt) + 1:] == PAD_ID).all()


def test_padding_efficiency_on_multi30k(multi30k_run) -> None:
    recipe, run_dir, _ = multi30k_run
    data = ParallelData.load(data_dir(run_dir), "train")
    s = TokenBatchSampler(data.src_lens, data.tgt_lens, batch_tokens=4096, seed=1,
                          max_len=recipe.data.max_len)
    eff = s.padding_efficiency()
    assert eff >= 0.9
    real = sum(int(data.src_lens[b].sum() + data.tgt_lens[b].sum()) + 2 * len(b) for b in s)
    padded = sum(_padded(b, data.src_lens) + _padded(b, data.tgt_lens) for b in s)
    assert eff == pytest.approx(real / padded)


def _reference_batches(src: np.ndarray, tgt: np.ndarray, batch_tokens: int, seed: int,
                       epoch: int, max_len: int | None) -> list[list[int]]:
    """The sampler as first written, one Python step per sentence: lexsort on (longer side,
    target, source) of a seeded permutation, greedy cut along the sorted order, batch order
    shuffled by the same generator."""
    s, t = np.asarray(src, np.int64), np.asarray(tgt, np.int64)
    if max_len is not None:
        s, t = np.minimum(s, max_len), np.minimum(t, max_len)
    s, t = s + 1, t + 1
    if not len(s):
        return []
    first = np.arange(len(s))
    first = first[np.lexsort((s[first], t[first], np.maximum(s[first], t[first])))]
    bounds, n, width = [], 0, 0
    for i, (a, b) in enumerate(zip(s[first].tolist(), t[first].tolist(), strict=True)):
        w = max(width, a, b)
        if n and (n + 1) * w > batch_tokens:
            bounds.append(i)
            n, w = 0, max(a, b)
        n, width = n + 1, w
    rng = np.random.default_rng([seed, epoch])
    perm = rng.permutation(len(s))
    order = perm[np.lexsort((s[perm], t[perm], np.maximum(s[perm], t[perm])))]
    batches = np.split(order, bounds)
    return [batches[i].tolist() for i in rng.permutation(len(batches))]


@pytest.mark.parametrize("max_len", [None, 12])
def test_numpy_sampler_gives_the_batches_of_the_sentence_by_sentence_one(max_len) -> None:
    """Same batches in the same order (so a checkpoint's position resumes exactly), with
    lengths that repeat a lot, lengths over 4096 (the sorting fallback) and tiny budgets
    (sentences alone over the budget)."""
    rng = np.random.default_rng(7)
    cases = [_lens(3000, seed=1), (rng.integers(0, 9, 500), rng.integers(0, 9, 500)),
             (rng.integers(1, 6000, 300), rng.integers(1, 6000, 300)), _lens(0)]
    for (src, tgt), budget in zip(cases, (400, 16, 9000, 100), strict=True):
        sampler = TokenBatchSampler(src, tgt, batch_tokens=budget, seed=5, max_len=max_len)
        for epoch in (1, 2):
            sampler.set_epoch(epoch)
            assert list(sampler) == _reference_batches(src, tgt, budget, 5, epoch, max_len)


def test_a_max_len_beyond_16_bits_cuts_nothing():
    """data.max_len 70000 (to turn truncation off) overflowed the uint16 lengths."""
    src, tgt = np.array([3, 9, 5]), np.array([4, 2, 7])
    wide = TokenBatchSampler(src, tgt, batch_tokens=300, seed=1, max_len=70000)
    plain = TokenBatchSampler(src, tgt, batch_tokens=300, seed=1)
    assert wide.src_tokens.tolist() == plain.src_tokens.tolist() == [4, 10, 6]
