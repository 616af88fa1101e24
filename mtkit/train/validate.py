"""Validation during training: teacher-forced loss and perplexity, and BLEU/chrF of greedy or
beam output against the untouched reference text (sacreBLEU, detokenized, cased).

Shapes: B batch, S source length, T target length, V vocabulary.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import sacrebleu
import torch

from mtkit.config import Recipe
from mtkit.data.batch import Batch, iterate_batches
from mtkit.data.sampler import TokenBatchSampler
from mtkit.data.spm import Tokenizer
from mtkit.data.store import ParallelData
from mtkit.decode import decode_batch
from mtkit.device import Amp
from mtkit.models.base import Translator
from mtkit.score.metrics import HIGHER_IS_BETTER as SCORE_HIGHER_IS_BETTER
from mtkit.train.loss import label_smoothed_nll, perplexity
from mtkit.train.step import to_device

# Validation's metrics (`train.valid_metric`) and whether a larger value is better: BLEU and
# chrF as `mtkit score` has them; the teacher-forced loss and perplexity improve downwards.
HIGHER_IS_BETTER = {**{m: SCORE_HIGHER_IS_BETTER[m] for m in ("bleu", "chrf")},
                    "loss": False, "ppl": False}


@dataclass(frozen=True)
class ValidResult:
    """loss: label-smoothed, per target token; nll and ppl: of the references; bleu, chrf:
    sacreBLEU scores of the decoded output; seconds: wall-clock of the whole validation;
    directions: for a recipe with language tags, each tag's {bleu, chrf, sentences} over the
    validation pairs whose source starts with it."""

    loss: float
    nll: float
    ppl: float
    bleu: float
    chrf: float
    sentences: int
    seconds: float
    directions: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The fields, `directions` only when there are some (a one-way run's metrics read
        as before)."""
        out = dataclasses.asdict(self)
        if not self.directions:
            del out["directions"]
        return out


def valid_batches(data: ParallelData, recipe: Recipe) -> list[Batch]:
    """The validation split (or the fixed sample of `train.valid_sentences` of it) as host
    batches of `decode.batch_tokens`, in a fixed order (made once per run: the split never
    changes)."""
    max_len = recipe.data.max_len
    ids = valid_sample(len(data), recipe.train.valid_sentences)
    sampler = TokenBatchSampler(data.src_lens[ids], data.tgt_lens[ids],
                                batch_tokens=recipe.decode.batch_tokens, seed=0, shuffle=False,
                                max_len=max_len)
    return list(iterate_batches(data, (ids[idx] for idx in sampler), max_len))


def valid_sample(n: int, k: int) -> np.ndarray:
    """The sentence ids validated: all `n` when `k` is 0 or at least n, else the same `k` of
    them in every run (seeded, in split order), so that scores stay comparable across
    validations and runs. A sample rather than the first k: splits may be sorted by length."""
    if k == 0 or k >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(0).choice(n, size=k, replace=False))


@torch.no_grad()
def validate(model: Translator, batches: list[Batch], refs: list[str], tokenizer: Tokenizer, *,
             recipe: Recipe, device: torch.device, amp: Amp) -> ValidResult:
    """Score `model` (switched to eval mode and back) on the validation split's `batches`
    (`valid_batches`); `refs` is the whole split's target-side text, by sentence id. Decoding
    is greedy for ``train.valid_beam == 1``, else beam search of that size, with the recipe's
    other decode settings."""
    start, was_training = time.monotonic(), model.training
    model.eval()
    cfg = recipe.train
    dcfg = dataclasses.replace(recipe.decode, method="greedy" if cfg.valid_beam == 1 else "beam",
                               beam_size=cfg.valid_beam, nbest=1)
    loss = torch.zeros((), device=device, dtype=torch.float64)
    nll = torch.zeros((), device=device, dtype=torch.float64)
    tokens = 0
    hyps: dict[int, str] = {}
    first: dict[int, list[int]] = {}  # each sentence's first source ids: its tag's among them
    try:
        for host in batches:
            b = to_device(host, device)
            tokens += host.num_tgt_tokens
            with amp.autocast():
                out = model(b.src, b.src_lens, b.tgt_in)
                nbest = decode_batch(model, b, dcfg)
            sums = label_smoothed_nll(out.logits, b.tgt_out, smoothing=cfg.label_smoothing)
            loss += sums.loss.double()
            nll += sums.nll.double()
            for i, cands, src0 in zip(host.ids.tolist(), nbest, host.src[:, :2].tolist(),
                                      strict=True):
                hyps[i] = tokenizer.decode_tgt(cands[0].tokens)
                first[i] = src0
    finally:
        model.train(was_training)
    ids = sorted(hyps)  # the sentences validated: the split, or its sample
    ordered, refs = [hyps[i] for i in ids], [refs[i] for i in ids]
    mean_nll = nll.item() / max(tokens, 1)
    bleu, chrf = corpus_scores(ordered, refs)
    directions = {}
    for tag in recipe.data.tags():
        tag_id = tokenizer.tag_id(tag)
        mine = [k for k, i in enumerate(ids) if tag_id is not None and tag_id in first[i]]
        if mine:
            b, c = corpus_scores([ordered[k] for k in mine], [refs[k] for k in mine])
            directions[tag] = {"bleu": b, "chrf": c, "sentences": len(mine)}
    return ValidResult(loss=loss.item() / max(tokens, 1), nll=mean_nll, ppl=perplexity(mean_nll),
                       bleu=bleu, chrf=chrf, sentences=len(hyps),
                       seconds=time.monotonic() - start, directions=directions)


def corpus_scores(hyps: list[str], refs: list[str]) -> tuple[float, float]:
    """Corpus BLEU and chrF. BLEU's check for tokenized text is off (`force`): on a tokenized
    corpus it printed three bare lines into the progress display at every validation, and
    these scores only compare the checkpoints of one run (`mtkit score` warns, once)."""
    return (sacrebleu.corpus_bleu(hyps, [refs], force=True).score,
            sacrebleu.corpus_chrf(hyps, [refs]).score)
