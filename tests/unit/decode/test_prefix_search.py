"""Target prefixes in every search: the prefix is kept verbatim, scored by the model, given
its attention, and what follows is what the search finds given it (compared with forced
decoding of the prefix and a greedy continuation computed step by step here)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from mtkit.config import DecodeConfig
from mtkit.data.batch import collate
from mtkit.decode import Prefix, decode_batch, forced
from mtkit.models.vocab import BOS_ID, EOS_ID, PAD_ID
from tests.unit.decode.test_search import SOURCES, TINY, ToyGRU, assert_same

torch.set_num_threads(1)

PREFIXES = [[9, 9, 4], [7], [], [5, 11], [10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10]]


def decode(model, sources, cfg, prefixes=None, need_attn=True):
    batch = collate(sources, None, range(len(sources)))
    return decode_batch(model, batch, cfg, need_attn=need_attn,
                        prefix=None if prefixes is None else Prefix.of(prefixes))


def greedy_after(model, src: list[int], prefix: list[int], limit: int) -> list[int]:
    """The greedy continuation of `prefix`, one teacher-forced pass per token."""
    out = list(prefix)
    while len(out) < limit:
        batch = collate([src], [out], [0])
        logits = model.forward(batch.src, batch.src_lens, batch.tgt_in).logits[0, -1]
        logits[[PAD_ID, BOS_ID]] = -float("inf")
        tok = int(logits.argmax())
        if tok == EOS_ID:
            break
        out.append(tok)
    return out


@pytest.mark.parametrize("method", ["greedy", "beam", "sample"])
def test_prefix_is_kept_verbatim_and_scored_by_the_model(method):
    model = ToyGRU(seed=2).eval()
    cfg = DecodeConfig(method=method, beam_size=3, nbest=1 if method == "greedy" else 3,
                       max_len_b=4, length_penalty="none")
    srcs = [s or [5] for s in SOURCES]
    out = decode(model, srcs, cfg, PREFIXES)
    for prefix, hyps in zip(PREFIXES, out, strict=True):
        assert hyps
        for h in hyps:
            assert h.tokens[: len(prefix)] == prefix
    # the reported log-probs and attention of prefix and continuation are the model's own
    check_forced_on(model, srcs, out)


def check_forced_on(model, srcs, nbest) -> None:
    flat_src = [s for s, hs in zip(srcs, nbest, strict=True) for _ in hs]
    hyps = [h for hs in nbest for h in hs]
    scored = forced(model, collate(flat_src, [h.tokens for h in hyps], range(len(hyps))))
    for h, f in zip(hyps, scored, strict=True):
        assert f.token_logprobs == pytest.approx(h.token_logprobs, abs=1e-4)
        assert h.attn is not None and h.attn.size(0) == len(h.tokens) + 1
        torch.testing.assert_close(f.attn, h.attn, atol=1e-4, rtol=1e-4)


def test_greedy_continues_the_prefix_as_the_model_scores_best():
    model = ToyGRU(seed=4).eval()
    cfg = DecodeConfig(method="greedy", max_len_b=6, max_len_a=1.0)
    srcs = [s or [5] for s in SOURCES]
    for src, prefix in zip(srcs, PREFIXES, strict=True):
        [[h]] = decode(model, [src], cfg, [prefix])
        limit = max(cfg.output_limit(len(src)), len(prefix))
        assert h.tokens == greedy_after(model, src, prefix, limit)


def test_beam_with_a_prefix_beats_or_ties_greedy_and_beam_one_is_greedy():
    model = ToyGRU(seed=3).eval()
    base = DecodeConfig(max_len_b=6, length_penalty="none")
    srcs = [s or [5] for s in SOURCES]
    g = decode(model, srcs, dataclasses.replace(base, method="greedy"), PREFIXES)
    b1 = decode(model, srcs, dataclasses.replace(base, method="beam", beam_size=1), PREFIXES)
    assert_same(g, b1)
    b5 = decode(model, srcs, dataclasses.replace(base, beam_size=5, nbest=5), PREFIXES)
    for hs, [gh], prefix in zip(b5, g, PREFIXES, strict=True):
        assert hs[0].score >= gh.score - 1e-5
        assert all(h.tokens[: len(prefix)] == prefix for h in hs)
        assert len({tuple(h.tokens) for h in hs}) == len(hs)


def test_a_batch_with_prefixes_equals_one_sentence_at_a_time():
    model = ToyGRU(seed=5).eval()
    srcs = [s or [5] for s in SOURCES]
    for cfg in (DecodeConfig(method="greedy", max_len_b=5),
                DecodeConfig(beam_size=3, nbest=2, max_len_b=5)):
        together = decode(model, srcs, cfg, PREFIXES)
        alone = [decode(model, [s], cfg, [p])[0] for s, p in zip(srcs, PREFIXES, strict=True)]
        assert_same(together, alone)


def test_no_prefix_and_empty_prefixes_change_nothing():
    model = ToyGRU(seed=1).eval()
    for cfg in (DecodeConfig(method="greedy", max_len_b=5),
                DecodeConfig(beam_size=4, nbest=3, max_len_b=5),
                DecodeConfig(method="sample", nbest=2, max_len_b=5, seed=3)):
        plain = decode(model, SOURCES, cfg)
        assert_same(plain, decode(model, SOURCES, cfg, [[] for _ in SOURCES]))


def test_a_prefix_longer_than_the_limit_raises_it():
    model = ToyGRU(seed=1).eval()
    cfg = DecodeConfig(method="greedy", max_len_a=0.0, max_len_b=2)
    [[h]] = decode(model, [[5, 6]], cfg, [[9, 9, 9, 9]])
    assert h.tokens == [9, 9, 9, 9]  # the prefix, then EOS at the raised limit


@pytest.mark.parametrize("name", ["transformer", "gru-bahdanau-additive"])
def test_real_models_keep_prefixes_with_every_search(name):
    from mtkit.models.build import build_model

    torch.manual_seed(0)
    model = build_model(TINY[name], 12, 12).eval()
    srcs = [s or [5] for s in SOURCES]
    for cfg in (DecodeConfig(method="greedy", max_len_b=5),
                DecodeConfig(beam_size=3, nbest=3, max_len_b=5)):
        out = decode(model, srcs, cfg, PREFIXES)
        for prefix, hs in zip(PREFIXES, out, strict=True):
            assert all(h.tokens[: len(prefix)] == prefix for h in hs)
        check_forced_on(model, srcs, out)


@pytest.mark.parametrize("method", ["greedy", "beam", "sample"])
def test_new_word_after_a_prefix_bans_the_continuing_tokens_right_after_it(method):
    model = ToyGRU(seed=2).eval()
    cfg = DecodeConfig(method=method, beam_size=3, nbest=1 if method == "greedy" else 3,
                       max_len_b=6, length_penalty="none")
    srcs = [s or [5] for s in SOURCES]
    plain = decode(model, srcs, cfg, PREFIXES)
    banned = [p[len(pre)] for pre, hs in zip(PREFIXES, plain, strict=True) for h in hs[:1]
              for p in [h.tokens] if len(p) > len(pre)]
    continuing = torch.zeros(12, dtype=torch.bool)
    continuing[banned] = True  # every token the plain search chose right after a prefix
    out = decode_batch(model, collate(srcs, None, range(len(srcs))), cfg, need_attn=True,
                       prefix=Prefix.of(PREFIXES, [True] * len(PREFIXES)),
                       continuing=continuing)
    for pre, hs in zip(PREFIXES, out, strict=True):
        for h in hs:
            assert h.tokens[: len(pre)] == pre
            assert len(h.tokens) == len(pre) or not continuing[h.tokens[len(pre)]]
    assert any(h.tokens != p.tokens for hs, ps in zip(out, plain, strict=True)
               for h, p in zip(hs, ps, strict=False))
    check_forced_on(model, srcs, out)  # the model's log-probs still


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_new_word_bans_only_in_the_rows_that_ask_for_it(method):
    model = ToyGRU(seed=2).eval()
    cfg = DecodeConfig(method=method, beam_size=3, nbest=1 if method == "greedy" else 3,
                       max_len_b=6, length_penalty="none")
    srcs = [s or [5] for s in SOURCES]
    plain = decode(model, srcs, cfg, PREFIXES)
    marked = [i % 2 == 0 for i in range(len(PREFIXES))]
    continuing = torch.ones(12, dtype=torch.bool)  # every token continues a word...
    continuing[EOS_ID] = False  # ...but EOS: a marked row's prefix is the whole output
    out = decode_batch(model, collate(srcs, None, range(len(srcs))), cfg, need_attn=True,
                       prefix=Prefix.of(PREFIXES, marked), continuing=continuing)
    for pre, hs, ps, mark in zip(PREFIXES, out, plain, marked, strict=True):
        if mark:
            assert all(h.tokens == pre for h in hs)
        else:
            assert_same([hs], [ps])
