"""Marian's layout (transformers' `MarianMTModel`) and mtkit's Transformer, name for name.

What a Marian model is, in mtkit's recipe fields (checked against transformers'
modeling_marian.py): post-norm layers (``norm: post``; no embedding layer norm and no final one,
which is what mtkit's post-norm stacks are), ``positions: sinusoidal_halves``,
``scale_embeddings`` from ``scale_embedding``, ``activation`` from ``activation_function``
(``swish``/``silu``, ``relu``, ``gelu``), and a bias on the output logits
(``final_logits_bias``: mtkit's output layer has its bias). Attention projections: Marian's
separate q, k, v become mtkit's fused ones (self-attention [q; k; v], cross-attention q and
[k; v]).

Ids. mtkit fixes pad 0, unk 1, bos 2, eos 3 (`mtkit.models.vocab`); Marian numbers
``</s>`` and ``<unk>`` first and ``<pad>`` last, and starts decoding from ``<pad>``
(``decoder_start_token_id``), whose embedding is zero. Each side's rows are put in mtkit's order:
mtkit's BOS row is Marian's start symbol (so the decoder starts from Marian's own start
embedding, and searches, which never produce BOS, never produce it), EOS and UNK are Marian's,
and the ordinary pieces follow in Marian's order. mtkit's PAD row is then one row more, which
no Marian row stands for (unless Marian's pad is not its start symbol): its embedding is zero,
as a padding row's is, and its output logit is `NEVER_LOGIT`, so that the softmax over the other
rows is Marian's to float32 precision. (A finite value, not -inf: label smoothing averages the
log-probabilities of every row, and -inf would make that infinite.) `MarianIds.order` holds, per
side, the Marian id of every mtkit id (None for that row); an export inverts it.

Shapes: d model size, V a side's vocabulary, F feed-forward size.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from mtkit.data.pieces import SPECIAL_PIECES, PieceTable
from mtkit.errors import MtkitError
from mtkit.models.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID

# The output logit of mtkit's extra PAD row: exp(-100) is 4e-44 of a logit of 0's mass, far
# below float32's resolution of any real distribution.
NEVER_LOGIT = -100.0
# transformers' activation names -> mtkit's `TransformerConfig.activation`
ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu"}


class ModelFolderError(MtkitError):
    """A model folder mtkit cannot import (a missing file, another architecture)."""


@dataclass(frozen=True)
class MarianIds:
    """Per side, the Marian id of each mtkit id (None: the extra PAD row), and the table of
    pieces by mtkit id."""

    src: tuple[int | None, ...]
    tgt: tuple[int | None, ...]
    table: PieceTable


def transformer_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    """`TransformerConfig` fields for a Marian config.json; ModelFolderError naming what mtkit's
    Transformer cannot hold."""
    bad = []
    for enc, dec in (("encoder_attention_heads", "decoder_attention_heads"),
                     ("encoder_ffn_dim", "decoder_ffn_dim")):
        if config.get(enc) != config.get(dec):
            bad.append(f"{enc} ({config.get(enc)}) differs from {dec} ({config.get(dec)})")
    if config.get("share_encoder_decoder_embeddings", True) and not config.get(
            "tie_word_embeddings", True):
        bad.append("share_encoder_decoder_embeddings with tie_word_embeddings false (mtkit's "
                   "shared embeddings are the output layer's too)")
    act = config.get("activation_function", "gelu")
    if act not in ACTIVATIONS:
        bad.append(f"activation_function {act!r} (mtkit has {', '.join(ACTIVATIONS)})")
    if bad:
        raise ModelFolderError("config.json: " + "; ".join(bad))
    try:
        return {
            "d_model": int(config["d_model"]),
            "heads": int(config["encoder_attention_heads"]),
            "enc_layers": int(config["encoder_layers"]),
            "dec_layers": int(config["decoder_layers"]),
            "ffn_dim": int(config["encoder_ffn_dim"]),
            "dropout": float(config.get("dropout", 0.1)),
            "attn_dropout": float(config.get("attention_dropout", 0.0)),
            "act_dropout": float(config.get("activation_dropout", 0.0)),
            "activation": ACTIVATIONS[act],
            "norm": "post",
            "positions": "sinusoidal_halves",
            "max_positions": int(config.get("max_position_embeddings", 512)),
            "scale_embeddings": bool(config.get("scale_embedding", False)),
            "share_embeddings": bool(config.get("share_encoder_decoder_embeddings", True)),
            "align_layer": -1,
            "align_head": None,
        }
    except KeyError as e:
        raise ModelFolderError(f"config.json: lacks {e.args[0]}") from None
    except (TypeError, ValueError) as e:
        raise ModelFolderError(f"config.json: {e}") from None


def _side(vocab: Mapping[str, int], *, start: int | None, pad: int, eos: int, size: int,
          what: str) -> tuple[list[int | None], list[str]]:
    """One side's mtkit order (Marian id per mtkit id) and pieces, from its vocab.json."""
    by_id: dict[int, str] = {}
    for piece, i in vocab.items():
        if not isinstance(i, int) or not 0 <= i < size or i in by_id:
            raise ModelFolderError(f"{what}: {piece!r} has id {i!r}; expected distinct ids "
                               f"0..{size - 1} (the model's vocabulary size)")
        by_id[i] = piece
    if len(by_id) != size:
        raise ModelFolderError(f"{what}: {len(by_id)} pieces, but the model has {size} rows")
    if "<unk>" not in vocab:
        raise ModelFolderError(f"{what}: has no <unk>")
    specials = {BOS_ID: start, EOS_ID: eos, UNK_ID: vocab["<unk>"],
                PAD_ID: None if pad == start else pad}
    order: list[int | None] = [specials[i] for i in range(len(SPECIAL_PIECES))]
    taken = {i for i in order if i is not None}
    order += [i for i in range(size) if i not in taken]
    pieces = list(SPECIAL_PIECES.values()) + [by_id[i] for i in order[len(SPECIAL_PIECES):]]
    if clash := next((p for p in pieces[len(SPECIAL_PIECES):] if p in SPECIAL_PIECES.values()),
                     None):
        raise ModelFolderError(f"{what}: the ordinary piece {clash!r} has a special piece's name")
    return order, pieces


