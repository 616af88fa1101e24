"""Search tests: a model-free stub with hand-written probabilities (Tier 1) and a tiny
randomly initialised GRU translator written here (Tier 2), both behind the Translator
interface only."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import nn

from mtkit.config import DecodeConfig
from mtkit.data.batch import collate
from mtkit.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from mtkit.decode import (
    Hypothesis,
    beam_search,
    decode_batch,
    forced,
    greedy,
    length_penalty,
    max_lengths,
    sample,
)
from mtkit.decode.sampling import filter_logprobs
from mtkit.models.base import Encoded, Output, State, Step, Translator

torch.set_num_threads(1)

HE, THE, CAT, SAT, RUNS = 4, 5, 6, 7, 8
V = 9
WORDS = [UNK_ID, EOS_ID, HE, THE, CAT, SAT, RUNS]  # everything a stub may emit


class TableTranslator(Translator):
    """A model-free Translator: P(next | prefix) comes from a table keyed by the prefix
    (target tokens after BOS); tokens a row leaves out share its remaining mass evenly.

    Its attention is one-hot on source position ``prev % src_len``, so attention rows reveal
    which prefix produced them. The state is the prefix itself, (B, t), batch-first.
    """

    def __init__(self, table: dict[tuple[int, ...], dict[int, float]],
                 default: dict[int, float]) -> None:
        super().__init__()
        self.table, self.default = table, default
        self.calls = 0

    def probs(self, prefix: tuple[int, ...]) -> list[float]:
        row = self.table.get(prefix, self.default)
        rest = [w for w in WORDS if w not in row]
        spare = (1.0 - sum(row.values())) / len(rest) if rest else 0.0
        return [row.get(w, spare if w in rest else 0.0) for w in range(V)]

    def logprob(self, prefix: tuple[int, ...], token: int) -> float:
        return math.log(self.probs(prefix)[token])

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> Encoded:
        mask = torch.arange(src.size(1)) < src_lens.unsqueeze(1)
        return Encoded(torch.zeros(src.size(0), src.size(1), 1), mask, {})

    def init_state(self, enc: Encoded) -> State:
        return {"fed": torch.zeros(enc.src_mask.size(0), 0, dtype=torch.long)}

    def step(self, prev: torch.Tensor, state: State, enc: Encoded, *,
             need_attn: bool = True) -> Step:
        self.calls += 1
        fed = torch.cat([state["fed"], prev.unsqueeze(1)], 1)  # BOS first
        logits = torch.tensor([self.probs(tuple(p[1:])) for p in fed.tolist()]).log()
        attn = torch.zeros(enc.src_mask.shape)
        attn[torch.arange(len(prev)), prev % enc.src_mask.sum(1)] = 1.0
        return Step(logits, attn if need_attn else None, {"fed": fed})


def stub_src(n: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """n copies of an 8-token source (9 with EOS): positions 2..8 tell tokens apart."""
    batch = collate([[9, 9, 9, 9, 9, 9, 9, 9]] * n, None, range(n))
    return batch.src, batch.src_lens


# "he" is the likelier first word, but nothing follows it confidently; "the cat" is sure.
MAIN = {
    (): {HE: 0.5, THE: 0.4, EOS_ID: 0.05},
    (HE,): {SAT: 0.25, CAT: 0.2, RUNS: 0.18, EOS_ID: 0.15, HE: 0.1, THE: 0.1},
    (THE,): {CAT: 0.9, EOS_ID: 0.02},
    (THE, CAT): {EOS_ID: 0.9},
    (HE, SAT): {EOS_ID: 0.9},
}
MAIN_DEFAULT = {EOS_ID: 0.6, CAT: 0.15, SAT: 0.1, RUNS: 0.08, HE: 0.04, THE: 0.03}


def cfg(**kw) -> DecodeConfig:
    base = {"beam_size": 2, "nbest": 1, "length_penalty": "none", "min_len": 0}
    return DecodeConfig(**{**base, **kw})


def run(model: Translator, search, c: DecodeConfig, *, n: int = 1, max_len: int = 10,
        need_attn: bool = True) -> list[list[Hypothesis]]:
    src, lens = stub_src(n)
    return search(model, model.encode(src, lens), c, max_len=max_len, need_attn=need_attn)


def check_logprobs(model: TableTranslator, h: Hypothesis) -> None:
    """Every reported token log-prob is the table's (unmasked) value for its prefix."""
    full = h.tokens + [EOS_ID]
    want = [model.logprob(tuple(full[:i]), tok) for i, tok in enumerate(full)]
    assert h.token_logprobs == pytest.approx(want, abs=1e-5)
    assert h.logprob == pytest.approx(sum(want), abs=1e-5)


