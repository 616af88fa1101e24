"""A trained mtkit Transformer as a CTranslate2 `TransformerSpec`, through CTranslate2's public
spec API (``ctranslate2.specs``), weight for weight.

Why the mapping is exact:
- mtkit's fused self-attention projection (q, k, v stacked, 3d rows) and its cross-attention's
  separate query (d) and fused key/value (2d) projections are the layouts CTranslate2's
  ``MultiHeadAttentionSpec.linear`` lists hold (self: [qkv, out]; cross: [q, kv, out]).
- Sublayer norms map one to one: mtkit's norms[0..2] are CTranslate2's self-attention,
  encoder-attention and feed-forward ``layer_norm``; pre-norm stacks keep a final norm,
  post-norm stacks have none (``pre_norm=False`` creates none).
- Embeddings are scaled by √d in both, or in neither (``scale_embeddings``). Positions are
  written as a table: mtkit's sinusoids interleave sin/cos (Vaswani et al. 2017, §3.5) or lay
  them out in halves (Marian's), CTranslate2's built-in ones may not match, so the table is
  always given explicitly; row 0 is the first token in both.
- Activations: relu, gelu and swish are CTranslate2's RELU, GELU and SWISH.
- LayerNorm epsilon is torch's (1e-5), recorded in the model's config.
- Alignment: CTranslate2 averages the *first* `alignment_heads` heads of `alignment_layer`.
  A mean over all heads is all heads; a single chosen head k is moved to position 0 by
  permuting that layer's cross-attention heads (query/key/value rows and output columns),
  which leaves the layer's output unchanged.

Shapes: d model size, h heads, dh = d / h, V vocabulary, P position rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from mtkit.config import TransformerConfig
from mtkit.export.engine import ctranslate2
from mtkit.models.embedding import sinusoids
from mtkit.models.transformer import CrossAttention, Transformer
from mtkit.models.vocab import BOS_ID, EOS_ID, UNK_ID

LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, which every mtkit norm uses


@dataclass(frozen=True)
class Vocabularies:
    """Pieces in id order (id i is entry i), for the source and the target side."""

    src: list[str]
    tgt: list[str]


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy().copy()


def _linear(spec, layer: nn.Linear) -> None:
    spec.weight = _np(layer.weight)
    spec.bias = _np(layer.bias)


def _norm(spec, norm: nn.LayerNorm) -> None:
    spec.gamma = _np(norm.weight)
    spec.beta = _np(norm.bias)


def _head_rows(w: torch.Tensor, perm: list[int], heads: int) -> torch.Tensor:
    """w (h*dh, ...) with its head blocks of rows in the order `perm`."""
    blocks = w.chunk(heads, 0)
    return torch.cat([blocks[i] for i in perm], 0)


def _cross_attention(spec, attn: CrossAttention, first_head: int | None) -> None:
    """CTranslate2's encoder-attention [q, kv, out]; head `first_head` moved to position 0."""
    q_w, q_b = attn.q.weight, attn.q.bias
    kv_w, kv_b, out_w = attn.kv.weight, attn.kv.bias, attn.out.weight
    if first_head:  # 0 or None: no permutation needed
        h = attn.heads
        perm = [first_head, *(i for i in range(h) if i != first_head)]
        q_w, q_b = _head_rows(q_w, perm, h), _head_rows(q_b, perm, h)
        kv_w = torch.cat([_head_rows(part, perm, h) for part in kv_w.chunk(2, 0)], 0)
        kv_b = torch.cat([_head_rows(part, perm, h) for part in kv_b.chunk(2, 0)], 0)
        out_w = _head_rows(out_w.t(), perm, h).t()
    spec.linear[0].weight, spec.linear[0].bias = _np(q_w), _np(q_b)
    spec.linear[1].weight, spec.linear[1].bias = _np(kv_w), _np(kv_b)
    spec.linear[2].weight, spec.linear[2].bias = _np(out_w), _np(attn.out.bias)


def _self_attention(spec, attn) -> None:
    _linear(spec.linear[0], attn.qkv)
    _linear(spec.linear[1], attn.out)


