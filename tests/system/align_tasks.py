"""Synthetic translation tasks whose word alignment is known, and the AER of a model's attention
on them through the same code as `mtkit align -t` (mtkit.align.files: batched forced attention,
slicing, the read-out's rows, EOS dropped, pieces merged into words, argmax-tgt links).

Tasks (fresh random pairs at every call; word-level gold links are sure links):
- reversal: 3-12 one-piece words (16 in the vocabulary), target word j is source word n-1-j;
- permutation: 7 words in a fixed random order, target word j is source word PERM[j]; 8 of
  the 20 words are two pieces (a stem '▁sK' and a suffix 'a' or 'b'), so word-level links
  need the pieces merged. The suffix depends on the word, so a model must read it from the
  source too (a suffix fixed by its stem would be predictable from the previous target piece,
  and the model would be free to look anywhere while producing it);
- insert-delete: the permutation task's 7 words, with words of up to three pieces (stem,
  suffix 'a'/'b', then a second suffix 'c'/'d' on the stems s2 and s3), plus 0-3 source-only
  words '▁fK' anywhere in the source (deleted: no target word, no link) and a target-only
  '▁x' before every target word that has a second suffix (inserted: no source word, no link).
  Not every word has a partner, so no read-out can reach AER 0 with argmax-tgt links (each
  '▁x' gets a link).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

import torch

from mtkit.align import (
    Gold,
    extract_links,
    format_pharaoh,
    from_attention,
    parse_links,
    score_corpus,
)
from mtkit.align import files as ar
from mtkit.align.matrix import Link
from mtkit.align.readout import Readout, select_rows
from mtkit.config import ModelConfig
from mtkit.data.batch import collate
from mtkit.models.base import AttentionChoice, Translator
from mtkit.models.build import build_model
from tests.system.synthetic import fit

Task = Literal["reversal", "permutation", "insert-delete"]

# Pieces: the four specials, 12 one-piece words, 4 stems, 4 suffixes, 3 deletable source words,
# 1 inserted target word.
PIECES = (["<pad>", "<unk>", "<s>", "</s>"] + [f"\u2581w{k}" for k in range(12)]
          + [f"\u2581s{k}" for k in range(4)] + ["a", "b", "c", "d"]
          + [f"\u2581f{k}" for k in range(3)] + ["\u2581x"])
_ID = {p: i for i, p in enumerate(PIECES)}
ONE_PIECE = [[_ID[f"\u2581w{k}"]] for k in range(12)]
SPLIT_WORDS = [[_ID[f"\u2581s{k}"], _ID[suffix]] for k in range(4) for suffix in ("a", "b")]
# s2 and s3 take a second suffix: 3-piece words
THREE_PIECES = [w + [_ID[s2]] for w in SPLIT_WORDS[4:] for s2 in ("c", "d")]
PERM = random.Random(7).sample(range(7), 7)  # target word j = source word PERM[j]
DELETED = [[_ID[f"\u2581f{k}"]] for k in range(3)]
INSERTED = _ID["\u2581x"]
# Vocabulary of each task's models: reversal and permutation keep the 22 pieces they had before
# insert-delete's were appended, so their models (and the figures measured on them) are as
# before.
VOCAB = {"reversal": 22, "permutation": 22, "insert-delete": len(PIECES)}


@dataclass(frozen=True)
class Example:
    """One pair: piece ids without BOS/EOS, and its sure links (source word i, target word j)."""

    src: list[int]
    tgt: list[int]
    links: frozenset[Link]


def _reordered(words: list[list[int]], order: list[int]) -> Example:
    return Example([i for w in words for i in w],
                   [i for j in range(len(words)) for i in words[order[j]]],
                   frozenset((order[j], j) for j in range(len(words))))


def _insert_delete(rng: random.Random) -> Example:
    lexicon = ONE_PIECE + SPLIT_WORDS + THREE_PIECES
    content = [lexicon[rng.randrange(len(lexicon))] for _ in range(rng.randint(4, 10))]
    src: list[list[int]] = []
    tgt: list[list[int]] = []
    links = set()
    for word in content:
        while rng.random() < 0.2:  # deletion: a source word without a partner
            src.append(DELETED[rng.randrange(len(DELETED))])
        if len(word) == 3:  # insertion: a target word without a partner
            tgt.append([INSERTED])
        links.add((len(src), len(tgt)))
        src.append(word)
        tgt.append(word)
    return Example([i for w in src for i in w], [i for w in tgt for i in w], frozenset(links))


def examples(task: Task, n: int, rng: random.Random) -> list[Example]:
    """n random pairs of `task`."""
    out = []
    for _ in range(n):
        if task == "reversal":
            lexicon = ONE_PIECE + [[_ID[f"\u2581s{k}"]] for k in range(4)]
            words = [lexicon[rng.randrange(len(lexicon))] for _ in range(rng.randint(3, 12))]
            out.append(_reordered(words, list(range(len(words) - 1, -1, -1))))
        elif task == "permutation":
            lexicon = ONE_PIECE + SPLIT_WORDS
            out.append(_reordered([lexicon[rng.randrange(len(lexicon))] for _ in range(7)],
                                  PERM))
        else:
            out.append(_insert_delete(rng))
    return out


def train(cfg: ModelConfig, task: Task, *, updates: int, lr: float, seed: int = 1
          ) -> Translator:
    """A model of `cfg` trained on batches of 32 fresh pairs (`synthetic.fit`: Adam, warm-up
    then linear decay; without the decay the attention of the GRU keeps wandering to the
    neighbouring source word, AER between 0.02 and 0.45 from one hundred updates to the next
    at a constant rate)."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    model = build_model(cfg, VOCAB[task], VOCAB[task])

    def next_batch():
        pairs = examples(task, 32, rng)
        return collate([p.src for p in pairs], [p.tgt for p in pairs], range(len(pairs)))

    return fit(model, next_batch, updates=updates, lr=lr, betas=(0.9, 0.98))


def aer(model: Translator, task: Task, choice: AttentionChoice, readout: Readout = "current",
        n: int = 200) -> float:
    """AER of the Pharaoh links `mtkit align -t --readout READOUT` would write for n fresh
    pairs (the same pairs for every call)."""
    data = examples(task, n, random.Random(99))
    pairs = [ar.Pair(i, ex.src, ex.tgt) for i, ex in enumerate(data)]
    maps = ar.pair_attention(model, pairs, choice, device=torch.device("cpu"),
                             batch_tokens=2000)
    hyps, golds = [], []
    for ex, pair, weights in zip(data, pairs, maps, strict=True):
        rows = select_rows(weights, len(pair.tgt), readout)
        matrix = from_attention(rows, [PIECES[i] for i in pair.src],
                                [PIECES[i] for i in pair.tgt], level="word")
        hyps.append(parse_links(format_pharaoh(extract_links(matrix.weights))).sure)
        assert max(j for _, j in ex.links) < len(matrix.tgt_tokens)  # pieces merged into words
        golds.append(Gold(ex.links, ex.links, f"pair {pair.index}"))
    return score_corpus(hyps, golds)[0].aer
