"""The model interface's invariants, for every RNN cell × placement × attention and the
Transformer: stepping equals teacher forcing, padding changes nothing, attention rows are
distributions that are exactly zero on padding, reordering a state commutes with stepping, and
the state contract of `mtkit.models.base`: a step with `order` equals stepping the reordered
state, and `reorder` copies, so a copy can be stepped apart from its original."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from mtkit.config import ModelConfig, RNNConfig, TransformerConfig
from mtkit.config.attention import HardAttentionConfig
from mtkit.errors import ConfigError, MtkitError
from mtkit.models import kv_cache
from mtkit.models.base import VOCABULARY_PARTS, AttentionChoice, reorder
from mtkit.models.build import build_model
from mtkit.models.rnn import rnn_step
from mtkit.models.vocab import BOS_ID, PAD_ID
from tests.helpers import tiny_model

torch.set_num_threads(1)

SRC_V, TGT_V = 23, 29
ATTENTIONS = ["none", "dot", "general", "concat", "additive", "scaled_dot", "cosine", "location",
              "local-m", "local-p"]
LUONG_ONLY = ("location", "local-m", "local-p")


def _rnn_cases() -> list[tuple[str, RNNConfig]]:
    """Every valid cell × placement (× input feeding) × attention; the other switches
    (bidirectional, bridge/zeros, tied output) rotate so each appears with every cell."""
    cases = []
    combos = [(p, a, f) for p in ("bahdanau", "luong") for a in ATTENTIONS
              for f in ((True,) if p == "bahdanau" else (True, False))
              if not (p == "bahdanau" and a in LUONG_ONLY)]
    for cell, (i, (placement, attention, feed)) in itertools.product(
            ("lstm", "gru", "rnn"), enumerate(combos)):
        cfg = RNNConfig(cell=cell, emb_dim=8, hidden_dim=6, enc_layers=2, dec_layers=2,
                        bidirectional=i % 2 == 0, dropout=0.1, attention=attention, attn_dim=5,
                        local_window=2, placement=placement, input_feeding=feed,
                        init="bridge" if i % 3 else "zeros", tie_embeddings=i % 4 == 1,
                        max_positions=16)
        name = f"{cell}-{placement}{'' if feed else '-nofeed'}-{attention}"
        cases.append((name, cfg))
    return cases


TRANSFORMERS = {
    "tf-pre-sin-shared": TransformerConfig(d_model=16, heads=2, enc_layers=2, dec_layers=3,
                                           ffn_dim=24, norm="pre", share_embeddings=True),
    "tf-post-learned": TransformerConfig(d_model=16, heads=4, enc_layers=2, dec_layers=2,
                                         ffn_dim=24, norm="post", positions="learned",
                                         max_positions=32, share_embeddings=False,
                                         align_layer=0, align_head=1, activation="gelu"),
}
CASES = {name: ModelConfig(arch="rnn", rnn=cfg) for name, cfg in _rnn_cases()}
CASES.update({name: ModelConfig(arch="transformer", transformer=cfg)
              for name, cfg in TRANSFORMERS.items()})
# Hard attention and the sparse normalisers keep every invariant below (one-hot rows included).
_SMALL = {"emb_dim": 8, "hidden_dim": 6, "attn_dim": 5, "dropout": 0.1, "max_positions": 16}
CASES.update({
    "gru-bahdanau-additive-hard": ModelConfig(arch="rnn", rnn=RNNConfig(
        **_SMALL, hard=HardAttentionConfig(estimator="reinforce"))),
    "lstm-luong-nofeed-general-hard-exact": ModelConfig(arch="rnn", rnn=RNNConfig(
        **_SMALL, cell="lstm", attention="general", placement="luong", input_feeding=False,
        hard=HardAttentionConfig(estimator="exact"))),
    "gru-luong-local-p-entmax15": ModelConfig(arch="rnn", attention_normalizer="entmax15",
                                              rnn=RNNConfig(**_SMALL, attention="local-p",
                                                            local_window=2, placement="luong")),
    "tf-pre-sin-shared-sparsemax": ModelConfig(arch="transformer",
                                               attention_normalizer="sparsemax",
                                               transformer=TRANSFORMERS["tf-pre-sin-shared"]),
})


def _model(cfg: ModelConfig, seed: int = 0):
    shared = cfg.arch == "transformer" and cfg.transformer.share_embeddings
    return tiny_model(cfg, SRC_V, SRC_V if shared else TGT_V, seed=seed)


def _batch(seed: int = 0):
    """src (4, 7) with lengths 7, 3, 5, 2 (EOS-free random ids are fine here); tgt_in (4, 6)
    starting with BOS, padded after target lengths 6, 2, 4, 5."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.tensor([7, 3, 5, 2])
    src = torch.randint(4, SRC_V, (4, 7), generator=g)
    src[torch.arange(7) >= lens[:, None]] = PAD_ID
    tlens = torch.tensor([6, 2, 4, 5])
    tgt = torch.randint(4, SRC_V, (4, 6), generator=g)  # valid for shared vocabularies too
    tgt[:, 0] = BOS_ID
    tgt[torch.arange(6) >= tlens[:, None]] = PAD_ID
    return src, lens, tgt, tlens


