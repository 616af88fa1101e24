"""The refilling beam search (`BeamStepper`): sentences that join a batch under way, at any
step, get what each gets decoded alone (`decode_batch` of that one sentence), for beam and
greedy search, attention included; models without a per-row clock decline."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from mtkit.config import DecodeConfig, ModelConfig, TransformerConfig
from mtkit.data.batch import collate
from mtkit.decode import decode_batch, output_limits
from mtkit.decode.refill import BeamStepper
from tests.helpers import tiny_model

torch.set_num_threads(1)

V = 12
TRANSFORMER = ModelConfig(arch="transformer", transformer=TransformerConfig(
    d_model=16, heads=2, enc_layers=2, dec_layers=2, ffn_dim=32, dropout=0.0))


def _sources(n: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(3)
    lens = [2, 9, 4, 14, 3, 7, 1, 11, 5, 6][:n]
    return [torch.randint(4, V, (k,), generator=g).tolist() for k in lens]


def _alone(model, src: list[int], cfg: DecodeConfig):
    return decode_batch(model, collate([src], None, [0]), cfg, need_attn=True)[0]


def _refilled(model, sources: list[list[int]], cfg: DecodeConfig, joins: list[tuple[int, int]]):
    """Decode `sources` with one stepper: joins[i] = (step, how many) sentences join at that
    step (counted in `step` calls); returns each sentence's hypotheses and the order they
    finished in."""
    stepper = BeamStepper(model, cfg, need_attn=True)
    got, order, nxt, calls = {}, [], 0, 0
    plan = dict(joins)
    while nxt < len(sources) or stepper.size:
        if calls in plan or not stepper.size:
            n = plan.get(calls, 1)
            ids = list(range(nxt, min(nxt + n, len(sources))))
            batch = collate([sources[i] for i in ids], None, ids)
            stepper.join(model.encode(batch.src, batch.src_lens),
                         output_limits(model, batch, cfg), [int(i) for i in batch.ids])
            nxt += len(ids)
        for handle, hyps in stepper.step():
            got[handle] = hyps
            order.append(handle)
        calls += 1
    return got, order


@pytest.mark.parametrize("method", ["beam", "greedy"])
def test_joined_rows_equal_decoding_alone(method):
    model = tiny_model(TRANSFORMER, V, seed=1)
    cfg = DecodeConfig(method=method, beam_size=4, nbest=2 if method == "beam" else 1,
                       max_len_a=1.0, max_len_b=3, min_len=1)
    sources = _sources(10)
    got, _ = _refilled(model, sources, cfg, [(0, 3), (2, 2), (3, 1), (7, 3)])
    assert sorted(got) == list(range(10))
    for i, src in enumerate(sources):
        want = _alone(model, src, cfg)
        assert [h.tokens for h in got[i]] == [h.tokens for h in want], i
        for g, w in zip(got[i], want, strict=True):
            assert g.score == pytest.approx(w.score, abs=1e-5)
            torch.testing.assert_close(torch.tensor(g.token_logprobs),
                                       torch.tensor(w.token_logprobs), atol=1e-5, rtol=0)
            torch.testing.assert_close(g.attn, w.attn, atol=1e-5, rtol=0)
            assert g.attn.shape == (len(g.tokens) + 1, len(src) + 1)  # EOS on both


def test_a_short_sentence_that_joins_late_leaves_first():
    model = tiny_model(TRANSFORMER, V, seed=1)
    cfg = DecodeConfig(method="greedy", max_len_a=0.0, max_len_b=2)
    long = dataclasses.replace(cfg, max_len_b=30)
    stepper = BeamStepper(model, long)
    for handle, src, c in [("long", [5] * 12, long), ("short", [6, 7], cfg)]:
        batch = collate([src], None, [0])
        stepper.join(model.encode(batch.src, batch.src_lens), output_limits(model, batch, c),
                     [handle])
        assert stepper.step() == []
    finished = []
    while stepper.size:
        finished += [h for h, _ in stepper.step()]
    assert finished == ["short", "long"]


def test_models_without_a_per_row_clock_decline():
    rnn = tiny_model(ModelConfig(arch="rnn"), V)
    assert not rnn.joins and tiny_model(TRANSFORMER, V).joins
    with pytest.raises(AssertionError):
        BeamStepper(rnn, DecodeConfig())
