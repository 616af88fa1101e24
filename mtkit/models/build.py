"""`build_model`: the one place that maps architecture, cell and attention names to classes,
by explicit composition (in the manner of the Annotated Transformer's `make_model`).

Sizes are derived here: E embedding, H encoder hidden per direction, Hm = H or 2H memory,
Hd = H decoder hidden, D readout size (E when the output layer is tied, else Hd).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from mtkit.config import ModelConfig, RNNConfig, TransformerConfig
from mtkit.config.attention import Normalizer
from mtkit.errors import ConfigError
from mtkit.models.attention import (
    AdditiveAttention,
    Attention,
    CosineAttention,
    DotAttention,
    GeneralAttention,
    LocalAttention,
    LocationAttention,
)
from mtkit.models.base import Translator
from mtkit.models.embedding import ScaledEmbedding
from mtkit.models.hard import HardAttention
from mtkit.models.rnn import BahdanauDecoder, Bridge, LuongDecoder, RNNEncoder, RNNTranslator
from mtkit.models.transformer import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    FeedForward,
    Transformer,
)
from mtkit.models.vocab import PAD_ID


def build_model(model_cfg: ModelConfig, src_vocab: int, tgt_vocab: int, *,
                weights: Mapping[str, torch.Tensor] | None = None) -> Translator:
    """A freshly initialised model for `model_cfg.arch` with the given vocabulary sizes; or,
    given `weights` (a state dict, e.g. a checkpoint's), a model whose parameters are those
    very tensors (RuntimeError if they do not fit): they are not copied into the new model's,
    nor is mtkit's own initialisation run for them; both were a visible share of `mtkit
    translate`'s start-up (bench/RESULTS.md, "Figures behind the code's comments").

    (Building on the meta device would also save torch's default initialisation, but torch
    2.13 imports torch._dynamo, 2-3 s, to run `normal_` there, and 0.7 s of other modules
    under `torch.device("meta")`.)"""
    model = _build(model_cfg, src_vocab, tgt_vocab, init=weights is None)
    if weights is None:
        return model
    # Tied parameters (shared embeddings) are one object in the model; loading by `assign`
    # gives each name its own, so the ties are made again after it.
    first: dict[int, str] = {}
    ties = {name: first.setdefault(id(p), name)
            for name, p in model.named_parameters(remove_duplicate=False)}
    model.load_state_dict(weights, assign=True)
    for name, owner in ties.items():
        if name != owner:
            path, _, attr = name.rpartition(".")
            setattr(model.get_submodule(path), attr, model.get_parameter(owner))
    return model


def _build(model_cfg: ModelConfig, src_vocab: int, tgt_vocab: int, *, init: bool
           ) -> Translator:
    """The model; init False: parameters as torch's modules leave them, for weights that
    replace them all."""
    normalizer = model_cfg.attention_normalizer
    if model_cfg.arch == "rnn":
        return build_rnn(model_cfg.rnn, src_vocab, tgt_vocab, normalizer=normalizer)
    elif model_cfg.arch == "transformer":
        return build_transformer(model_cfg.transformer, src_vocab, tgt_vocab, init=init,
                                 normalizer=normalizer)
    raise ConfigError(f"model.arch: unknown architecture {model_cfg.arch!r}; "
                      "expected one of rnn, transformer")


# --------------------------------------------------------------------------- RNN


def _recurrent(cfg: RNNConfig, input_dim: int, hidden: int, layers: int, *,
               bidirectional: bool = False) -> nn.RNNBase:
    """A batch-first recurrent stack; dropout applies between its layers."""
    if cfg.cell == "lstm":
        cls: type[nn.RNNBase] = nn.LSTM
    elif cfg.cell == "gru":
        cls = nn.GRU
    elif cfg.cell == "rnn":
        cls = nn.RNN  # tanh
    else:
        raise ConfigError(f"model.rnn.cell: unknown cell {cfg.cell!r}; expected one of "
                          "lstm, gru, rnn")
    return cls(input_dim, hidden, num_layers=layers, batch_first=True,
               bidirectional=bidirectional, dropout=cfg.dropout if layers > 1 else 0.0)


def _attention(cfg: RNNConfig, query_dim: int, memory_dim: int,
               normalizer: Normalizer = "softmax") -> Attention | None:
    """The scoring module for `cfg.attention`, normalised by `normalizer`; None for the
    fixed-context baseline."""
    attention = _scores(cfg, query_dim, memory_dim)
    if attention is not None:
        attention.normalizer = normalizer
    return attention


def _scores(cfg: RNNConfig, query_dim: int, memory_dim: int) -> Attention | None:
    """The score function `cfg.attention`; None for the fixed-context baseline."""
    name = cfg.attention
    if name == "none":
        return None
    elif name == "dot":
        return DotAttention(query_dim, memory_dim, scaled=False)
    elif name == "scaled_dot":
        return DotAttention(query_dim, memory_dim, scaled=True)
    elif name == "general":
        return GeneralAttention(query_dim, memory_dim)
    elif name in ("additive", "concat"):
        return AdditiveAttention(query_dim, memory_dim, cfg.attn_dim)
    elif name == "cosine":
        return CosineAttention(query_dim, memory_dim)
    elif name == "location":
        return LocationAttention(query_dim, cfg.max_positions)
    elif name == "local-m":
        return LocalAttention(query_dim, memory_dim, cfg.local_window, predictive=False)
    elif name == "local-p":
        return LocalAttention(query_dim, memory_dim, cfg.local_window, predictive=True)
    raise ConfigError(f"model.rnn.attention: unknown attention {name!r}; expected one of "
                      "none, dot, general, concat, additive, scaled_dot, cosine, location, "
                      "local-m, local-p")


def build_rnn(cfg: RNNConfig, src_vocab: int, tgt_vocab: int, *,
              normalizer: Normalizer = "softmax") -> RNNTranslator:
    emb, hidden = cfg.emb_dim, cfg.hidden_dim
    memory_dim = hidden * (2 if cfg.bidirectional else 1)
    out_dim = emb if cfg.tie_embeddings else hidden
    encoder = RNNEncoder(nn.Embedding(src_vocab, emb, padding_idx=PAD_ID),
                         _recurrent(cfg, emb, hidden, cfg.enc_layers,
                                    bidirectional=cfg.bidirectional), cfg.dropout)
    tgt_embed = nn.Embedding(tgt_vocab, emb, padding_idx=PAD_ID)
    generator = nn.Linear(out_dim, tgt_vocab)
    if cfg.tie_embeddings:  # Press & Wolf 2017; Inan et al. 2017
        generator.weight = tgt_embed.weight
    attention = _attention(cfg, hidden, memory_dim, normalizer)
    hard = HardAttention(cfg.hard) if cfg.hard.enabled else None
    if cfg.placement == "bahdanau":
        decoder = BahdanauDecoder(
            tgt_embed, _recurrent(cfg, emb + memory_dim, hidden, cfg.dec_layers), attention,
            nn.Linear(hidden + memory_dim + emb, out_dim), generator, cfg.dropout, hard=hard)
    elif cfg.placement == "luong":
        rnn_in = emb + out_dim if cfg.input_feeding else emb
        decoder = LuongDecoder(
            tgt_embed, _recurrent(cfg, rnn_in, hidden, cfg.dec_layers), attention,
            nn.Linear(memory_dim + hidden, out_dim), generator, cfg.dropout,
            input_feeding=cfg.input_feeding, hard=hard)
    else:
        raise ConfigError(f"model.rnn.placement: unknown placement {cfg.placement!r}; "
                          "expected one of bahdanau, luong")
    if cfg.init == "bridge":
        bridge = Bridge(memory_dim, cfg.dec_layers, hidden, lstm=cfg.cell == "lstm")
    elif cfg.init == "zeros":
        bridge = None
    else:
        raise ConfigError(f"model.rnn.init: unknown init {cfg.init!r}; expected bridge, zeros")
    model = RNNTranslator(encoder, bridge, decoder)
    if cfg.attention == "location":
        model.max_source_len, model.source_len_key = cfg.max_positions, "model.rnn.max_positions"
    return model


# --------------------------------------------------------------------------- Transformer


def _token_embedding(vocab: int, d_model: int, init: bool) -> nn.Embedding:
    tokens = nn.Embedding(vocab, d_model, padding_idx=PAD_ID)
    if init:
        # N(0, d^-1/2): after the √d scaling the embeddings have unit variance, and a tied
        # output layer starts with logits of unit scale.
        nn.init.normal_(tokens.weight, std=d_model ** -0.5)
        nn.init.zeros_(tokens.weight[PAD_ID])
    return tokens


def build_transformer(cfg: TransformerConfig, src_vocab: int, tgt_vocab: int, *,
                      init: bool = True, normalizer: Normalizer = "softmax") -> Transformer:
    """The Transformer for `cfg`, its cross-attention normalised by `normalizer`; init
    False skips mtkit's initialisation (see `_build`)."""
    d = cfg.d_model
    if cfg.share_embeddings and src_vocab != tgt_vocab:
        raise ConfigError(f"model.transformer.share_embeddings needs one joint vocabulary, but "
                          f"the source has {src_vocab} entries and the target {tgt_vocab}; set "
                          "data.spm.joint: true or share_embeddings: false")
    src_tokens = _token_embedding(src_vocab, d, init)
    tgt_tokens = src_tokens if cfg.share_embeddings else _token_embedding(tgt_vocab, d, init)

    def embedding(tokens: nn.Embedding) -> ScaledEmbedding:
        return ScaledEmbedding(tokens, learned=cfg.positions == "learned",
                               max_positions=cfg.max_positions, dropout=cfg.dropout,
                               scaled=cfg.scale_embeddings,
                               halves=cfg.positions == "sinusoidal_halves")

    def ffn() -> FeedForward:
        return FeedForward(d, cfg.ffn_dim, cfg.activation, cfg.act_dropout)

    def final_norm() -> nn.Module:
        return nn.LayerNorm(d) if cfg.norm == "pre" else nn.Identity()

    pre = cfg.norm == "pre"
    encoder = Encoder([EncoderLayer(d, cfg.heads, ffn(), dropout=cfg.dropout,
                                    attn_dropout=cfg.attn_dropout, pre_norm=pre)
                       for _ in range(cfg.enc_layers)], final_norm())
    decoder = Decoder([DecoderLayer(d, cfg.heads, ffn(), dropout=cfg.dropout,
                                    attn_dropout=cfg.attn_dropout, pre_norm=pre,
                                    normalizer=normalizer)
                       for _ in range(cfg.dec_layers)], final_norm())
    generator = nn.Linear(d, tgt_vocab)
    model = Transformer(embedding(src_tokens), embedding(tgt_tokens), encoder, decoder,
                        generator, align_layer=cfg.align_layer, align_head=cfg.align_head)
    if init:
        _init_transformer(model, cfg)
    if cfg.share_embeddings:  # Press & Wolf 2017; Vaswani et al. 2017, §3.4
        generator.weight = tgt_tokens.weight
    if cfg.positions == "learned":
        model.max_target_len = model.max_source_len = cfg.max_positions
        model.source_len_key = "model.transformer.max_positions"
    return model


def _init_transformer(model: Transformer, cfg: TransformerConfig) -> None:
    """Xavier-uniform projections with zero biases (as the reference implementation);
    learned positions N(0, d^-1/2) like the token embeddings."""
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
    for emb in (model.src_embed, model.tgt_embed):
        if emb.learned is not None:
            nn.init.normal_(emb.learned.weight, std=cfg.d_model ** -0.5)
