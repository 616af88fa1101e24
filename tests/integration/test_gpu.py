"""GPU checks (issue 8): bf16 autocast training, the SDPA fast path, KV-cache decoding, beam
search on CUDA against the CPU, and an update that never waits for the GPU.

Cases that need CUDA are marked ``gpu`` (``pytest -m gpu`` runs them alone) and skip, with
the reason shown in the summary, where torch sees no CUDA device. Where a comparison also
means something on the CPU (SDPA against the explicit softmax in float32, KV cache against
recomputation), the same test has a CPU case that runs in the ordinary suite.

Exactness checks turn TF32 off: with it, float32 matmuls keep a 10-bit mantissa and CPU and
GPU disagree at 1e-3.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F

from mtkit.config import DecodeConfig, ModelConfig, RNNConfig, TrainConfig, TransformerConfig
from mtkit.data.batch import Batch
from mtkit.decode import decode_batch
from mtkit.device import Amp, cuda_defaults, inference_device, setup_backend
from mtkit.models.base import Translator
from mtkit.models.transformer import CrossAttention, SelfAttention
from mtkit.models.vocab import PAD_ID
from mtkit.train.distributed import Dist
from mtkit.train.optim import build_optimizer
from mtkit.train.step import finish_update, forward_backward
from tests.helpers import reversal_batch, tiny_model

HAS_CUDA = torch.cuda.is_available()
NO_CUDA = (f"no CUDA device visible to torch {torch.__version__} "
           f"(CUDA build: {torch.version.cuda or 'none'})")
needs_cuda = [pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)]
CUDA = pytest.param("cuda", marks=needs_cuda)
VOCAB = 40

ARCHS = {
    "transformer": ModelConfig(arch="transformer", transformer=TransformerConfig(
        d_model=64, heads=4, enc_layers=2, dec_layers=2, ffn_dim=128, dropout=0.0,
        share_embeddings=True)),
    "rnn": ModelConfig(arch="rnn", rnn=RNNConfig(
        cell="gru", emb_dim=32, hidden_dim=48, bidirectional=True, attention="additive",
        attn_dim=32, placement="bahdanau", dropout=0.0)),
}


@pytest.fixture
def exact_fp32() -> Iterator[None]:
    """Plain float32 matmuls on the GPU (no TF32) for the duration of a test."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _model(arch: str, seed: int = 0) -> Translator:
    return tiny_model(ARCHS[arch], VOCAB, seed=seed, eval=False)


def _batch(n: int = 6, seed: int = 0, lo: int = 2, hi: int = 11) -> Batch:
    """Random sentences of unequal lengths (so every batch has padding); target = reversal."""
    return reversal_batch(n, VOCAB, torch.Generator().manual_seed(seed), lo=lo, hi=hi)


# --------------------------------------------------------------------------- attention


