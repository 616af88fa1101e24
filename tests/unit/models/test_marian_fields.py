"""The Transformer's fields that Marian's models need: swish, positions in halves, unscaled
embeddings (their exactness against transformers is tests/unit/hf)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mtkit.config import ModelConfig, TransformerConfig, recipe_from_dict
from mtkit.errors import ConfigError
from mtkit.models.embedding import ScaledEmbedding, sinusoids
from mtkit.models.transformer import FeedForward


def test_sinusoidal_halves_are_the_same_waves_sines_first() -> None:
    inter, halves = sinusoids(40, 16), sinusoids(40, 16, halves=True)
    torch.testing.assert_close(halves[:, :8], inter[:, 0::2], atol=2e-5, rtol=0)
    torch.testing.assert_close(halves[:, 8:], inter[:, 1::2], atol=2e-5, rtol=0)
    assert not torch.allclose(halves, inter)
    # Marian's formula (transformers' MarianSinusoidalPositionalEmbedding), in float64
    pos = np.array([[p / np.power(10000, 2 * (j // 2) / 16) for j in range(16)]
                    for p in range(40)])
    ref = np.concatenate([np.sin(pos[:, 0::2]), np.cos(pos[:, 1::2])], 1)
    assert torch.equal(halves, torch.from_numpy(ref).float())
    # positions past the table come from the same formula
    assert torch.equal(sinusoids(5, 16, 35, halves=True), halves[35:])


def test_unscaled_embeddings_add_positions_to_the_tokens_as_they_are() -> None:
    tokens = torch.nn.Embedding(10, 8)
    ids = torch.tensor([[4, 5, 6]])
    for scaled, factor in ((True, math.sqrt(8)), (False, 1.0)):
        emb = ScaledEmbedding(tokens, learned=False, max_positions=16, dropout=0.0,
                              scaled=scaled, halves=True).eval()
        want = tokens(ids) * factor + sinusoids(3, 8, halves=True)
        torch.testing.assert_close(emb(ids), want)


def test_swish_is_silu() -> None:
    torch.manual_seed(0)
    ffn = FeedForward(8, 16, "swish", 0.0).eval()
    x = torch.randn(2, 3, 8)
    torch.testing.assert_close(ffn(x), ffn.outer(F.silu(ffn.inner(x))))


def test_the_new_choices_are_validated_with_the_others() -> None:
    with pytest.raises(ConfigError, match=r"activation: invalid choice 'tanh'; expected one of "
                       "relu, gelu, swish"):
        recipe_from_dict({"model": {"transformer": {"activation": "tanh"}}}, corpora=False)
    with pytest.raises(ConfigError, match="positions: invalid choice 'halves'; expected one of "
                       "sinusoidal, sinusoidal_halves, learned"):
        recipe_from_dict({"model": {"transformer": {"positions": "halves"}}}, corpora=False)
    cfg = ModelConfig(transformer=TransformerConfig(scale_embeddings=False))
    assert not cfg.transformer.scale_embeddings


def test_a_models_recipe_needs_no_corpora_but_a_recipe_to_prepare_does() -> None:
    recipe = recipe_from_dict({"model": {"transformer": {"activation": "swish"}}},
                              corpora=False)
    assert recipe.data.train is None
    with pytest.raises(ConfigError, match="data.train: missing"):
        recipe_from_dict({"model": {"transformer": {"activation": "swish"}}})