def _step_all(model, src, lens, tgt, *, need_attn=True):
    enc = model.encode(src, lens)
    state = model.init_state(enc)
    logits, attn = [], []
    for t in range(tgt.size(1)):
        out = model.step(tgt[:, t], state, enc, need_attn=need_attn)
        state = out.state
        logits.append(out.logits.clone())  # valid until the next step (Translator.step)
        attn.append(out.attn)
    return torch.stack(logits, 1), None if attn[0] is None else torch.stack(attn, 1), state


@pytest.mark.parametrize("name", list(CASES))
@torch.no_grad()
def test_step_equals_teacher_forcing(name):
    model = _model(CASES[name])
    src, lens, tgt, _ = _batch()
    full = model(src, lens, tgt, return_attn=True)
    logits, attn, _ = _step_all(model, src, lens, tgt)
    assert full.logits.shape == (4, 6, model_vocab(model))
    torch.testing.assert_close(logits, full.logits, atol=1e-5, rtol=0)
    if model.has_attention:
        assert full.attn is not None and full.attn.shape == (4, 6, 7)
        torch.testing.assert_close(attn, full.attn, atol=1e-5, rtol=0)
    else:
        assert attn is None and full.attn is None
    quiet, no_attn, _ = _step_all(model, src, lens, tgt, need_attn=False)
    assert no_attn is None
    torch.testing.assert_close(quiet, logits, atol=1e-6, rtol=0)
    assert model(src, lens, tgt).attn is None


def model_vocab(model) -> int:
    return model.generator.out_features if hasattr(model, "generator") else \
        model.decoder.generator.out_features