def check_attn(h: Hypothesis, src_len: int = 9) -> None:
    """Row t is one-hot on the position of the token fed at step t: BOS, then its tokens."""
    fed = [BOS_ID] + h.tokens
    want = torch.zeros(len(fed), src_len)
    want[torch.arange(len(fed)), torch.tensor(fed) % src_len] = 1.0
    torch.testing.assert_close(h.attn, want)


# --------------------------------------------------------------------------- tier 1: stub


def test_greedy_takes_the_locally_best_word_and_beam_finds_the_better_sentence():
    model = TableTranslator(MAIN, MAIN_DEFAULT)
    [[g]] = run(model, greedy, cfg(method="greedy"))
    assert g.tokens == [HE, SAT]
    assert g.logprob == pytest.approx(math.log(0.5 * 0.25 * 0.9), abs=1e-5)
    [[b]] = run(model, beam_search, cfg(beam_size=2))
    assert b.tokens == [THE, CAT]
    assert b.score == pytest.approx(math.log(0.4 * 0.9 * 0.9), abs=1e-5)
    assert b.score > g.score
    check_logprobs(model, g)
    check_logprobs(model, b)


def test_nbest_is_sorted_and_each_hypothesis_keeps_its_own_attention():
    model = TableTranslator(MAIN, MAIN_DEFAULT)
    [two] = run(model, beam_search, cfg(beam_size=2, nbest=2))
    assert [h.tokens for h in two] == [[THE, CAT], [HE, SAT]]
    # beam K=3: the empty hypothesis (EOS first, p=.05) finishes at step 0 and is later
    # pushed out of the 3-best by three longer ones
    [three] = run(model, beam_search, cfg(beam_size=3, nbest=3))
    assert [h.tokens for h in three] == [[THE, CAT], [HE, SAT], [HE, CAT]]
    assert [h.score for h in three] == pytest.approx(
        [math.log(p) for p in (0.4 * 0.9 * 0.9, 0.5 * 0.25 * 0.9, 0.5 * 0.2 * 0.6)], abs=1e-5)
    for h in two + three:
        # "the cat" sits on beam row 0 after step 1 although its parent was row 1
        check_attn(h)
        check_logprobs(model, h)
        assert h.attn.shape == (len(h.tokens) + 1, 9)


def test_eos_ends_a_hypothesis_and_min_len_forbids_early_eos():
    table = {(): {EOS_ID: 0.45, THE: 0.4}, (THE,): {CAT: 0.9}, (THE, CAT): {EOS_ID: 0.9}}
    model = TableTranslator(table, MAIN_DEFAULT)
    [[h]] = run(model, beam_search, cfg(beam_size=2))
    assert h.tokens == [] and h.token_logprobs == pytest.approx([math.log(0.45)])
    assert model.calls == 1  # nothing active could beat it: the search stopped at once
    check_attn(h)
    for c in (cfg(beam_size=2, min_len=1), cfg(beam_size=3, nbest=3, min_len=2)):
        for h in run(model, beam_search, c)[0]:
            assert len(h.tokens) >= c.min_len
            check_logprobs(model, h)  # the ban does not renormalise the reported numbers
    [[h]] = run(model, beam_search, cfg(beam_size=2, min_len=1))
    assert h.tokens == [THE, CAT]
    [[g]] = run(model, greedy, cfg(method="greedy", min_len=3))
    assert len(g.tokens) >= 3 and g.tokens[:2] == [THE, CAT]