def marian_ids(config: Mapping[str, Any], vocab: Mapping[str, int],
               target_vocab: Mapping[str, int] | None) -> MarianIds:
    """Both sides' orders and the piece table; target_vocab None: one shared vocab.json."""
    pad, eos = config.get("pad_token_id"), config.get("eos_token_id")
    start = config.get("decoder_start_token_id", pad)
    if not all(isinstance(i, int) for i in (pad, eos, start)):
        raise ModelFolderError("config.json: pad_token_id, eos_token_id and decoder_start_token_id "
                           f"must be ids (got {pad!r}, {eos!r}, {start!r})")
    src_size = int(config["vocab_size"])
    tgt_size = int(config.get("decoder_vocab_size") or src_size)
    # A source of its own has its own <pad> (which only pads), and no start symbol.
    src_pad = pad if target_vocab is None else vocab.get("<pad>", pad)
    src, src_pieces = _side(vocab, start=start if target_vocab is None else src_pad,
                            pad=src_pad, eos=eos, size=src_size, what="vocab.json")
    if target_vocab is None:
        return MarianIds(tuple(src), tuple(src), PieceTable(tuple(src_pieces),
                                                            tuple(src_pieces)))
    tgt, tgt_pieces = _side(target_vocab, start=start, pad=pad, eos=eos, size=tgt_size,
                            what="target_vocab.json")
    return MarianIds(tuple(src), tuple(tgt), PieceTable(tuple(src_pieces), tuple(tgt_pieces)))


def _rows(w: torch.Tensor, order: tuple[int | None, ...], fill: float = 0.0) -> torch.Tensor:
    """w (V_marian, ...) -> (V_mtkit, ...) in mtkit's order, `fill` in the extra row."""
    out = w.new_full((len(order), *w.shape[1:]), fill)
    have = [m for m, i in enumerate(order) if i is not None]
    out[have] = w[[order[m] for m in have]]
    return out


def layer_names(enc_layers: int, dec_layers: int) -> list[tuple[str, tuple[str, ...]]]:
    """(mtkit name, the Marian names whose tensors are stacked on dim 0 to make it), for
    every weight and bias of the layers (not the embeddings or the output layer)."""
    pairs: list[tuple[str, tuple[str, ...]]] = []

    def linear(ours: str, *theirs: str) -> None:
        for kind in ("weight", "bias"):
            pairs.append((f"{ours}.{kind}", tuple(f"{t}.{kind}" for t in theirs)))

    for side, n in (("encoder", enc_layers), ("decoder", dec_layers)):
        for i in range(n):
            ours, theirs = f"{side}.layers.{i}", f"model.{side}.layers.{i}"
            att = f"{theirs}.self_attn"
            linear(f"{ours}.self_attn.qkv", f"{att}.q_proj", f"{att}.k_proj", f"{att}.v_proj")
            linear(f"{ours}.self_attn.out", f"{att}.out_proj")
            norms = ["self_attn_layer_norm", "final_layer_norm"]
            if side == "decoder":
                cross = f"{theirs}.encoder_attn"
                linear(f"{ours}.cross_attn.q", f"{cross}.q_proj")
                linear(f"{ours}.cross_attn.kv", f"{cross}.k_proj", f"{cross}.v_proj")
                linear(f"{ours}.cross_attn.out", f"{cross}.out_proj")
                norms.insert(1, "encoder_attn_layer_norm")
            for j, norm in enumerate(norms):
                linear(f"{ours}.norms.{j}", f"{theirs}.{norm}")
            linear(f"{ours}.ffn.inner", f"{theirs}.fc1")
            linear(f"{ours}.ffn.outer", f"{theirs}.fc2")
    return pairs