@pytest.mark.parametrize("name", list(CASES))
@torch.no_grad()
def test_padding_invariance(name):
    """The shortest sentence alone gives what it gives inside a padded batch."""
    model = _model(CASES[name])
    src, lens, tgt, tlens = _batch()
    full = model(src, lens, tgt, return_attn=True)
    i = 3  # source length 2 of 7, target length 5 of 6
    alone = model(src[i:i + 1, :2], lens[i:i + 1], tgt[i:i + 1, :5], return_attn=True)
    torch.testing.assert_close(alone.logits[0], full.logits[i, :5], atol=1e-5, rtol=0)
    if model.has_attention:
        torch.testing.assert_close(alone.attn[0], full.attn[i, :5, :2], atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", [n for n in CASES if not n.endswith("-none")])
@torch.no_grad()
def test_attention_rows_are_distributions_exactly_zero_on_padding(name):
    model = _model(CASES[name])
    src, lens, tgt, _ = _batch()
    attn = model(src, lens, tgt, return_attn=True).attn
    pad = torch.arange(7) >= lens[:, None]  # (B, S)
    torch.testing.assert_close(attn.sum(-1), torch.ones(4, 6))
    assert (attn.masked_select(pad[:, None, :].expand_as(attn)) == 0).all()
    assert (attn >= 0).all()


def _stepped(model, enc, tgt, steps):
    """The state after feeding tgt[:, :steps]."""
    state = model.init_state(enc)
    for t in range(steps):
        state = model.step(tgt[:, t], state, enc).state
    return state


def _kept(step):
    """A step whose logits outlive the next step (they may live in the state's memory:
    `Translator.step`)."""
    return dataclasses.replace(step, logits=step.logits.clone())


def _assert_same_steps(got, want):
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.logits, w.logits, atol=1e-5, rtol=0)
        assert (g.attn is None) == (w.attn is None)
        if w.attn is not None:
            torch.testing.assert_close(g.attn, w.attn, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", list(CASES))
@torch.no_grad()
def test_reorder_then_step_equals_stepping_the_reordered_batch(name):
    """Two further steps (the second reads all that the first left) equal decoding the
    reordered batch from the start; the rows all differ, so a field left unordered shows."""
    model = _model(CASES[name])
    src, lens, tgt, _ = _batch()
    enc = model.encode(src, lens)
    state = _stepped(model, enc, tgt, 2)
    idx = torch.tensor([2, 0, 0, 3, 1])  # reorders and tiles, as beam search does
    moved = reorder({**state, "sentinel": torch.arange(4)}, idx)
    assert torch.equal(moved.pop("sentinel"), idx)
    enc_idx = enc.index_select(idx)
    got = [_kept(model.step(tgt[idx, 2], moved, enc_idx))]
    got.append(_kept(model.step(tgt[idx, 3], got[0].state, enc_idx)))

    enc2 = model.encode(src[idx], lens[idx])
    want = [_kept(model.step(tgt[idx, 2], _stepped(model, enc2, tgt[idx], 2), enc2))]
    want.append(_kept(model.step(tgt[idx, 3], want[0].state, enc2)))
    assert set(got[1].state) == set(want[1].state)
    _assert_same_steps(got, want)


# Orders a search passes to `step`: beam parents (reorder and duplicate rows), a beam that
# drops finished sentences (fewer rows), greedy dropping finished rows, a first beam step's
# tiling of each sentence into its beam (more rows).
ORDERS = {"beam": [2, 0, 0, 3], "beam-drop": [1, 1, 3], "greedy-drop": [0, 2, 3],
          "tile": [0, 0, 1, 1, 2, 2, 3, 3]}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("order", list(ORDERS))
@torch.no_grad()
def test_a_step_with_order_equals_stepping_the_reordered_state(name, order, monkeypatch):
    """What beam and greedy search pass: `order` fuses the reorder into the step (the
    Transformer gathers its cache straight into the spare buffer). Two-position buffers make
    the Transformer's cache outgrow them on the way."""
    monkeypatch.setattr(kv_cache, "GROW_BY", 2)
    model = _model(CASES[name])
    src, lens, tgt, _ = _batch()
    idx = torch.tensor(ORDERS[order])
    enc = model.encode(src, lens)
    state = _stepped(model, enc, tgt, 2)
    copy = reorder(state, torch.arange(4))  # `state` is spent by the fused step
    enc_idx = enc.index_select(idx)
    got = [_kept(model.step(tgt[idx, 2], state, enc_idx, order=idx))]
    want = [_kept(model.step(tgt[idx, 2], reorder(copy, idx), enc_idx))]
    for t in (3, 4):
        got.append(_kept(model.step(tgt[idx, t], got[-1].state, enc_idx)))
        want.append(_kept(model.step(tgt[idx, t], want[-1].state, enc_idx)))
    _assert_same_steps(got, want)


@pytest.mark.parametrize("name", ["gru-bahdanau-general", *TRANSFORMERS])
@torch.no_grad()
def test_reorder_copies_so_that_a_copy_can_go_on_apart(name):
    """A step may write into the memory of the state it was given, so a state is spent once
    stepped; to continue one prefix twice, copy it with `reorder`. If `reorder` shared memory
    with its input, the copy's step would overwrite the original's continuation."""
    model = _model(CASES[name])
    src, lens, tgt, _ = _batch()
    enc = model.encode(src, lens)
    state = _stepped(model, enc, tgt, 2)
    copy = reorder(state, torch.arange(4))
    for k, v in copy.items():
        if v.numel():
            assert v.untyped_storage().data_ptr() != state[k].untyped_storage().data_ptr(), k
    other = torch.full((4,), 9)
    first = model.step(tgt[:, 2], state, enc)
    second = model.step(other, copy, enc)  # writes into the copy's memory only
    after_first = model.step(tgt[:, 3], first.state, enc)
    after_second = model.step(tgt[:, 3], second.state, enc)
    full = model(src, lens, tgt)
    torch.testing.assert_close(after_first.logits, full.logits[:, 3], atol=1e-5, rtol=0)
    branched = tgt.clone()
    branched[:, 2] = other
    torch.testing.assert_close(after_second.logits, model(src, lens, branched).logits[:, 3],
                               atol=1e-5, rtol=0)


# --------------------------------------------------------------------------- RNN specifics


def _rnn(seed=0, **kw) -> ModelConfig:
    base = dict(cell="gru", emb_dim=8, hidden_dim=6, dropout=0.0, attention="general",
                attn_dim=5, placement="bahdanau")
    return ModelConfig(arch="rnn", rnn=RNNConfig(**{**base, **kw}))


@torch.no_grad()
@pytest.mark.parametrize("mode", ["GRU", "LSTM", "RNN_TANH", "RNN_RELU"])
def test_rnn_step_is_one_step_of_the_module(mode):
    """The cell-function step (used by the attending decoders) computes what a one-step call
    of the nn module computes, for every cell, in a 2-layer stack; with inter-layer dropout in
    training mode it drops units of the lower layer's output only."""
    torch.manual_seed(0)
    nonlinearity = {"RNN_RELU": "relu"}.get(mode, "tanh")
    cls = {"GRU": torch.nn.GRU, "LSTM": torch.nn.LSTM}.get(mode, torch.nn.RNN)
    kwargs = {"nonlinearity": nonlinearity} if cls is torch.nn.RNN else {}
    rnn = cls(5, 7, num_layers=2, batch_first=True, dropout=0.5, **kwargs).eval()
    x, h = torch.randn(3, 1, 5), torch.randn(2, 3, 7)
    hidden = (h, torch.randn(2, 3, 7)) if mode == "LSTM" else h
    want_out, want_hidden = rnn(x, hidden)
    out, got_hidden = rnn_step(rnn, x, hidden)
    torch.testing.assert_close(out, want_out, atol=1e-6, rtol=1e-5)
    for got, want in zip(got_hidden if mode == "LSTM" else [got_hidden],
                         want_hidden if mode == "LSTM" else [want_hidden], strict=True):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    rnn.train()  # the same dropout masks from the same seed: the same function in training
    torch.manual_seed(1)
    want_out, want_hidden = rnn(x, hidden)
    torch.manual_seed(1)
    out, got_hidden = rnn_step(rnn, x, hidden)
    torch.testing.assert_close(out, want_out, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(got_hidden, want_hidden, atol=1e-6, rtol=1e-5)
    torch.manual_seed(2)
    assert not torch.equal(rnn_step(rnn, x, hidden)[0], out)  # dropout is live


@torch.no_grad()
def test_bahdanau_scores_from_previous_state_luong_from_current():
    """Bahdanau's first attention is scored from s_0, before the first input is read; Luong's
    from s_1, after it. So only Luong's first weights depend on the first target token."""
    src, lens, _, _ = _batch()
    first = torch.full((4,), BOS_ID)
    other = torch.full((4,), 7)
    for placement, depends in (("bahdanau", False), ("luong", True)):
        model = _model(_rnn(placement=placement))
        enc = model.encode(src, lens)
        state = model.init_state(enc)
        a = model.step(first, state, enc).attn
        b = model.step(other, state, enc).attn
        assert torch.allclose(a, b) is not depends, placement


@torch.no_grad()
def test_input_feeding_carries_the_attentional_state():
    src, lens, tgt, _ = _batch()
    fed = _model(_rnn(placement="luong", input_feeding=True))
    plain = _model(_rnn(placement="luong", input_feeding=False))
    enc = fed.encode(src, lens)
    state = fed.step(tgt[:, 0], fed.init_state(enc), enc).state
    assert state["feed"].shape == (4, 6) and state["feed"].abs().sum() > 0
    assert "feed" not in plain.init_state(plain.encode(src, lens))
    # the fed decoder's recurrence reads h~_{t-1}: zeroing it changes the next step
    zeroed = {**state, "feed": torch.zeros_like(state["feed"])}
    assert not torch.allclose(fed.step(tgt[:, 1], state, enc).logits,
                              fed.step(tgt[:, 1], zeroed, enc).logits)


@torch.no_grad()
def test_none_has_no_attention_and_a_fixed_context():
    model = _model(_rnn(attention="none", init="zeros"))
    src, lens, tgt, _ = _batch()
    assert not model.has_attention
    enc = model.encode(src, lens)
    assert set(enc.extras) == {"final"}
    assert model.step(tgt[:, 0], model.init_state(enc), enc).attn is None
    with pytest.raises(MtkitError, match="attention: none"):
        model.choose_attention()
    # the source reaches the decoder through the final state alone
    other = enc.__class__(torch.randn_like(enc.memory), enc.src_mask, enc.extras)
    torch.testing.assert_close(model.step(tgt[:, 0], model.init_state(enc), other).logits,
                               model.step(tgt[:, 0], model.init_state(enc), enc).logits)


@torch.no_grad()
def test_encoder_packs_padding_out():
    model = _model(_rnn(bidirectional=True, enc_layers=2))
    src, lens, _, _ = _batch()
    enc = model.encode(src, lens)
    assert (enc.memory[~enc.src_mask] == 0).all()
    # the backward direction starts at the real last token: padding ids change nothing
    junk = src.clone()
    junk[~enc.src_mask] = 5
    torch.testing.assert_close(model.encode(junk, lens).memory, enc.memory)


@torch.no_grad()
def test_rnn_attention_maps():
    model = _model(_rnn(placement="luong", attention="local-p"))
    src, lens, tgt, _ = _batch()
    torch.testing.assert_close(model.attention_maps(src, lens, tgt, model.choose_attention()),
                               model(src, lens, tgt, return_attn=True).attn)
    with pytest.raises(MtkitError, match="an RNN model has no self-attention"):
        model.choose_attention("encoder")
    with pytest.raises(MtkitError, match="invalid choice 'self'; expected encoder or decoder"):
        model.choose_attention("self")
    with pytest.raises(MtkitError, match="^layer and head apply to Transformer"):
        model.choose_attention(layer=0)
    with pytest.raises(MtkitError, match="^layer and head apply to Transformer"):
        model.choose_attention(head="mean")


def test_tied_output_layer_shares_the_target_embedding():
    tied = _model(_rnn(tie_embeddings=True, placement="luong"))
    assert tied.decoder.generator.weight is tied.decoder.embed.weight
    untied = _model(_rnn(tie_embeddings=False, placement="luong"))
    saved = untied.parameter_counts()["total"] - tied.parameter_counts()["total"]
    # untied: own (V, Hd) output matrix; the readout (weights and bias) and the fed-back
    # output (the GRU's 3 gates' input weights of layer 0) are Hd wide instead of E
    emb, hidden = 8, 6  # _rnn's
    assert tuple(untied.decoder.generator.weight.shape) == (TGT_V, hidden)
    assert (tied.decoder.readout.out_features, untied.decoder.readout.out_features) == (
        emb, hidden)
    width = tied.decoder.readout.in_features
    assert saved == TGT_V * hidden + (hidden - emb) * (width + 1) + 3 * hidden * (hidden - emb)


def test_location_attention_rejects_sources_past_max_positions():
    model = _model(_rnn(placement="luong", attention="location", max_positions=4))
    src, lens, _, _ = _batch()
    with pytest.raises(MtkitError, match="max_positions"):
        model.encode(src, lens)


def test_dropout_is_live_in_training_mode_only():
    model = _model(_rnn(dropout=0.5, enc_layers=2, dec_layers=2))
    src, lens, tgt, _ = _batch()
    model.train()
    assert not torch.allclose(model(src, lens, tgt).logits, model(src, lens, tgt).logits)
    model.eval()
    torch.testing.assert_close(model(src, lens, tgt).logits, model(src, lens, tgt).logits)


# --------------------------------------------------------------------------- Transformer


def _tf(**kw) -> ModelConfig:
    base = dict(d_model=16, heads=2, enc_layers=2, dec_layers=2, ffn_dim=24, dropout=0.0,
                share_embeddings=False)
    return ModelConfig(arch="transformer", transformer=TransformerConfig(**{**base, **kw}))


@torch.no_grad()
def test_kv_cache_moves_between_two_buffers_cross_kv_computed_once():
    """The self-attention cache grows one position per step; once its two buffers are
    allocated, a step without reordering writes its position in place and a reordering step
    copies the cache into the other buffer: no allocation per step, which is what made the
    old torch.cat / index_select cache slow. On CPU the logits of every step are written into
    one buffer too, rows dropped or not."""
    model = _model(_tf())
    src, lens, tgt, _ = _batch()
    enc = model.encode(src, lens)
    assert enc.extras["cross_k1"].shape == (4, 2, 7, 8)
    state = model.init_state(enc)
    assert set(state) == {f"{kind}_{kv}{i}" for kind in ("self", "spare") for kv in "kv"
                          for i in (0, 1)} | {"spare_logits"}
    memory, logits = [], []
    for t in range(6):
        assert state["self_k0"].shape == (4, 2, t, 8)
        order = torch.tensor([1, 0, 3, 2]) if t % 2 else None  # beam-like swaps
        out = model.step(tgt[:, t], state, enc, order=order)
        state = out.state
        memory.append(state["self_k0"].untyped_storage().data_ptr())
        assert state["spare_k0"].untyped_storage().data_ptr() != memory[-1]
        logits.append(out.logits.untyped_storage().data_ptr())
    assert state["self_v1"].shape == (4, 2, 6, 8)
    a, b = memory[0], memory[1]  # the first step allocates a, the first reordering one b
    assert a != b and memory == [a, b, b, a, a, b]
    assert logits == [logits[0]] * 6
    dropped = model.step(tgt[:2, 0], state, enc.index_select(torch.tensor([0, 2])),
                         order=torch.tensor([0, 2]))
    assert dropped.logits.shape == (2, model_vocab(model))
    assert dropped.logits.untyped_storage().data_ptr() == logits[0]


@torch.no_grad()
def test_sinusoidal_positions_extend_past_max_positions_learned_refuse():
    src, lens, tgt, _ = _batch()
    model = _model(_tf(max_positions=4))
    full = model(src, lens, tgt)
    logits, _, _ = _step_all(model, src, lens, tgt)
    torch.testing.assert_close(logits, full.logits, atol=1e-5, rtol=0)
    learned = _model(_tf(max_positions=4, positions="learned"))
    with pytest.raises(MtkitError, match="max_positions"):
        learned(src, lens, tgt)


@torch.no_grad()
def test_transformer_attention_maps():
    model = _model(_tf(heads=4, dec_layers=3, align_layer=-2))
    src, lens, tgt, _ = _batch()
    pad = torch.arange(7) >= lens[:, None]

    def maps(*args, **kwargs):
        return model.attention_maps(src, lens, tgt, model.choose_attention(*args, **kwargs))

    # the default: the model's align_layer, head mean, what the search returns
    assert model.choose_attention() == AttentionChoice("cross", -2, "mean")
    cross = maps()
    torch.testing.assert_close(cross, model(src, lens, tgt, return_attn=True).attn)
    torch.testing.assert_close(cross, maps(layer=1, head="mean"))
    heads = torch.stack([maps(layer=1, head=h) for h in range(4)], 1)
    torch.testing.assert_close(heads.mean(1), cross)
    assert not torch.allclose(heads[:, 0], heads[:, 1])
    assert not torch.allclose(maps(layer=-1), cross)  # the top layer is another
    enc_self = maps("encoder", layer=0)
    assert enc_self.shape == (4, 7, 7)
    torch.testing.assert_close(enc_self.sum(-1), torch.ones(4, 7))
    assert (enc_self.masked_select(pad[:, None, :].expand_as(enc_self)) == 0).all()
    dec_self = maps("decoder", layer=-1, head=3)
    assert dec_self.shape == (4, 6, 6)
    assert (dec_self.triu(1) == 0).all() and (dec_self.diagonal(dim1=1, dim2=2) > 0).all()
    with pytest.raises(MtkitError, match="^layer 3: the model has 2 encoder layers"):
        model.choose_attention("encoder", layer=3)
    with pytest.raises(MtkitError, match="^head 4: the model has 4 heads"):
        model.choose_attention(head=4)


@torch.no_grad()
def test_layer_mean_is_the_mean_of_every_decoder_layers_cross_attention():
    model = _model(_tf(heads=4, dec_layers=3, align_layer=-1))
    src, lens, tgt, _ = _batch()
    pad = torch.arange(7) >= lens[:, None]
    choice = model.choose_attention(layer="mean")
    assert choice == AttentionChoice("cross", "mean", "mean")
    assert choice.describe() == "cross-attention, layer mean, head mean"
    mean = model.attention_maps(src, lens, tgt, choice)
    layers = [model.attention_maps(src, lens, tgt, model.choose_attention(layer=k))
              for k in range(3)]
    torch.testing.assert_close(mean, torch.stack(layers).mean(0))
    assert not any(torch.allclose(mean, w) for w in layers)  # not one layer's
    torch.testing.assert_close(mean.sum(-1), torch.ones(mean.shape[:2]))
    assert (mean.masked_select(pad[:, None, :].expand_as(mean)) == 0).all()
    one_head = model.attention_maps(src, lens, tgt, model.choose_attention(layer="mean", head=1))
    torch.testing.assert_close(one_head, torch.stack([model.attention_maps(
        src, lens, tgt, model.choose_attention(layer=k, head=1)) for k in range(3)]).mean(0))
    with pytest.raises(MtkitError, match="^layer mean: the mean over layers is read of the "
                       "cross-attention only"):
        model.choose_attention("encoder", layer="mean")
    with pytest.raises(MtkitError, match=r"^layer top: the model has 3 decoder layers"):
        model.choose_attention(layer="top")


@torch.no_grad()
def test_align_head_and_layer_choose_the_returned_attention():
    src, lens, tgt, _ = _batch()
    model = _model(_tf(heads=4, dec_layers=2, align_layer=0, align_head=2))
    attn = model(src, lens, tgt, return_attn=True).attn
    torch.testing.assert_close(attn, model.attention_maps(
        src, lens, tgt, model.choose_attention(layer=0, head=2)))
    assert not torch.allclose(attn, model.attention_maps(
        src, lens, tgt, model.choose_attention(layer=1, head=2)))


@pytest.mark.parametrize("which", ["dropout", "attn_dropout", "act_dropout"])
def test_each_transformer_dropout_is_used(which):
    model = _model(_tf(**{which: 0.5}))
    src, lens, tgt, _ = _batch()
    model.train()
    assert not torch.allclose(model(src, lens, tgt).logits, model(src, lens, tgt).logits)


def test_shared_embeddings_are_one_table_and_need_equal_vocabularies():
    model = _model(_tf(share_embeddings=True))
    assert model.src_embed.tokens is model.tgt_embed.tokens
    assert model.generator.weight is model.tgt_embed.tokens.weight
    with pytest.raises(ConfigError, match="joint vocabulary.*23.*29"):
        build_model(_tf(share_embeddings=True), SRC_V, TGT_V)


# --------------------------------------------------------------------------- construction


@pytest.mark.parametrize("cfg", [_rnn(tie_embeddings=True, placement="luong", cell="lstm"),
                                 _tf(share_embeddings=True)], ids=["rnn-tied", "tf-shared"])
def test_parameter_counts_add_up_with_shared_weights_counted_once(cfg):
    model = _model(cfg)
    counts = model.parameter_counts()
    unique = {id(p): p.numel() for p in model.parameters()}
    assert counts["total"] == sum(unique.values())
    assert sum(v for k, v in counts.items() if k != "total") == counts["total"]
    if cfg.arch == "transformer":  # the shared table counts under src_embed only
        assert counts["src_embed"] == SRC_V * 16
        assert counts["tgt_embed"] == 0 and counts["generator"] == SRC_V  # the bias


def test_build_model_names_the_valid_choices():
    bad = dataclasses.replace(_rnn(), arch="lstm")
    with pytest.raises(ConfigError, match="expected one of rnn, transformer"):
        build_model(bad, SRC_V, TGT_V)
    bad_att = ModelConfig(arch="rnn", rnn=dataclasses.replace(RNNConfig(), attention="mlp"))
    with pytest.raises(ConfigError, match="local-m, local-p"):
        build_model(bad_att, SRC_V, TGT_V)
    bad_cell = ModelConfig(arch="rnn", rnn=dataclasses.replace(RNNConfig(), cell="elman"))
    with pytest.raises(ConfigError, match="lstm, gru, rnn"):
        build_model(bad_cell, SRC_V, TGT_V)


@pytest.mark.parametrize("name", ["tf-pre-sin-shared", "tf-post-learned",
                                  "lstm-luong-general", "gru-bahdanau-additive"])
@torch.no_grad()
def test_a_model_built_around_weights_holds_those_tensors(name):
    """build_model(weights=...) (what loading a checkpoint uses): no random initialisation
    and no copy, the parameters are the given tensors, ties are kept, and the model computes
    what one built and then loaded computes."""
    cfg = CASES[name]
    trained = _model(cfg, seed=3)
    copies: dict[int, torch.Tensor] = {}  # a checkpoint stores a tied tensor once
    weights = {k: copies.setdefault(v.data_ptr(), v.clone())
               for k, v in trained.state_dict().items()}
    vocab = SRC_V, trained.state_dict()[next(k for k in weights if "generator" in k)].size(0)
    built = build_model(cfg, *vocab, weights=weights).eval()
    for key, value in built.state_dict().items():
        assert value.data_ptr() == weights[key].data_ptr(), key
    tied = [(n, p) for n, p in trained.named_parameters(remove_duplicate=False)]
    same = {n: id(p) for n, p in built.named_parameters(remove_duplicate=False)}
    for (a, pa), (b, pb) in itertools.combinations(tied, 2):
        assert (pa is pb) == (same[a] == same[b]), (a, b)
    assert built.parameter_counts() == trained.parameter_counts()
    src, lens, tgt, _ = _batch()
    torch.testing.assert_close(built(src, lens, tgt, return_attn=True).logits,
                               trained(src, lens, tgt, return_attn=True).logits)
    bad = {**weights, next(iter(weights)): torch.zeros(1)}
    with pytest.raises(RuntimeError):
        build_model(cfg, *vocab, weights=bad)


@pytest.mark.parametrize("name", ["gru-bahdanau-general", *TRANSFORMERS])
@torch.no_grad()
def test_expand_for_a_beam_equals_tiling_and_the_transformer_does_not_copy(name):
    """`expand(enc, k)` (what beam search reads the source through): stepping with it equals
    stepping with every row tiled k times, also after whole sentences are dropped. The
    Transformer groups instead of tiling: the k rows of a sentence query one copy."""
    model, k = _model(CASES[name]), 3
    src, lens, tgt, _ = _batch()
    enc = model.encode(src, lens)
    tiled = enc.index_select(torch.arange(4).repeat_interleave(k))
    expanded = model.expand(enc, k)
    if name in TRANSFORMERS:
        assert expanded.group == k
        assert expanded.extras["cross_k0"].data_ptr() == enc.extras["cross_k0"].data_ptr()
    rows = torch.arange(4 * k)
    got, want = model.init_state(expanded), model.init_state(tiled)
    for t in range(3):
        a, b = model.step(tgt[rows // k, t], got, expanded), model.step(tgt[rows // k, t], want,
                                                                         tiled)
        _assert_same_steps([a], [b])
        got, want = a.state, b.state
    keep = torch.tensor([0, 1, 2, 9, 10, 11])  # sentences 0 and 3, as a beam drops the others
    a = model.step(tgt[keep // k, 3], got, expanded.index_select(keep), order=keep)
    b = model.step(tgt[keep // k, 3], want, tiled.index_select(keep), order=keep)
    _assert_same_steps([a], [b])
    if name in TRANSFORMERS:  # rows that are not whole groups read another sentence's source
        with pytest.raises(AssertionError, match="whole groups"):
            expanded.index_select(torch.tensor([0, 1, 2, 4, 5, 6]))


def test_transformer_steps_under_autograd_and_gradients_flow():
    """The cache's writes into reused memory cannot be differentiated: under autograd a step
    allocates instead, with and without `order`, and gives the no-grad step's numbers."""
    model = _model(_tf())
    src, lens, tgt, _ = _batch()
    enc = model.encode(src, lens)
    state, total = model.init_state(enc), 0.0
    with torch.no_grad():
        quiet = _step_all(model, src, lens, tgt[:, :3])[0]
    for t in range(3):
        out = model.step(tgt[:, t], state, enc, order=torch.arange(4) if t == 2 else None)
        torch.testing.assert_close(out.logits, quiet[:, t], atol=1e-5, rtol=0)
        total = total + out.logits.logsumexp(-1).sum()
        state = out.state
    total.backward()
    assert model.decoder.layers[0].self_attn.qkv.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("name", list(CASES))
def test_vocabulary_parts_name_every_weight_a_vocabulary_sizes(name):
    """What `train --init-fresh` re-initializes: the weights sized by a vocabulary, and only
    those (the two vocabularies differ in size here)."""
    model = _model(CASES[name])
    params, parts = dict(model.named_parameters(remove_duplicate=False)), model.vocabulary_parts()
    assert list(parts) == list(VOCABULARY_PARTS)
    tgt = model_vocab(model)  # a joint vocabulary (tied embeddings): the source's
    size = {"src_embeddings": SRC_V, "tgt_embeddings": tgt, "output": tgt}
    named = {n: part for part, names in parts.items() for n in names}
    for n, p in params.items():
        assert (n in named) == (SRC_V in p.shape or TGT_V in p.shape), n
        assert n not in named or p.shape[0] == size[named[n]], n
