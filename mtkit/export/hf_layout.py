"""A trained mtkit Transformer as a Hugging Face transformers model: which class holds it, its
config.json and its weights under that class's names (`hf_model`). No transformers import:
the folder is written from the layouts below, which tests/integration/test_export_hf.py
checks against transformers itself.

Which class holds which model:
- Pre-norm (mtkit's recipes): `BlenderbotForConditionalGeneration`. Its layers are pre-norm
  with a final LayerNorm on each stack, it scales token embeddings by √d or not
  (scale_embedding), adds *learned* positions from position 0 with no offset and no embedding
  LayerNorm, and adds a bias to the logits (final_logits_bias): a table of mtkit's sinusoids
  (either layout) is held exactly as its learned positions, for `max_position_embeddings`
  rows. It has one embedding table for source, target and output: shared embeddings only.
- Post-norm: `MarianMTModel`: post-norm without final norms, √d scaling or none, a logits
  bias, shared or separate embeddings and vocabularies. Its sinusoids are computed (in
  float64, as mtkit's `sinusoidal_halves` are), never stored, so it holds a post-norm model
  with `positions: sinusoidal_halves` only.
- M2M100 (and NLLB), checked and refused: pre-norm with final norms, but its sinusoids use
  fairseq's frequencies 10000^(-i/(d/2 - 1)) (mtkit's are 10000^(-2i/d)), start at position
  pad + 1 = 2, are computed rather than stored (no table can be given), and its output layer
  has no bias. MBart has an embedding LayerNorm and positions offset by 2; Pegasus computes
  its positions (a table it loads today is recomputed by `resize_position_embeddings`).

Ids are mtkit's own (pad 0, unk 1, bos 2 the decoder's start, eos 3, then the pieces), so that
the export needs no table: vocab.json maps each piece to its mtkit id. A model imported from
Marian keeps its extra PAD row (`mtkit.hf.marian`), whose logit stays at its `NEVER_LOGIT`.

Weights, for both classes (Bart's names): mtkit's fused self-attention projection (q, k, v
stacked, 3d rows) splits into q_proj, k_proj, v_proj; the cross-attention's key/value
projection (2d rows) into k_proj, v_proj; sublayer norms[0..2] are self_attn_layer_norm,
encoder_attn_layer_norm and final_layer_norm (the feed-forward's, in both norm placements);
the generator's weight is the output layer, its bias final_logits_bias (1, V). Tied tensors
are written once, under the name the class ties the others to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from mtkit.config import Recipe
from mtkit.errors import ConfigError
from mtkit.models.transformer import DecoderLayer, EncoderLayer, Transformer
from mtkit.models.vocab import BOS_ID, EOS_ID, PAD_ID

HfClass = Literal["BlenderbotForConditionalGeneration", "MarianMTModel"]
_MODEL_TYPE = {"BlenderbotForConditionalGeneration": "blenderbot", "MarianMTModel": "marian"}
# mtkit's activations under transformers' ACT2FN names ("gelu" is the exact, erf GELU in both)
_ACTIVATION = {"relu": "relu", "gelu": "gelu", "swish": "swish"}


@dataclass(frozen=True)
class HfModel:
    """An exported model: its class, config.json's content and its tensors by name."""

    architecture: HfClass
    config: dict[str, Any]
    weights: dict[str, torch.Tensor]
    max_positions: int  # the longest sequence (decoder start or source EOS included) it holds


def hf_class(recipe: Recipe) -> HfClass:
    """The class that holds the recipe's model exactly; ConfigError naming the field that no
    class holds (one line)."""
    if recipe.model.arch != "transformer":
        raise ConfigError(f"model.arch is {recipe.model.arch}: no Hugging Face class holds "
                          "mtkit's RNN; only Transformers export to the Hugging Face layout")
    tf = recipe.model.transformer
    if tf.norm == "pre":
        if not tf.share_embeddings:
            raise ConfigError("model.transformer.share_embeddings is false: the pre-norm "
                              "layout (BlenderbotForConditionalGeneration) has one embedding "
                              "table for source, target and output")
        return "BlenderbotForConditionalGeneration"
    if tf.positions != "sinusoidal_halves":
        raise ConfigError(f"model.transformer.positions is {tf.positions} in a post-norm "
                          "model: the post-norm layout (MarianMTModel) computes its positions, "
                          "sinusoidal_halves (the sines first, then the cosines), and stores "
                          "none")
    return "MarianMTModel"