def _embeddings(hf: Mapping[str, torch.Tensor], *, shared: bool
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Marian's source and target token embeddings (V, d) as saved (transformers saves a
    shared table once, as model.shared.weight; older files hold every name)."""
    def first(*names: str) -> torch.Tensor:
        for n in names:
            if n in hf:
                return hf[n]
        raise ModelFolderError(f"the weights lack {names[0]}")

    if shared:
        table = first("model.shared.weight", "model.encoder.embed_tokens.weight")
        return table, table
    return (first("model.encoder.embed_tokens.weight", "model.shared.weight"),
            first("model.decoder.embed_tokens.weight"))


def to_mtkit(hf: Mapping[str, torch.Tensor], fields: Mapping[str, Any], ids: MarianIds, *,
             tied_output: bool) -> dict[str, torch.Tensor]:
    """mtkit's state dict (float32) from Marian's tensors `hf`; tied_output: the output layer
    is the target embedding (config.json's tie_word_embeddings), else lm_head.weight."""
    f32 = {k: v.float() for k, v in hf.items()}
    src, tgt = _embeddings(f32, shared=fields["share_embeddings"])
    out: dict[str, torch.Tensor] = {"src_embed.tokens.weight": _rows(src, ids.src),
                                    "tgt_embed.tokens.weight": _rows(tgt, ids.tgt)}
    for ours, theirs in layer_names(fields["enc_layers"], fields["dec_layers"]):
        missing = [t for t in theirs if t not in f32]
        if missing:
            raise ModelFolderError(f"the weights lack {missing[0]}")
        out[ours] = torch.cat([f32[t] for t in theirs], 0)
    if tied_output:
        head = tgt
    elif "lm_head.weight" in f32:
        head = f32["lm_head.weight"]
    else:
        raise ModelFolderError("the weights lack lm_head.weight (config.json: tie_word_embeddings "
                           "is false)")
    bias = f32.get("final_logits_bias", head.new_zeros(1, head.size(0))).reshape(-1)
    out["generator.weight"] = _rows(head, ids.tgt)
    out["generator.bias"] = _rows(bias, ids.tgt, NEVER_LOGIT)
    return out


def check_positions(hf: Mapping[str, torch.Tensor], table: torch.Tensor) -> None:
    """Refuse stored position tables (older files keep them) that are not Marian's
    sinusoids `table` (P, d): the model would not be the one its config describes."""
    for side in ("encoder", "decoder"):
        name = f"model.{side}.embed_positions.weight"
        if name in hf:
            w = hf[name].float()
            rows = min(w.size(0), table.size(0))
            if w.shape[1:] != table.shape[1:] or not torch.allclose(w[:rows], table[:rows],
                                                                    atol=1e-4):
                raise ModelFolderError(f"{name} is not Marian's sinusoidal table (learned "
                                   "positions are not a MarianMTModel's)")


def _unrows(w: torch.Tensor, order: tuple[int | None, ...]) -> torch.Tensor:
    """The inverse of `_rows`: w (V_mtkit, ...) -> (V_marian, ...), the extra row dropped."""
    have = [m for m, i in enumerate(order) if i is not None]
    out = w.new_zeros((len(have), *w.shape[1:]))
    out[[order[m] for m in have]] = w[have]
    return out


def from_mtkit(state: Mapping[str, torch.Tensor], fields: Mapping[str, Any], ids: MarianIds
               ) -> dict[str, torch.Tensor]:
    """Marian's tensors (as transformers saves them: a shared table once, as
    model.shared.weight; lm_head.weight only when it is not the target embedding) from an
    mtkit state dict that `to_mtkit` could have made: its inverse, for an export."""
    out: dict[str, torch.Tensor] = {}
    for ours, theirs in layer_names(fields["enc_layers"], fields["dec_layers"]):
        for name, part in zip(theirs, state[ours].chunk(len(theirs), 0), strict=True):
            out[name] = part.contiguous()
    src = _unrows(state["src_embed.tokens.weight"], ids.src)
    tgt = _unrows(state["tgt_embed.tokens.weight"], ids.tgt)
    head = _unrows(state["generator.weight"], ids.tgt)
    if fields["share_embeddings"]:
        out["model.shared.weight"] = src
    else:
        out["model.encoder.embed_tokens.weight"] = src
        out["model.decoder.embed_tokens.weight"] = tgt
        if not torch.equal(head, tgt):
            out["lm_head.weight"] = head
    out["final_logits_bias"] = _unrows(state["generator.bias"], ids.tgt).reshape(1, -1)
    return out
