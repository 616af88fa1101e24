"""collate: padding, BOS/EOS placement, truncation, numpy input; Batch.to keeps lengths on
the host."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mtkit.data.batch import collate
from mtkit.models.base import source_mask
from mtkit.models.vocab import BOS_ID, EOS_ID, PAD_ID


def _reference(seqs: list[list[int]], *, bos: bool, eos: bool, max_len: int | None
               ) -> torch.Tensor:
    """The padded matrix built one sentence at a time, the obvious way."""
    rows = [([BOS_ID] if bos else []) + s[:max_len] + ([EOS_ID] if eos else []) for s in seqs]
    out = torch.full((len(rows), max(len(r) for r in rows)), PAD_ID, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out


def _random(n: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(4, 100, rng.integers(0, 12)).tolist() for _ in range(n)]


@pytest.mark.parametrize("max_len", [None, 4, 100])
def test_collate_equals_the_sentence_by_sentence_construction(max_len: int | None) -> None:
    src, tgt = _random(7, 1), _random(7, 2)
    b = collate(src, tgt, [5, 3, 0, 1, 2, 4, 6], max_len)
    torch.testing.assert_close(b.src, _reference(src, bos=False, eos=True, max_len=max_len))
    tout = _reference(tgt, bos=False, eos=True, max_len=max_len)
    tin = _reference(tgt, bos=True, eos=False, max_len=max_len)
    torch.testing.assert_close(b.tgt_out, tout)
    torch.testing.assert_close(b.tgt_in, tin)
    cap = max_len if max_len is not None else 10**9
    assert b.src_lens.tolist() == [min(len(s), cap) + 1 for s in src]
    assert b.ids.tolist() == [5, 3, 0, 1, 2, 4, 6]
    assert b.num_tgt_tokens == sum(min(len(t), cap) + 1 for t in tgt)


def test_collate_concrete_example() -> None:
    b = collate([[5, 6, 7], [8]], [[9], [10, 11]], range(2))
    assert b.src.tolist() == [[5, 6, 7, EOS_ID], [8, EOS_ID, PAD_ID, PAD_ID]]
    assert b.tgt_in.tolist() == [[BOS_ID, 9, PAD_ID], [BOS_ID, 10, 11]]
    assert b.tgt_out.tolist() == [[9, EOS_ID, PAD_ID], [10, 11, EOS_ID]]
    assert b.src_lens.tolist() == [4, 2]


def test_collate_takes_numpy_arrays_and_empty_sentences() -> None:
    src, tgt = _random(6, 3) + [[]], _random(6, 4) + [[]]
    as_lists = collate(src, tgt, range(7), 5)
    as_arrays = collate([np.asarray(s, dtype=np.int32) for s in src],
                        [np.asarray(t, dtype=np.uint16) for t in tgt], np.arange(7), 5)
    for name in ("src", "src_lens", "tgt_in", "tgt_out", "ids"):
        a, b = getattr(as_lists, name), getattr(as_arrays, name)
        assert b.dtype == torch.long
        torch.testing.assert_close(a, b)
    assert as_lists.src[6].tolist()[:1] == [EOS_ID] and as_lists.src_lens[6] == 1
    assert collate(src, None, range(7)).tgt_in is None


def test_batch_to_leaves_the_lengths_on_the_host() -> None:
    b = collate([[5, 6], [7]], [[8], [9, 10]], range(2)).to("meta")
    assert b.src.device.type == b.tgt_in.device.type == b.tgt_out.device.type == "meta"
    assert b.src_lens.device.type == "cpu"


def test_source_mask_from_lengths() -> None:
    src = torch.zeros(3, 4, dtype=torch.long)
    mask = source_mask(src, torch.tensor([4, 1, 2]))
    assert mask.tolist() == [[True] * 4, [True, False, False, False],
                             [True, True, False, False]]