def hf_model(model: Transformer, recipe: Recipe) -> HfModel:
    """`model` (trained with `recipe`) as the class `hf_class` chose."""
    arch = hf_class(recipe)
    tf = recipe.model.transformer
    rows = tf.max_positions if tf.positions == "learned" else recipe.position_rows()
    weights = _layers(model)
    weights["final_logits_bias"] = _t(model.generator.bias).unsqueeze(0)
    if tf.share_embeddings:  # one table: the name transformers ties the others to
        weights["model.shared.weight"] = _t(model.src_embed.tokens.weight)
    else:
        weights["model.encoder.embed_tokens.weight"] = _t(model.src_embed.tokens.weight)
        weights["model.decoder.embed_tokens.weight"] = _t(model.tgt_embed.tokens.weight)
        weights["lm_head.weight"] = _t(model.generator.weight)
    config = _config(arch, model, recipe, rows)
    if arch == "MarianMTModel":
        config.update(share_encoder_decoder_embeddings=tf.share_embeddings,
                      decoder_vocab_size=model.tgt_embed.tokens.num_embeddings)
        return HfModel(arch, config, weights, rows)
    for side, embed, stack in (("encoder", model.src_embed, model.encoder),
                               ("decoder", model.tgt_embed, model.decoder)):
        weights[f"model.{side}.embed_positions.weight"] = _t(embed.positions(0, rows))
        _norm(weights, f"model.{side}.layer_norm", stack.norm)
    return HfModel(arch, config, weights, rows)


def _t(p: torch.Tensor) -> torch.Tensor:
    """A float32 copy that owns its memory (safetensors refuses tensors that share any)."""
    return p.detach().to("cpu", torch.float32).contiguous().clone()


def _linear(out: dict[str, torch.Tensor], name: str, layer: nn.Linear, part: int = 0,
            parts: int = 1) -> None:
    """name.weight and name.bias: rows `part` of `parts` equal blocks of `layer`'s."""
    out[f"{name}.weight"] = _t(layer.weight.chunk(parts, 0)[part])
    out[f"{name}.bias"] = _t(layer.bias.chunk(parts, 0)[part])


def _norm(out: dict[str, torch.Tensor], name: str, norm: nn.LayerNorm) -> None:
    out[f"{name}.weight"], out[f"{name}.bias"] = _t(norm.weight), _t(norm.bias)


def _self_attention(out: dict[str, torch.Tensor], name: str, attn) -> None:
    for i, proj in enumerate(("q_proj", "k_proj", "v_proj")):
        _linear(out, f"{name}.{proj}", attn.qkv, i, 3)
    _linear(out, f"{name}.out_proj", attn.out)


def _layer(out: dict[str, torch.Tensor], name: str, layer: EncoderLayer | DecoderLayer) -> None:
    """What encoder and decoder layers share: self-attention, feed-forward, their norms."""
    _self_attention(out, f"{name}.self_attn", layer.self_attn)
    _norm(out, f"{name}.self_attn_layer_norm", layer.norms[0])
    _linear(out, f"{name}.fc1", layer.ffn.inner)
    _linear(out, f"{name}.fc2", layer.ffn.outer)
    _norm(out, f"{name}.final_layer_norm", layer.norms[-1])


def _cross_attention(out: dict[str, torch.Tensor], name: str, layer: DecoderLayer) -> None:
    cross = layer.cross_attn
    _linear(out, f"{name}.encoder_attn.q_proj", cross.q)
    _linear(out, f"{name}.encoder_attn.k_proj", cross.kv, 0, 2)
    _linear(out, f"{name}.encoder_attn.v_proj", cross.kv, 1, 2)
    _linear(out, f"{name}.encoder_attn.out_proj", cross.out)
    _norm(out, f"{name}.encoder_attn_layer_norm", layer.norms[1])


def _layers(model: Transformer) -> dict[str, torch.Tensor]:
    """Every encoder and decoder layer's tensors under Bart's names."""
    out: dict[str, torch.Tensor] = {}
    for i, layer in enumerate(model.encoder.layers):
        _layer(out, f"model.encoder.layers.{i}", layer)
    for i, layer in enumerate(model.decoder.layers):
        _layer(out, f"model.decoder.layers.{i}", layer)
        _cross_attention(out, f"model.decoder.layers.{i}", layer)
    return out


def _config(arch: HfClass, model: Transformer, recipe: Recipe, rows: int) -> dict[str, Any]:
    """config.json: sizes, dropouts (for training on in transformers), special ids, and the
    class's generation defaults that mtkit does not have switched off."""
    tf = recipe.model.transformer
    return {
        "architectures": [arch], "model_type": _MODEL_TYPE[arch],
        "vocab_size": model.src_embed.tokens.num_embeddings, "d_model": tf.d_model,
        "encoder_layers": tf.enc_layers, "decoder_layers": tf.dec_layers,
        "encoder_attention_heads": tf.heads, "decoder_attention_heads": tf.heads,
        "encoder_ffn_dim": tf.ffn_dim, "decoder_ffn_dim": tf.ffn_dim,
        "activation_function": _ACTIVATION[tf.activation], "max_position_embeddings": rows,
        "scale_embedding": tf.scale_embeddings, "dropout": tf.dropout,
        "attention_dropout": tf.attn_dropout, "activation_dropout": tf.act_dropout,
        "encoder_layerdrop": 0.0,
        "decoder_layerdrop": 0.0, "init_std": tf.d_model ** -0.5, "is_encoder_decoder": True,
        "pad_token_id": PAD_ID, "bos_token_id": BOS_ID, "eos_token_id": EOS_ID,
        "decoder_start_token_id": BOS_ID, "forced_eos_token_id": EOS_ID,
        "encoder_no_repeat_ngram_size": 0, "tie_word_embeddings": tf.share_embeddings,
        "use_cache": True, "dtype": "float32",
    }