def test_max_len_forces_eos():
    model = TableTranslator({}, {HE: 0.99, EOS_ID: 0.01})
    for search in (greedy, beam_search):
        # min_len keeps the beam from stopping early (EOS at p=.01 would win on log-prob)
        [[h]] = run(model, search, cfg(beam_size=2, min_len=3), max_len=3)
        assert h.tokens == [HE, HE, HE]
        assert h.token_logprobs[-1] == pytest.approx(math.log(0.01), abs=1e-5)
    src, lens = stub_src(2)
    c = cfg(method="greedy", max_len_a=0.5, max_len_b=1)  # 8 source tokens -> 5
    out = decode_batch(model, collate([[9] * 8, [9] * 2], None, [0, 1]), c)
    assert [len(o[0].tokens) for o in out] == [5, 2]


def test_length_penalty_arithmetic():
    lens = torch.tensor([1, 4, 10])
    torch.testing.assert_close(length_penalty(lens, "gnmt", 1.0), torch.tensor([1.0, 1.5, 2.5]))
    torch.testing.assert_close(length_penalty(lens, "gnmt", 2.0),
                               torch.tensor([1.0, 2.25, 6.25]))
    torch.testing.assert_close(length_penalty(lens, "gnmt", 0.0), torch.ones(3))
    torch.testing.assert_close(length_penalty(lens, "average", 1.0), lens.float())
    torch.testing.assert_close(length_penalty(lens, "none", 1.0), torch.ones(3))
    c = DecodeConfig(max_len_a=1.5, max_len_b=10)
    assert max_lengths(torch.tensor([1, 2, 5]), c).tolist() == [10, 11, 16]


# Stopping at EOS first (p=.4) beats "he sat cat" (p=.255) on total log-prob, but not per
# token: the length penalty decides.
LP = {
    (): {EOS_ID: 0.4, HE: 0.35},
    (HE,): {SAT: 0.9, EOS_ID: 1e-4},
    (HE, SAT): {CAT: 0.9, EOS_ID: 1e-4},
    (HE, SAT, CAT): {EOS_ID: 0.9},
}


@pytest.mark.parametrize(("kind", "alpha", "tokens", "divisor"), [
    ("none", 1.0, [], 1.0),
    ("average", 1.0, [HE, SAT, CAT], 4.0),
    ("gnmt", 1.0, [HE, SAT, CAT], 1.5),
    ("gnmt", 0.0, [], 1.0),
])
def test_length_penalty_decides_between_short_and_long(kind, alpha, tokens, divisor):
    model = TableTranslator(LP, {EOS_ID: 0.01})
    [[h]] = run(model, beam_search, cfg(beam_size=2, length_penalty=kind, alpha=alpha))
    assert h.tokens == tokens
    p = 0.4 if not tokens else 0.35 * 0.9 * 0.9 * 0.9
    assert h.logprob == pytest.approx(math.log(p), abs=1e-5)
    assert h.score == pytest.approx(math.log(p) / divisor, abs=1e-5)
    assert h.score == pytest.approx(sum(h.token_logprobs) / divisor, abs=1e-6)


def test_beam_of_one_is_greedy_on_the_stub():
    model = TableTranslator(MAIN, MAIN_DEFAULT)
    [[g]] = run(model, greedy, cfg(method="greedy"))
    [[b]] = run(model, beam_search, cfg(beam_size=1))
    assert b.tokens == g.tokens and b.token_logprobs == pytest.approx(g.token_logprobs)
    torch.testing.assert_close(b.attn, g.attn)


def test_no_attention_when_not_asked():
    model = TableTranslator(MAIN, MAIN_DEFAULT)
    for search in (greedy, beam_search, sample):
        assert all(h.attn is None for hs in run(model, search, cfg(), need_attn=False)
                   for h in hs)