def _ffn(spec, ffn) -> None:
    _linear(spec.linear_0, ffn.inner)
    _linear(spec.linear_1, ffn.outer)


def _positions(embed, rows: int) -> np.ndarray:
    """(P, d) position table: the learned one, or mtkit's sinusoids for `rows` positions."""
    if embed.learned is not None:
        return _np(embed.learned.weight)
    return _np(sinusoids(rows, embed.tokens.embedding_dim, halves=embed.halves))


def _encoder(spec, model: Transformer, rows: int) -> None:
    spec.embeddings[0].weight = _np(model.src_embed.tokens.weight)
    spec.position_encodings.encodings = _positions(model.src_embed, rows)
    for ls, layer in zip(spec.layer, model.encoder.layers, strict=True):
        _norm(ls.self_attention.layer_norm, layer.norms[0])
        _self_attention(ls.self_attention, layer.self_attn)
        _norm(ls.ffn.layer_norm, layer.norms[1])
        _ffn(ls.ffn, layer.ffn)
    if hasattr(spec, "layer_norm"):  # pre-norm: the stack's final norm
        _norm(spec.layer_norm, model.encoder.norm)


def _decoder(spec, model: Transformer, rows: int) -> None:
    spec.embeddings.weight = _np(model.tgt_embed.tokens.weight)
    spec.position_encodings.encodings = _positions(model.tgt_embed, rows)
    for i, (ls, layer) in enumerate(zip(spec.layer, model.decoder.layers, strict=True)):
        _norm(ls.self_attention.layer_norm, layer.norms[0])
        _self_attention(ls.self_attention, layer.self_attn)
        _norm(ls.attention.layer_norm, layer.norms[1])
        first = model.align_head if i == model.align_layer else None
        _cross_attention(ls.attention, layer.cross_attn, first)
        _norm(ls.ffn.layer_norm, layer.norms[2])
        _ffn(ls.ffn, layer.ffn)
    if hasattr(spec, "layer_norm"):
        _norm(spec.layer_norm, model.decoder.norm)
    _linear(spec.projection, model.generator)


def transformer_spec(model: Transformer, cfg: TransformerConfig, vocab: Vocabularies, *,
                     position_rows: int):
    """A `ctranslate2.specs.TransformerSpec` holding `model`'s float32 weights.

    cfg: the model's recipe section (norm, activation, positions); vocab: pieces in id order;
    position_rows: rows of the sinusoidal table to write (the longest sequence the exported
    model may see; learned positions always give their max_positions rows).
    """
    specs = ctranslate2().specs
    act = {"gelu": specs.Activation.GELU, "swish": specs.Activation.SWISH,
           "relu": specs.Activation.RELU}[cfg.activation]
    pre = cfg.norm == "pre"
    heads_for_alignment = 1 if model.align_head is not None else cfg.heads
    spec = specs.TransformerSpec(
        specs.TransformerEncoderSpec(cfg.enc_layers, cfg.heads, pre_norm=pre, activation=act),
        specs.TransformerDecoderSpec(cfg.dec_layers, cfg.heads, pre_norm=pre, activation=act,
                                     alignment_layer=model.align_layer,
                                     alignment_heads=heads_for_alignment))
    _encoder(spec.encoder, model, position_rows)
    _decoder(spec.decoder, model, position_rows)
    spec.encoder.scale_embeddings = spec.decoder.scale_embeddings = cfg.scale_embeddings
    conf = spec.config
    conf.layer_norm_epsilon = LAYER_NORM_EPS
    conf.unk_token, conf.bos_token = vocab.tgt[UNK_ID], vocab.tgt[BOS_ID]
    conf.eos_token, conf.decoder_start_token = vocab.tgt[EOS_ID], vocab.tgt[BOS_ID]
    # The engine ends every source with `</s>`, as CTranslate2's fairseq and Marian exports do
    # (then it returns attention without that column, which mtkit's aligner drops anyway).
    conf.add_source_eos = True
    spec.register_source_vocabulary(vocab.src)
    spec.register_target_vocabulary(vocab.tgt)
    return spec
