"""One update: gradients accumulated over `update_freq` batches, then clip, check and step.

Shapes: B batch, S source length, T target length.

Nothing here reads a value back to the host: losses, the gradient norm and the "skipped" flag
stay on the device, so a GPU never waits for Python between updates (the loop reads them in
bulk every few updates). Token counts are known on the host already: batches are counted
before they are copied to the device.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from mtkit.config.guided import Readout
from mtkit.data.batch import Batch
from mtkit.device import Amp
from mtkit.train.distributed import Dist
from mtkit.train.loss import alignment_ce, label_smoothed_nll, rdrop_loss
from mtkit.train.optim import optimizer_step


@dataclass(frozen=True)
class UpdateSums:
    """Device-side results of one update: summed label-smoothed loss and NLL over its target
    tokens, the gradient norm before clipping, whether the step was skipped (float 0 or 1,
    the form the optimizer and the bulk copy take), and the summed alignment cross-entropy
    (0 without guided alignment)."""

    loss: torch.Tensor
    nll: torch.Tensor
    gnorm: torch.Tensor
    skipped: torch.Tensor
    align: torch.Tensor

    def packed(self) -> torch.Tensor:
        """(5,) float32: loss, nll, gnorm, skipped, align (for one bulk copy to the host)."""
        return torch.stack([self.loss.float(), self.nll.float(), self.gnorm.float(),
                            self.skipped, self.align.float()])


class BackwardSums(NamedTuple):
    """What `forward_backward` summed over an update's batches (0-d, on the device): the
    label-smoothed loss, the NLL, and the alignment cross-entropy (0 when not guided)."""

    loss: torch.Tensor
    nll: torch.Tensor
    align: torch.Tensor


@dataclass(frozen=True)
class Guide:
    """Guided alignment in one update: the weight and read-out of train.guided_alignment, and
    the normalizer 1 / (target pieces with a gold link in the update, on every rank)."""

    weight: float
    readout: Readout
    normalizer: float | torch.Tensor


def to_device(batch: Batch, device: torch.device) -> Batch:
    """Pinned, non-blocking copy to a GPU (the copy overlaps the previous step's kernels)."""
    if device.type == "cuda":
        return batch.pin_memory().to(device, non_blocking=True)
    return batch.to(device)


def token_normalizer(ntok: int, *, dist: Dist, device: torch.device) -> float | torch.Tensor:
    """1 / (target tokens of the update): `ntok`, this rank's target tokens of all the
    update's batches, summed over every rank.

    Under DDP the gradients are averaged over the ranks afterwards, so each rank scales by
    world_size / (tokens of all ranks); the token count is all-reduced on the device."""
    if not dist.enabled:
        return 1.0 / max(ntok, 1)  # an update without linked pieces has an alignment sum of 0
    # torch.full launches a fill kernel; torch.tensor(..., device=cuda) would copy and wait.
    total = dist.all_reduce(torch.full((), float(ntok), device=device))
    return dist.world_size / total.clamp_min(1.0)


def forward_backward(net: nn.Module, batches: Sequence[Batch], *, device: torch.device,
                     amp: Amp, smoothing: float, normalizer: float | torch.Tensor,
                     guide: Guide | None = None,
                     no_sync: Callable[[], contextlib.AbstractContextManager] | None = None,
                     rdrop: float = 0.0) -> BackwardSums:
    """Accumulate into ``.grad`` the gradient of ``normalizer * sum of token losses`` over
    `batches` (host batches; each is copied to `device` here), plus with `guide`
    ``weight * guide.normalizer * sum of alignment cross-entropies`` (`loss.alignment_ce`, on
    the attention the model returns: its designated alignment layer and head).

    With normalizer = 1 / (target tokens of all the batches), the gradient is that of the
    mean token loss of their union: gradient accumulation gives the update of one larger
    batch (Ott et al. 2018, §4.2), however the tokens fall into batches; the alignment term is
    likewise the mean over the update's linked target pieces. `no_sync` (DDP's) defers the
    gradient all-reduce to the last batch. `rdrop` > 0: each batch passes twice through
    the model and the token loss is `loss.rdrop_loss` (alignment from the first pass). A
    model's `Output.aux` term (of the targets) is added to the token loss, scaled alike.
    """
    loss_sum = torch.zeros((), device=device)
    nll_sum = torch.zeros((), device=device)
    align_sum = torch.zeros((), device=device)
    for i, host_batch in enumerate(batches):
        b = to_device(host_batch, device)
        last = i == len(batches) - 1
        ctx = no_sync() if no_sync is not None and not last else contextlib.nullcontext()
        with ctx:
            with amp.autocast():
                out = net(*_twice(b) if rdrop else (b.src, b.src_lens, b.tgt_in),
                          return_attn=guide is not None)
            sums = (rdrop_loss(out.logits, b.tgt_out, smoothing=smoothing, weight=rdrop)
                    if rdrop else label_smoothed_nll(out.logits, b.tgt_out, smoothing=smoothing))
            total = sums.loss * normalizer
            if out.aux is not None:  # a model's own term (hard attention's REINFORCE)
                target = torch.cat([b.tgt_out, b.tgt_out]) if rdrop else b.tgt_out
                total = total + out.aux(target) * normalizer
            if guide is not None:
                assert out.attn is not None and b.align is not None, "guided without links"
                ce = alignment_ce(out.attn[:len(b.src)], b.align, readout=guide.readout)
                total = total + guide.weight * guide.normalizer * ce
                align_sum += ce.detach()
            del out  # the logits: the graph keeps what the backward pass needs, not them
            amp.backward(total)
        loss_sum += sums.loss.detach()
        nll_sum += sums.nll
    return BackwardSums(loss_sum, nll_sum, align_sum)


def _twice(b: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The model's inputs with the batch stacked on itself, (2B, ...): one call, two dropout
    masks (R-Drop)."""
    assert b.tgt_in is not None, "a training batch has a target"
    return (torch.cat([b.src, b.src]), torch.cat([b.src_lens, b.src_lens]),
            torch.cat([b.tgt_in, b.tgt_in]))


def finish_update(params: list[nn.Parameter], optimizer: torch.optim.Optimizer, amp: Amp, *,
                  clip_norm: float, loss_sum: torch.Tensor, nll_sum: torch.Tensor,
                  dist: Dist, align_sum: torch.Tensor | None = None) -> UpdateSums:
    """Unscale (float16), measure and clip the gradient norm (Pascanu et al. 2013), and step
    unless the loss or the gradients are not finite; then clear the gradients.

    Under DDP every rank holds the same all-reduced gradients, and the loss flags are
    max-reduced, so all ranks make the same skip decision."""
    if amp.scaler is not None:
        amp.scaler.unscale_(optimizer)
    grads = [p.grad for p in params if p.grad is not None]
    gnorm = torch.nn.utils.get_total_norm(grads)
    if clip_norm > 0:
        torch.nn.utils.clip_grads_with_norm_(params, clip_norm, gnorm)
    align = torch.zeros_like(loss_sum) if align_sum is None else align_sum
    bad = (~torch.isfinite(gnorm) | ~torch.isfinite(loss_sum) | ~torch.isfinite(align)).float()
    skipped = dist.all_reduce(bad, "max")  # float 1.0 if any rank saw a non-finite value
    optimizer_step(optimizer, skipped)
    if amp.scaler is not None:
        amp.scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return UpdateSums(loss_sum, nll_sum, gnorm, skipped, align)