def _attention_inputs(device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x (B, T, d), memory (B, S, d), mask (B, 1, 1, S) with padding in every row but one."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 9, 64, generator=g)
    memory = torch.randn(3, 11, 64, generator=g)
    lens = torch.tensor([11, 4, 7])
    mask = (torch.arange(11) < lens[:, None])[:, None, None, :]
    return x.to(device), memory.to(device), mask.to(device)


def _fused_only():
    """On CUDA, forbid SDPA's math fallback, so the fast path must run a fused kernel."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                        SDPBackend.CUDNN_ATTENTION])


@pytest.mark.parametrize("device", ["cpu", CUDA])
@torch.no_grad()
def test_sdpa_fast_path_equals_the_explicit_softmax(device: str) -> None:
    """The same module with need_weights False (scaled_dot_product_attention) and True (the
    explicit softmax that returns weights): float32 on the CPU, bf16 autocast on CUDA."""
    torch.manual_seed(0)
    self_attn = SelfAttention(64, 4, dropout=0.1).to(device).eval()
    cross = CrossAttention(64, 4, dropout=0.1).to(device).eval()
    x, memory, mask = _attention_inputs(device)
    cases = {
        "encoder (padding mask)": lambda w: self_attn(memory, mask, need_weights=w)[0],
        "decoder (causal)": lambda w: self_attn(x, causal=True, need_weights=w)[0],
        "cross (padding mask)": lambda w: cross(x, *cross.kv_heads(memory), mask,
                                                need_weights=w)[0],
    }
    on_cuda = device == "cuda"
    tol = dict(atol=3e-2, rtol=3e-2) if on_cuda else dict(atol=1e-5, rtol=1e-5)
    for name, run in cases.items():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=on_cuda):
            explicit = run(True)
            if on_cuda:
                with _fused_only():
                    fast = run(False)
            else:
                fast = run(False)
        assert fast.dtype == (torch.bfloat16 if on_cuda else torch.float32), name
        torch.testing.assert_close(fast.float(), explicit.float(), **tol, msg=name)


# --------------------------------------------------------------------------- training


def _train_cfg(**kw) -> TrainConfig:
    return dataclasses.replace(TrainConfig(), **kw)


def _grads(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.float().flatten() for p in model.parameters()
                      if p.grad is not None])


@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
def test_bf16_training_step_is_finite_and_close_to_fp32(arch: str, exact_fp32) -> None:
    device = torch.device("cuda")
    batches = [_batch(16, seed=1), _batch(16, seed=2)]
    ntok = sum(b.num_tgt_tokens for b in batches)
    ref = _model(arch).to(device).train()
    half = copy.deepcopy(ref)
    sums = {}
    for name, model, precision in (("fp32", ref, "fp32"), ("bf16", half, "bf16")):
        amp = Amp.for_device(device, precision)
        assert (amp.dtype is None) == (precision == "fp32")
        sums[name] = forward_backward(model, batches, device=device, amp=amp, smoothing=0.1,
                                      normalizer=1.0 / ntok)
    loss32, loss16 = (sums[n][0].item() / ntok for n in ("fp32", "bf16"))
    assert abs(loss16 - loss32) <= 1e-2 * loss32, (loss16, loss32)
    g32, g16 = _grads(ref), _grads(half)
    assert torch.isfinite(g16).all()
    assert F.cosine_similarity(g16, g32, dim=0) > 0.99
    assert abs(g16.norm() / g32.norm() - 1) < 0.05
    before = [p.detach().clone() for p in half.parameters()]
    opt = build_optimizer(half, _train_cfg(lr=1e-3), device)
    out = finish_update(list(half.parameters()), opt, Amp.for_device(device, "bf16"),
                        clip_norm=1.0, loss_sum=sums["bf16"][0], nll_sum=sums["bf16"][1],
                        dist=Dist())
    assert not out.skipped.item() and torch.isfinite(out.gnorm).item()
    after = list(half.parameters())
    assert all(torch.isfinite(p).all() for p in after)
    assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))


@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
def test_an_update_never_waits_for_the_gpu(arch: str) -> None:
    """Copy to the device, forward, loss, backward, clip, fused Adam with the skip flag:
    nothing may read a value back (torch's sync debug mode raises on any synchronising call),
    so the host can run ahead and queue the next update while the GPU works."""
    device = torch.device("cuda")
    model = _model(arch).to(device).train()
    opt = build_optimizer(model, _train_cfg(lr=1e-3), device)
    amp = Amp.for_device(device, "bf16")
    params = list(model.parameters())

    def update(b: Batch):
        loss, nll, _ = forward_backward(model, [b], device=device, amp=amp, smoothing=0.1,
                                        normalizer=1.0 / b.num_tgt_tokens)
        return finish_update(params, opt, amp, clip_norm=1.0, loss_sum=loss, nll_sum=nll,
                             dist=Dist())

    update(_batch(16, seed=1))  # first update: optimizer state, allocator, cuDNN plans
    b = _batch(16, seed=2)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = update(b)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert not out.skipped.item()


# --------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("arch", list(ARCHS))
@torch.no_grad()
def test_kv_cache_decoding_equals_full_recomputation(arch: str, device: str,
                                                     exact_fp32) -> None:
    """Stepping with the decoder state (the Transformer's key/value cache, the RNN's hidden
    state) gives the logits and attention of one teacher-forced pass over the prefix."""
    model = _model(arch).to(device).eval()
    b = _batch(5, seed=3).to(device)
    full = model(b.src, b.src_lens, b.tgt_in, return_attn=True)
    enc = model.encode(b.src, b.src_lens)
    state = model.init_state(enc)
    logits, attns = [], []
    for t in range(b.tgt_in.size(1)):
        out = model.step(b.tgt_in[:, t], state, enc, need_attn=True)
        logits.append(out.logits.clone())  # valid until the next step
        attns.append(out.attn)
        state = out.state
    real = b.tgt_in != PAD_ID
    torch.testing.assert_close(torch.stack(logits, 1)[real], full.logits[real],
                               atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(torch.stack(attns, 1)[real], full.attn[real],
                               atol=1e-5, rtol=1e-4)


def _trained(arch: str, updates: int = 250) -> Translator:
    """A tiny model trained on the CPU to reverse sentences: confident enough that its beam
    search has no near-ties for rounding to break differently on two devices."""
    model = _model(arch).train()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for i in range(updates):
        b = _batch(32, seed=100 + i)
        logits = model(b.src, b.src_lens, b.tgt_in).logits
        loss = F.cross_entropy(logits.flatten(0, 1), b.tgt_out.flatten(), ignore_index=PAD_ID)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
def test_beam_search_on_cuda_gives_the_cpu_output(arch: str, exact_fp32) -> None:
    model = _trained(arch)
    b = _batch(24, seed=7)
    srcs = [row[: n - 1].tolist() for row, n in zip(b.src, b.src_lens, strict=True)]
    for cfg in (DecodeConfig(method="beam", beam_size=5, nbest=1),
                DecodeConfig(method="greedy")):
        on_cpu = decode_batch(model, b, cfg, need_attn=True)
        on_gpu = decode_batch(copy.deepcopy(model).cuda(), b.to("cuda"), cfg, need_attn=True)
        reversed_ok = sum(h[0].tokens == s[::-1] for h, s in zip(on_cpu, srcs, strict=True))
        # 250 updates: about 10/24 exact for the Transformer, 22/24 for the GRU, and the
        # best and second-best beam outputs at least 0.02 apart in score.
        assert reversed_ok >= len(srcs) // 4, "the model should have learnt to reverse"
        for cpu_h, gpu_h in zip(on_cpu, on_gpu, strict=True):
            assert gpu_h[0].tokens == cpu_h[0].tokens, cfg.method
            assert abs(gpu_h[0].score - cpu_h[0].score) < 1e-4
            torch.testing.assert_close(gpu_h[0].attn, cpu_h[0].attn, atol=1e-4, rtol=1e-4)


@pytest.fixture
def cudnn_sdp_restored() -> Iterator[None]:
    """The global settings the set-up functions change, restored after the test."""
    saved = (torch.backends.cuda.cudnn_sdp_enabled(), torch.get_float32_matmul_precision(),
             torch.backends.cudnn.allow_tf32)
    yield
    torch.backends.cuda.enable_cudnn_sdp(saved[0])
    torch.set_float32_matmul_precision(saved[1])
    torch.backends.cudnn.allow_tf32 = saved[2]


def test_cuda_defaults_turn_cudnn_attention_off(cudnn_sdp_restored) -> None:
    """cuDNN's SDPA backend builds a plan per new shape (hundreds of ms of host time; every
    token batch has a new shape): CUDA runs must not use it (bench/RESULTS.md, issue 8)."""
    torch.backends.cuda.enable_cudnn_sdp(True)
    cuda_defaults()
    assert not torch.backends.cuda.cudnn_sdp_enabled()


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
def test_training_and_inference_on_cuda_apply_the_defaults(cudnn_sdp_restored) -> None:
    for start in (lambda: setup_backend(torch.device("cuda", 0), TrainConfig()),
                  lambda: inference_device("cuda")):
        torch.backends.cuda.enable_cudnn_sdp(True)
        start()
        assert not torch.backends.cuda.cudnn_sdp_enabled()
