"""Subword regularization on the fly: training batches whose sentences are segmented anew,
by sampling, each time they are built (Kudo 2018; BPE-dropout, Provilkov et al. 2020; the
settings are `config.regularize.SubwordSamplingConfig`).

The prepared data holds each sentence's one (Viterbi) segmentation; decoding it gives back
the sentence as sentencepiece normalized it, which is what a sampled segmentation is drawn
from. The draw is seeded from ``train.seed`` and the batch's place in training (epoch and
position in the epoch, which a checkpoint records), so a resumed run samples what the
uninterrupted run would have. Validation and translation never come here.

Sampled segmentations are usually longer than the Viterbi one, so a batch the sampler cut to
``train.batch_tokens`` (on the prepared lengths) can outgrow it. It is then cut again, along
the sampled lengths, into batches that fit, which the update accumulates (`train.step`: the
gradient of the mean token loss of all of them, as of one batch): the budget still bounds
every forward pass, and the batches of an epoch, and so the updates, stay those the sampler
dealt.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from mtkit.config.regularize import SubwordSamplingConfig
from mtkit.data.batch import Batch, collate
from mtkit.data.spm import Side, Tokenizer
from mtkit.data.store import ParallelData
from mtkit.models.vocab import UNK_ID

_NO_SEED = 2**32 - 1  # sentencepiece reads this seed as "none": draw from the device instead


class Resegmenter:
    """Builds the training batches of index groups with sampled segmentations."""

    def __init__(self, tokenizer: Tokenizer, cfg: SubwordSamplingConfig, *, seed: int,
                 batch_tokens: int, max_len: int | None, rank: int = 0) -> None:
        assert cfg.enabled, "subword sampling is off"
        self.tok, self.cfg, self.seed, self.rank = tokenizer, cfg, seed, rank
        self.batch_tokens, self.max_len = batch_tokens, max_len

    def seed_for(self, epoch: int, position: int) -> int:
        """The sentencepiece seed of the batch at `position` of `epoch` on this rank (0 to
        2**32 - 2)."""
        state = np.random.SeedSequence([self.seed, self.rank, epoch, position]).generate_state(1)
        return int(state[0]) % _NO_SEED

    def sample(self, side: Side, ids: Sequence[np.ndarray], seed: int) -> list[np.ndarray]:
        """A sampled segmentation of each sentence (prepared ids in, ids out). A sentence with
        an unknown piece keeps its own: its text does not encode back to it."""
        decode = self.tok.decode_src if side == "src" else self.tok.decode_tgt
        keep = [bool((s == UNK_ID).any()) for s in ids]
        lines = [decode(s) for s, k in zip(ids, keep, strict=True) if not k]
        drawn = iter(self.tok.sample_lines(side, lines, alpha=self.cfg.alpha,
                                           nbest_size=self.cfg.nbest_size, seed=seed))
        return [s if k else np.asarray(next(drawn), dtype=np.int64)
                for s, k in zip(ids, keep, strict=True)]

    def batches(self, data: ParallelData, groups: Sequence[Sequence[int]], *, epoch: int,
                position: int) -> Iterator[Batch]:
        """The `Batch`es of the index `groups` (one update's, starting at `position` of
        `epoch`), each resampled and cut again where it outgrew the budget."""
        for k, idx in enumerate(groups):
            seed = self.seed_for(epoch, position + k)
            src = self.sample("src", [data.src(i) for i in idx], seed)
            tgt = [data.tgt(i) for i in idx]
            if self.cfg.target:  # a seed of its own: the source's would replay its draws
                tgt = self.sample("tgt", tgt, (seed + 1) % _NO_SEED)
            for part in fit(src, tgt, self.batch_tokens, self.max_len):
                yield collate([src[j] for j in part], [tgt[j] for j in part],
                              [int(idx[j]) for j in part], self.max_len)


def fit(src: Sequence[np.ndarray], tgt: Sequence[np.ndarray], batch_tokens: int,
        max_len: int | None) -> list[list[int]]:
    """Positions of the sentences cut into groups whose padded size (sentences x the longest
    side with EOS, after truncation to max_len) stays within `batch_tokens` on each side: all
    of them, in order, when they fit; else cut greedily along their longer side."""
    cap = max_len if max_len is not None else 1 << 62
    s = np.minimum([len(x) for x in src], cap) + 1
    t = np.minimum([len(x) for x in tgt], cap) + 1
    if len(s) * max(s.max(), t.max()) <= batch_tokens:
        return [list(range(len(s)))]
    width = np.maximum(s, t)
    parts: list[list[int]] = []
    for j in np.argsort(width, kind="stable").tolist():
        if parts and (len(parts[-1]) + 1) * width[j] <= batch_tokens:
            parts[-1].append(j)  # widths only grow along the order: the new one is the widest
        else:
            parts.append([j])
    return parts
