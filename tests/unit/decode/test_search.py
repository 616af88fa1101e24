"""Search tests: a model-free stub with hand-written probabilities (Tier 1) and a tiny
randomly initialised GRU translator written here (Tier 2), both behind the Translator
interface only."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import nn

from mtkit.config import DecodeConfig, ModelConfig, RNNConfig, TransformerConfig
from mtkit.data.batch import collate
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
from mtkit.decode import beam as beam_module
from mtkit.decode.beam import CHUNK, row_topk
from mtkit.decode.sampling import filter_logprobs
from mtkit.models.base import Encoded, Output, State, Step, Translator, reorder
from mtkit.models.build import build_model
from mtkit.models.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID

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
             need_attn: bool = True, order: torch.Tensor | None = None) -> Step:
        self.calls += 1
        if order is not None:
            state = reorder(state, order)
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
    torch.testing.assert_close(length_penalty(lens, "power", 0.5),
                               torch.tensor([1.0, 2.0, 10**0.5]))
    torch.testing.assert_close(length_penalty(lens, "power", 1.0), lens.float())
    assert length_penalty(4, "power", 2.0) == 16.0
    assert length_penalty(4, "gnmt", 1.0) == 1.5 and length_penalty(4, "none", 1.0) == 1.0
    c = DecodeConfig(max_len_a=1.5, max_len_b=10)
    assert max_lengths(torch.tensor([1, 2, 5]), c).tolist() == [10, 11, 16]
    # the batch's limits are DecodeConfig.output_limit's (export and translate use that one)
    for a, b in ((1.5, 10), (0.3, 0), (2.7, 3), (1.1, 5)):
        c = DecodeConfig(max_len_a=a, max_len_b=b)
        lens = torch.arange(1, 200)  # counting EOS
        assert max_lengths(lens, c).tolist() == [c.output_limit(n - 1) for n in lens.tolist()]


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


def test_filter_logprobs_top_k_and_top_p():
    lp = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    kept = lambda x: torch.isfinite(x)[0].tolist()  # noqa: E731
    assert kept(filter_logprobs(lp, temperature=1.0, top_k=2, top_p=1.0)) == [1, 1, 0, 0]
    assert kept(filter_logprobs(lp, temperature=1.0, top_k=0, top_p=0.8)) == [1, 1, 0, 0]
    assert kept(filter_logprobs(lp, temperature=1.0, top_k=0, top_p=0.81)) == [1, 1, 1, 0]
    assert kept(filter_logprobs(lp, temperature=1.0, top_k=0, top_p=0.01)) == [1, 0, 0, 0]
    hot = filter_logprobs(lp, temperature=2.0, top_k=0, top_p=1.0).softmax(-1)
    torch.testing.assert_close(hot, (lp / 2).softmax(-1))


# --------------------------------------------------------------------------- tier 2: toy GRU


class ToyGRU(Translator):
    """A tiny randomly initialised attentional GRU translator (Luong-style dot attention),
    written against the interface only; peaked outputs so that search choices matter."""

    def __init__(self, vocab: int = 12, hidden: int = 16, *, attention: bool = True,
                 seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.has_attention = attention
        self.src_emb = nn.Embedding(vocab, hidden, padding_idx=PAD_ID)
        self.encoder = nn.GRU(hidden, hidden, batch_first=True)
        self.tgt_emb = nn.Embedding(vocab, hidden)
        self.cell = nn.GRUCell(hidden, hidden)
        self.out = nn.Linear(2 * hidden, vocab)
        with torch.no_grad():
            self.out.weight.mul_(4.0)
            self.out.bias[EOS_ID] += 0.5  # some outputs end early, some run to max_len

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> Encoded:
        mask = torch.arange(src.size(1), device=src.device) < src_lens.unsqueeze(1)
        memory, _ = self.encoder(self.src_emb(src))  # left to right: padding comes after
        mean = (memory * mask.unsqueeze(2)).sum(1) / src_lens.unsqueeze(1)
        return Encoded(memory, mask, {"h0": torch.tanh(mean)})

    def init_state(self, enc: Encoded) -> State:
        return {"h": enc.extras["h0"]}

    def step(self, prev: torch.Tensor, state: State, enc: Encoded, *,
             need_attn: bool = True, order: torch.Tensor | None = None) -> Step:
        if order is not None:
            state = reorder(state, order)
        h = self.cell(self.tgt_emb(prev), state["h"])
        attn, ctx = None, torch.zeros_like(h)
        if self.has_attention:
            scores = (enc.memory @ h.unsqueeze(2)).squeeze(2)
            attn = scores.masked_fill(~enc.src_mask, -math.inf).softmax(-1)
            ctx = (attn.unsqueeze(2) * enc.memory).sum(1)
        return Step(self.out(torch.cat([h, ctx], -1)), attn if need_attn else None, {"h": h})

    def forward(self, src: torch.Tensor, src_lens: torch.Tensor, tgt_in: torch.Tensor,
                return_attn: bool = False) -> Output:
        enc = self.encode(src, src_lens)
        state, logits, attns = self.init_state(enc), [], []
        for t in range(tgt_in.size(1)):
            out = self.step(tgt_in[:, t], state, enc, need_attn=return_attn)
            state = out.state
            logits.append(out.logits.clone())  # valid until the next step
            attns.append(out.attn)
        with_attn = return_attn and self.has_attention
        return Output(torch.stack(logits, 1), torch.stack(attns, 1) if with_attn else None)


SOURCES = [[5, 6, 7], [4, 9, 10, 11, 5, 6, 7], [8], [], [11, 10, 9, 8, 7]]


def decode(model: Translator, sources: list[list[int]], c: DecodeConfig,
           need_attn: bool = True) -> list[list[Hypothesis]]:
    return decode_batch(model, collate(sources, None, range(len(sources))), c,
                        need_attn=need_attn)


def assert_same(a: list[list[Hypothesis]], b: list[list[Hypothesis]]) -> None:
    """Same n-best lists: same tokens, scores within 1e-4, same attention."""
    assert [[h.tokens for h in hs] for hs in a] == [[h.tokens for h in hs] for hs in b]
    for ha, hb in zip([h for hs in a for h in hs], [h for hs in b for h in hs], strict=True):
        assert ha.score == pytest.approx(hb.score, abs=1e-4)
        assert ha.token_logprobs == pytest.approx(hb.token_logprobs, abs=1e-4)
        assert (ha.attn is None) == (hb.attn is None)
        if ha.attn is not None:
            torch.testing.assert_close(ha.attn, hb.attn, atol=1e-4, rtol=1e-4)


def check_invariants(model: Translator) -> None:
    """Beam 1 == greedy; a batch == one sentence at a time; reported log-probs and attention
    == teacher forcing of the same output."""
    model.eval()
    for kind in ("none", "gnmt", "average"):
        base = {"max_len_a": 1.0, "max_len_b": 4, "length_penalty": kind}
        assert_same(decode(model, SOURCES, DecodeConfig(method="greedy", **base)),
                    decode(model, SOURCES, DecodeConfig(method="beam", beam_size=1, **base)))
    for c in (DecodeConfig(method="greedy", max_len_b=5),
              DecodeConfig(beam_size=3, nbest=3, max_len_b=5, min_len=1)):
        together = decode(model, SOURCES, c)
        assert_same(together, [decode(model, [s], c)[0] for s in SOURCES])
    nbest = decode(model, SOURCES, DecodeConfig(beam_size=4, nbest=4, max_len_b=5))
    check_forced(model, nbest)


def check_forced(model: Translator, nbest: list[list[Hypothesis]]) -> None:
    """Forced decoding of every n-best output gives back its log-probs and attention."""
    srcs = [s for s, hs in zip(SOURCES, nbest, strict=True) for _ in hs]
    hyps = [h for hs in nbest for h in hs]
    scored = forced(model, collate(srcs, [h.tokens for h in hyps], range(len(hyps))))
    assert len(scored) == len(hyps) > len(SOURCES)
    for h, f in zip(hyps, scored, strict=True):
        assert f.tokens == h.tokens
        assert f.token_logprobs == pytest.approx(h.token_logprobs, abs=1e-4)
        assert (f.attn is None) == (h.attn is None) == (not model.has_attention)
        if h.attn is not None:
            torch.testing.assert_close(f.attn, h.attn, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("attention", [True, False])
def test_toy_gru_search_invariants(attention):
    check_invariants(ToyGRU(attention=attention))


def test_toy_beam_is_no_worse_than_greedy_and_nbest_is_sorted():
    model = ToyGRU(seed=3)
    c = DecodeConfig(beam_size=5, nbest=5, length_penalty="none", max_len_b=6)
    greedy_out = decode(model, SOURCES, dataclasses.replace(c, method="greedy"))
    for hs, [g] in zip(decode(model, SOURCES, c), greedy_out, strict=True):
        assert len(hs) == 5
        assert [h.score for h in hs] == sorted((h.score for h in hs), reverse=True)
        assert hs[0].score >= g.score - 1e-5
        assert len({tuple(h.tokens) for h in hs}) == 5


def test_sampling_is_seeded_and_filters_work():
    model = ToyGRU(seed=1)
    c = DecodeConfig(method="sample", nbest=3, max_len_b=5, seed=7)
    a, b = decode(model, SOURCES, c), decode(model, SOURCES, c)
    assert_same(a, b)
    other = decode(model, SOURCES, dataclasses.replace(c, seed=8))
    assert [[h.tokens for h in hs] for hs in a] != [[h.tokens for h in hs] for hs in other]
    for hs in a:
        assert len(hs) == 3 and [h.score for h in hs] == sorted((h.score for h in hs),
                                                               reverse=True)
    check_forced(model, a)  # sampled outputs report the model's own log-probs
    greedy_out = decode(model, SOURCES, dataclasses.replace(c, method="greedy"))
    for narrow in (dataclasses.replace(c, top_k=1), dataclasses.replace(c, top_p=1e-6)):
        assert [[h.tokens for h in hs] for hs in decode(model, SOURCES, narrow)] == \
            [[g[0].tokens] * 3 for g in greedy_out]


# --------------------------------------------------------------------------- tier 3: real models


def tiny_rnn(**kw) -> ModelConfig:
    base = {"emb_dim": 16, "hidden_dim": 16, "attn_dim": 16, "dropout": 0.0, "local_window": 2}
    return ModelConfig(arch="rnn", rnn=RNNConfig(**{**base, **kw}))


TINY = {
    "gru-bahdanau-additive": tiny_rnn(),
    "lstm-luong-general-feed": tiny_rnn(cell="lstm", placement="luong", attention="general"),
    "gru-luong-local-p": tiny_rnn(placement="luong", attention="local-p", enc_layers=2),
    "gru-no-attention": tiny_rnn(attention="none", bidirectional=False, init="zeros"),
    "transformer": ModelConfig(arch="transformer", transformer=TransformerConfig(
        d_model=16, heads=2, enc_layers=2, dec_layers=2, ffn_dim=32, dropout=0.0)),
}


@pytest.mark.parametrize("name", list(TINY))
def test_real_models_search_invariants(name):
    torch.manual_seed(0)
    check_invariants(build_model(TINY[name], 12, 12))


@pytest.mark.parametrize("method", ["greedy", "beam", "sample"])
def test_outputs_stop_within_learned_positions(method):
    """A limit a·n + b beyond a Transformer's learned positions must end the output at the
    last position instead of failing on an unseen one."""
    torch.manual_seed(0)
    cfg = ModelConfig(arch="transformer", transformer=TransformerConfig(
        d_model=16, heads=2, enc_layers=1, dec_layers=1, ffn_dim=32, dropout=0.0,
        positions="learned", max_positions=8, share_embeddings=False))
    model = build_model(cfg, 12, 12).eval()
    assert model.max_target_len == 8
    with torch.no_grad():  # an untrained model that never says EOS: it runs to the limit
        model.generator.bias[EOS_ID] = -1e4
    batch = collate([[5, 6, 7], [8, 9, 10, 11, 5]], None, [0, 1])
    dcfg = DecodeConfig(method=method, beam_size=2, max_len_a=10.0, max_len_b=10)
    for nbest in decode_batch(model, batch, dcfg):
        assert all(len(h.tokens) == 7 for h in nbest)  # 7 tokens + EOS fill 8 positions


@pytest.mark.parametrize("v", [64 * 40, 64 * 40 + 1, 64 * 47 + 63, 3000])
@pytest.mark.parametrize("width", [1, 4, 10])
def test_row_topk_equals_torch_topk(v, width):
    """The chunked top-k of the beam step gives torch's values and columns, including when the
    vocabulary ends in a partial chunk, rows of -inf, and rows whose best values lie in the
    columns the partial chunk's window shares with the chunk before it."""
    g = torch.Generator().manual_seed(v + width)
    x = torch.randn(50, v, generator=g)
    n = v // CHUNK
    x[1] = -math.inf
    x[2, : v - 3] = -math.inf  # fewer finite values than `width` (for width 10)
    x[3, n * CHUNK - 20: n * CHUNK] += 100.0  # the best in the shared columns
    x[4, n * CHUNK:] += 100.0  # the best in the partial chunk
    x[5, ::CHUNK] += 100.0  # one best value in every chunk
    val, col = row_topk(x, width)
    ref = x.topk(width, dim=1)
    assert torch.equal(val, ref.values)
    finite = torch.isfinite(ref.values)
    assert torch.equal(col[finite], ref.indices[finite])
    assert torch.equal(x.gather(1, col), val)
    for r in range(x.size(0)):  # no column twice in a row
        assert col[r].unique().numel() == width


def test_beam_search_same_with_plain_topk(monkeypatch):
    """A vocabulary large enough for the chunked top-k (a partial last chunk too): beam
    search finds what it finds with torch's top-k."""
    torch.manual_seed(0)
    cfg_t = ModelConfig(arch="transformer", transformer=TransformerConfig(
        d_model=16, heads=2, enc_layers=1, dec_layers=1, ffn_dim=32, dropout=0.0,
        share_embeddings=False))
    model = build_model(cfg_t, 50, 64 * 45 + 7).eval()
    batch = collate([[5, 6, 7], [8, 9, 10, 11, 5], [12, 13]], None, [0, 1, 2])
    dcfg = DecodeConfig(method="beam", beam_size=5, nbest=3, max_len_a=1.0, max_len_b=6)
    chunked = decode_batch(model, batch, dcfg)
    calls = []
    monkeypatch.setattr(beam_module, "row_topk",
                        lambda x, w: calls.append(w) or x.topk(w, dim=1))
    plain = decode_batch(model, batch, dcfg)
    assert calls and chunked and len(chunked) == 3
    assert_same(chunked, plain)
