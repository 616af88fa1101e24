"""Subword regularization on the fly: sampled segmentations differ from batch to batch, are
reproducible from the seed and the batch's place in training, keep the text, and keep every
forward pass within the token budget."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mtkit.config.regularize import SubwordSamplingConfig
from mtkit.data.batch import Batch
from mtkit.data.resegment import Resegmenter, fit
from mtkit.data.spm import Tokenizer
from mtkit.data.store import ParallelData
from mtkit.models.vocab import EOS_ID, PAD_ID
from mtkit.run import data_dir

GROUP = list(range(40))


def _reseg(toy_run: Path, *, seed: int = 1, budget: int = 4096, **cfg: object) -> Resegmenter:
    sw = SubwordSamplingConfig(**{"alpha": 0.1, **cfg})  # type: ignore[arg-type]
    return Resegmenter(Tokenizer.load(data_dir(toy_run)), sw, seed=seed, batch_tokens=budget,
                       max_len=32)


def _rows(batches: list[Batch], side: str = "src") -> dict[int, list[int]]:
    """Sentence id -> its ids in the batches (without EOS and padding)."""
    out = {}
    for b in batches:
        t = b.src if side == "src" else b.tgt_out
        for i, row in zip(b.ids.tolist(), t.tolist(), strict=True):
            out[i] = [x for x in row if x not in (PAD_ID, EOS_ID)]
    return out


@pytest.fixture(scope="module")
def train_data(toy_run: Path) -> ParallelData:
    return ParallelData.load(data_dir(toy_run), "train")


def test_sampling_differs_across_steps_and_repeats_from_seed_and_step(
        toy_run: Path, train_data: ParallelData) -> None:
    r = _reseg(toy_run)
    at = {pos: _rows(list(r.batches(train_data, [GROUP], epoch=0, position=pos)))
          for pos in (3, 4)}
    prepared = {i: train_data.src(i).tolist() for i in GROUP}
    assert at[3] != at[4] and at[3] != prepared and at[4] != prepared
    again = _reseg(toy_run)  # another process resuming at step 3 draws the same
    assert _rows(list(again.batches(train_data, [GROUP], epoch=0, position=3))) == at[3]
    assert _rows(list(again.batches(train_data, [GROUP], epoch=1, position=3))) != at[3]
    other_seed = _reseg(toy_run, seed=2)
    assert _rows(list(other_seed.batches(train_data, [GROUP], epoch=0, position=3))) != at[3]
    # the target keeps its prepared pieces unless asked
    assert _rows(list(r.batches(train_data, [GROUP], epoch=0, position=3)), "tgt") == {
        i: train_data.tgt(i).tolist() for i in GROUP}
    both = _reseg(toy_run, target=True)
    assert _rows(list(both.batches(train_data, [GROUP], epoch=0, position=3)), "tgt") != {
        i: train_data.tgt(i).tolist() for i in GROUP}


def test_a_sampled_segmentation_spells_the_same_sentence(toy_run: Path,
                                                         train_data: ParallelData) -> None:
    tok = Tokenizer.load(data_dir(toy_run))
    rows = _rows(list(_reseg(toy_run).batches(train_data, [GROUP], epoch=0, position=0)))
    for i, ids in rows.items():
        assert tok.decode_src(ids) == tok.decode_src(train_data.src(i))


def test_batches_that_outgrow_the_budget_are_cut_to_fit(toy_run: Path,
                                                        train_data: ParallelData) -> None:
    prepared = max(len(train_data.src(i)) for i in GROUP) + 1
    budget = len(GROUP) * prepared  # the prepared batch fits exactly; samples are longer
    batches = list(_reseg(toy_run, budget=budget).batches(train_data, [GROUP], epoch=0,
                                                          position=0))
    assert len(batches) > 1
    for b in batches:
        assert b.src.numel() <= budget and b.tgt_out.numel() <= budget
    assert sorted(i for b in batches for i in b.ids.tolist()) == GROUP


def test_fit_keeps_a_batch_that_fits_and_cuts_one_that_does_not() -> None:
    seqs = [np.zeros(n, dtype=np.int64) for n in (3, 9, 4, 1)]
    assert fit(seqs, seqs, 40, None) == [[0, 1, 2, 3]]  # 4 x (9 + 1)
    parts = fit(seqs, seqs, 12, None)
    assert parts == [[3, 0], [2], [1]]  # along the widths: 2, 4 | 5 | 10
    assert fit(seqs, seqs, 12, 3) == [[3, 0, 1], [2]]  # truncated to 3: widths 2, 4, 4, 4


def test_bpe_dropout_is_reproducible_and_varies_with_the_seed(multi30k_strict_run) -> None:
    _, run, _ = multi30k_strict_run  # a 1,000-piece BPE model
    tok = Tokenizer.load(data_dir(run))
    lines = ["Two young, White males are outside near many bushes.",
             "A man in an orange hat starring at something."] * 5
    draw = {s: tok.sample_lines("src", lines, alpha=0.1, nbest_size=-1, seed=s) for s in (7, 8)}
    assert draw[7] == tok.sample_lines("src", lines, alpha=0.1, nbest_size=-1, seed=7)
    assert draw[7] != draw[8] and draw[7] != tok.encode_src_lines(lines)
    assert [tok.decode_src(ids) for ids in draw[7]] == lines
