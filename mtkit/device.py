"""Where and in which precision mtkit runs: device choice for training (`resolve_device`,
`setup_backend`) and inference (`inference_device`), CUDA defaults, autocast (`Amp`)."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from mtkit.config import TrainConfig
from mtkit.errors import ConfigError


def resolve_device(spec: str, *, local_rank: int | None = None,
                   option: str = "train.device") -> torch.device:
    """'auto' picks CUDA, then MPS, then the CPU; a named device must exist (else a
    ConfigError naming `option`, the recipe key or the caller's option that asked for it).

    Under torchrun (`local_rank` given) a CUDA run uses ``cuda:<local_rank>``, one GPU per
    process, whatever index the recipe names."""
    if spec == "auto":
        if torch.cuda.is_available():
            spec = "cuda"
        elif torch.backends.mps.is_available():
            spec = "mps"
        else:
            spec = "cpu"
    if spec.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError.about(option, f"{spec!r} requested but this torch build sees no "
                                    "CUDA device; use auto or cpu")
        index = local_rank if local_rank is not None else (
            int(spec.split(":")[1]) if ":" in spec else torch.cuda.current_device())
        if index >= torch.cuda.device_count():
            raise ConfigError.about(option, f"cuda:{index} requested but only "
                                    f"{torch.cuda.device_count()} CUDA device(s) exist")
        return torch.device("cuda", index)
    if spec == "mps" and not torch.backends.mps.is_available():
        raise ConfigError.about(option, "'mps' requested but MPS is not available here")
    return torch.device(spec)


def inference_device(spec: str) -> torch.device:
    """A device spec (auto, cpu, cuda, cuda:N or mps) as a torch device; ConfigError naming
    the option `device` for a malformed or unavailable one."""
    if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", spec):
        raise ConfigError.about("device", "expected auto, cpu, cuda, cuda:N or mps, got "
                                f"{spec!r}")
    device = resolve_device(spec, option="device")
    if device.type == "cuda":
        cuda_defaults()
    return device


def setup_backend(device: torch.device, cfg: TrainConfig) -> None:
    """CPU thread count, and TF32 matmuls on CUDA (Ampere and later: ~8x fp32 throughput for
    a 10-bit mantissa that training does not notice)."""
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.allow_tf32 = True
        cuda_defaults()


def cuda_defaults() -> None:
    """Settings for every CUDA run, training or inference.

    cuDNN's attention backend is switched off: it builds an execution plan for every new
    (batch, length) shape, tens to hundreds of milliseconds on the host each time, and token
    batches change shape with nearly every batch. Measured on an H200 (bench/RESULTS.md): a
    4k-token Transformer update took 396 ms of wall time for 4 ms of GPU work. SDPA then uses
    FlashAttention (causal self-attention) or the memory-efficient kernel (padding masks),
    which have no per-shape setup."""
    torch.backends.cuda.enable_cudnn_sdp(False)


def host_memory_defaults() -> None:
    """Large CPU tensors on 2 MB pages: PyTorch madvises allocations of 2 MB or more for
    transparent huge pages when THP_MEM_ALLOC_ENABLE=1 (off by default, as it may cost a
    little memory). Decoding allocates tensors of tens of MB at every step (logits and
    log-probabilities over the vocabulary for every beam row); glibc maps such blocks fresh
    each time, and the kernel faults in and zeroes them 4 kB at a time; with 2 MB pages a
    fresh tensor of that size fills about four times faster (bench/RESULTS.md, "Figures
    behind the code's comments"). The variable is read once, at torch's first
    CPU allocation, so call this before any tensor exists; a value the user set wins. It
    changes no number, only where memory comes from."""
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


@dataclass
class Amp:
    """Mixed precision of one run: autocast dtype (None: float32) and, for float16, a
    gradient scaler (Micikevicius et al. 2018) against underflowing gradients.
    Autocast is used on CUDA only; elsewhere training runs in float32."""

    device_type: str
    dtype: torch.dtype | None
    scaler: torch.amp.GradScaler | None

    @classmethod
    def for_device(cls, device: torch.device, precision: str) -> Amp:
        if device.type != "cuda" or precision == "fp32":
            return cls(device.type, None, None)
        if precision == "bf16":
            return cls(device.type, torch.bfloat16, None)
        return cls(device.type, torch.float16, torch.amp.GradScaler(device.type))

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        if self.dtype is None:
            yield
        else:
            with torch.autocast(self.device_type, dtype=self.dtype):
                yield

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
