"""8-bit weights for decoding on a CPU: every `nn.Linear` of a model (the output projection
included) becomes an `Int8Linear`, with int8 weights (symmetric, one scale per output row) and
each input's scale measured as it arrives (dynamic quantization, Jacob et al. 2018: what
OpenNMT-py's and CTranslate2's int8 do). Attention's softmax and products, embeddings, layer
norms and RNN cells stay in float32, so attention rows, alignments, prefixes and terms work
as before.

The products run in torch's quantized CPU kernels (fbgemm / oneDNN, `torch.ops.quantized`).
torch's own `quantize_dynamic` layers quantize activations to 7 bits (`reduce_range`), which
guards against the 16-bit saturation of AVX2's u8 x s8 instruction; on CPUs with VNNI the
kernels accumulate in 32 bits and the 8th bit is kept: on the toy test set 59 of 60 lines
matched fp32 with 8 bits, 55-57 with 7 (bench/RESULTS.md, "int8 in mtkit's own decoder").

This module is the one place that touches torch's quantized operators.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn

# torch's quantized engines that run these int8 products, in the order we prefer them: x86
# (fbgemm, with oneDNN's kernels where they are faster), fbgemm (AVX2 and up).
ENGINES = ("x86", "fbgemm")


def int8_engine() -> str | None:
    """The quantized engine int8 decoding runs on, or None when this CPU has none."""
    supported = torch.backends.quantized.supported_engines
    return next((e for e in ENGINES if e in supported), None)


def _has_vnni() -> bool:
    """Whether the CPU multiplies u8 x s8 with 32-bit accumulation (AVX512-VNNI or AVX-VNNI),
    read from Linux's /proc/cpuinfo; False where it cannot be read (7-bit activations: safe
    everywhere)."""
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines()
                  if line.startswith("flags")), [])
    return "avx512_vnni" in flags or "avx_vnni" in flags


class Int8Linear(nn.Module):
    """y = x W^T + b with W in int8 (row r is ``weight[r] * scale[r]``) and x quantized to
    8 bits (7 without VNNI) with a scale from its own range at each call: (..., d) -> (..., V).
    """

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None, *,
                 full_range: bool) -> None:
        """weight (V, d) int8, scale (V,) float64, bias (V,) float or None."""
        super().__init__()
        self.in_features, self.out_features = weight.size(1), weight.size(0)
        self.register_buffer("weight_int8", weight)
        self.register_buffer("scale", scale)
        self.register_buffer("bias", bias)
        self.full_range = full_range
        with warnings.catch_warnings():  # torch's notice that quantized tensors will change
            warnings.simplefilter("ignore", UserWarning)
            zeros = torch.zeros_like(scale, dtype=torch.long)
            # (q * s) / s rounds back to q exactly: the int8 values are the ones given
            q = torch.quantize_per_channel(weight.double().mul(scale.unsqueeze(1)).float(),
                                           scale, zeros, 0, torch.qint8)
            self._packed = torch.ops.quantized.linear_prepack(q, bias)

    @classmethod
    def from_float(cls, linear: nn.Linear, *, full_range: bool) -> Int8Linear:
        w = linear.weight.detach().float()
        scale = (w.abs().amax(1).double() / 127).clamp(min=1e-12)
        q = torch.round(w.double() / scale.unsqueeze(1)).clamp(-127, 127).to(torch.int8)
        bias = None if linear.bias is None else linear.bias.detach().float().clone()
        return cls(q, scale, bias, full_range=full_range)

    def rows(self, rows: torch.Tensor) -> Int8Linear:
        """The layer computing only output features `rows` (V',), each exactly as here."""
        return Int8Linear(self.weight_int8.index_select(0, rows),
                          self.scale.index_select(0, rows),
                          None if self.bias is None else self.bias.index_select(0, rows),
                          full_range=self.full_range)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic(x, self._packed,
                                                  reduce_range=not self.full_range)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"activations={'8' if self.full_range else '7'} bits")


def quantize_linear(model: nn.Module) -> nn.Module:
    """`model` (on the CPU), in eval mode, its `nn.Linear` layers replaced in place by
    `Int8Linear` ones. A tied output projection gets its own int8 copy while the embedding it
    shares keeps the float weight. Callers check `int8_engine()` first."""
    engine = int8_engine()
    assert engine is not None, "callers fall back to float32 where no engine is found"
    torch.backends.quantized.engine = engine
    full_range = _has_vnni()

    def swap(module: nn.Module) -> None:
        for name, child in module.named_children():
            if isinstance(child, nn.Linear):
                setattr(module, name, Int8Linear.from_float(child, full_range=full_range))
            else:
                swap(child)

    swap(model)
    return model.eval()


def is_float_linear(module: nn.Module) -> bool:
    """Whether `module` is a float `nn.Linear` (whose weight can be read and sliced), not an
    `Int8Linear`."""
    return isinstance(module, nn.Linear)


def restricted_linear(module: nn.Module, rows: torch.Tensor) -> nn.Module:
    """A linear layer computing only output features `rows` (V',) of `module` (an `nn.Linear`
    or an `Int8Linear`): (B, d) -> (B, V'), each row computed as `module` computes it."""
    if isinstance(module, Int8Linear):
        return module.rows(rows)
    assert isinstance(module, nn.Linear), type(module)
    out = nn.Linear(module.in_features, rows.numel(), bias=module.bias is not None,
                    device=module.weight.device, dtype=module.weight.dtype)
    with torch.no_grad():
        out.weight.copy_(module.weight.index_select(0, rows))
        if module.bias is not None:
            out.bias.copy_(module.bias.index_select(0, rows))
    return out.eval()
