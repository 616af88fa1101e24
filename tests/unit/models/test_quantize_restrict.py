"""Every model's int8 form (`quantize_linear`) and its restricted output layer
(`Translator.restricted`), on the tiny models of test_models.py: the restricted model's step
gives the full model's logits at the chosen columns, the original is left as it was, and the
int8 model steps with logits near the float ones and attention rows that sum to 1."""

from __future__ import annotations

import copy

import pytest
import torch

from mtkit.models.quantize import Int8Linear, quantize_linear
from tests.unit.models.test_models import CASES, _batch, _model, _step_all

# one RNN per cell and every Transformer: the restriction is one code path per architecture
NAMES = [n for n in CASES if n.endswith("-dot") and "nofeed" not in n or n.startswith("tf-")]


def _rows(vocab: int) -> torch.Tensor:
    """Chosen target ids: the specials, a few others and the last."""
    return torch.tensor([0, 1, 2, 3, 5, 8, 13, vocab - 1])


@pytest.mark.parametrize("name", NAMES)
@torch.no_grad()
def test_restricted_step_gives_the_chosen_columns(name):
    model = _model(CASES[name])
    src, lens, tgt, _ = _batch()
    full, attn, _ = _step_all(model, src, lens, tgt)
    rows = _rows(full.size(-1))
    short, short_attn, _ = _step_all(model.restricted(rows), src, lens, tgt)
    torch.testing.assert_close(short, full[..., rows], atol=1e-5, rtol=1e-5)
    if attn is not None:
        torch.testing.assert_close(short_attn, attn)
    # the model itself still computes every column
    again, _, _ = _step_all(model, src, lens, tgt)
    assert again.size(-1) == full.size(-1)


@pytest.mark.parametrize("name", NAMES)
@torch.no_grad()
def test_int8_model_steps_near_the_float_one(name):
    model = _model(CASES[name])
    src, lens, tgt, _ = _batch()
    full, attn, _ = _step_all(model, src, lens, tgt)
    int8 = quantize_linear(copy.deepcopy(model))
    assert any(isinstance(m, Int8Linear) for m in int8.modules())
    assert not any(isinstance(m, torch.nn.Linear) for m in int8.modules())
    low, low_attn, _ = _step_all(int8, src, lens, tgt)
    assert (low - full).abs().max() < 0.05 * full.abs().max()
    assert not torch.equal(low, full)
    if low_attn is not None:
        torch.testing.assert_close(low_attn.sum(-1), torch.ones_like(low_attn.sum(-1)),
                                   atol=1e-5, rtol=0)
    rows = _rows(full.size(-1))
    short, _, _ = _step_all(int8.restricted(rows), src, lens, tgt)
    assert torch.equal(short, low[..., rows])
