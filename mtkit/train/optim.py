"""Optimisers and learning-rate schedules.

The schedule is a function of the update number (1-based) times, for `plateau`, a multiplier
lowered when the validation metric stalls. It is stateful only through that multiplier and
the plateau bookkeeping, all in `state_dict()` (primitives), so a resumed run continues the
same curve.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from mtkit.config import TrainConfig


def build_optimizer(model: nn.Module, cfg: TrainConfig,
                    device: torch.device) -> torch.optim.Optimizer:
    """Adam (Kingma & Ba 2015) or AdamW (Loshchilov & Hutter 2019) over the trainable
    parameters.

    With weight decay, biases and normalisation gains (the 1-d parameters) are not decayed:
    pulling a LayerNorm gain toward 0 only fights the normalisation. On CUDA and on the CPU
    the fused kernel is used: one pass over all parameters (on a 2-core CPU about 10x faster
    than the default per-tensor loop for a 7.6M-parameter model), and it can skip a step on
    the device when told the gradients are not finite (`optimizer_step`), so the loop needs no
    host sync for that.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.weight_decay > 0:
        groups = [g for g in ({"params": [p for p in params if p.dim() >= 2],
                               "weight_decay": cfg.weight_decay},
                              {"params": [p for p in params if p.dim() < 2],
                               "weight_decay": 0.0}) if g["params"]]
    else:
        groups = [{"params": params}]
    cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    return cls(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps,
               weight_decay=cfg.weight_decay, fused=device.type in ("cuda", "cpu"))


def optimizer_step(optimizer: torch.optim.Optimizer, found_inf: torch.Tensor) -> None:
    """Step unless `found_inf` (0-d tensor, bool or float 0/1) is nonzero, leaving weights
    and moments as they were when it is.

    A fused optimiser takes the flag itself (the protocol `torch.amp.GradScaler` uses), so the
    decision stays on the device; others need the flag on the host (free on a CPU).
    """
    if getattr(optimizer, "_step_supports_amp_scaling", False):
        vars(optimizer)["found_inf"] = found_inf.float()  # an attribute torch's class lacks
        try:
            optimizer.step()
        finally:
            del vars(optimizer)["found_inf"]
    elif not bool(found_inf):
        optimizer.step()


# A time budget's horizon is sized from the pace of a session's updates PACE_SKIP + 1 to
# HORIZON_PACE: the first few pay for warming caches (and torch.compile's compiling).
PACE_SKIP = 5
HORIZON_PACE = 20


class Schedule:
    """The learning rate of each update for `train.schedule`.

    inverse_sqrt: linear warm-up to `lr` over `warmup` updates, then lr * sqrt(warmup / u)
    (Vaswani et al. 2017 as fairseq writes it: `lr` is the peak). noam: Vaswani et al. 2017,
    eq. 3, lr * d_model^-0.5 * min(u^-0.5, u * warmup^-1.5), with `lr` a factor (as in JoeyNMT
    and OpenNMT: 1.0 with d_model 512 and warmup 4000 peaks near 7e-4, 2.0 near 1.4e-3).
    constant: `lr` after the linear warm-up.
    plateau: constant, multiplied by `plateau_factor` whenever the validation metric has not
    improved for more than `plateau_patience` validations, never below `min_lr`.
    linear: the warm-up, then a straight line from `lr` down to `min_lr` at update `horizon`,
    and `min_lr` after it (Li et al. 2020, "Budgeted training": under a fixed budget, a decay
    that ends with the budget trains best). The horizon is the run's length in updates; the
    trainer sets it (`set_horizon`) once the warm-up is over, when a time budget is known only
    by the pace, and the line starts where it is set (`start`: the warm-up's end, or later when
    the pace took longer to time), so the lr never jumps. Both are kept in the state, so a
    resumed run decays as before.
    """

    def __init__(self, cfg: TrainConfig, *, model_size: int) -> None:
        """model_size: d_model of a Transformer, hidden size of an RNN (noam's d_model)."""
        self.kind = cfg.schedule
        self.model_size = model_size
        self.peak, self.warmup = cfg.lr, cfg.warmup
        self.factor, self.patience, self.min_lr = (cfg.plateau_factor, cfg.plateau_patience,
                                                   cfg.min_lr)
        self.scale = 1.0  # plateau's multiplier
        self.best: float | None = None  # plateau's best metric so far
        self.bad = 0  # plateau: validations since the best
        self.horizon: int | None = None  # linear: the update that reaches min_lr
        self.start = self.warmup  # linear: the last update at the peak

    def lr_at(self, update: int) -> float:
        """The learning rate of update `update` (1-based)."""
        u, w = max(update, 1), self.warmup
        if self.kind == "noam":
            shape = u ** -0.5 if w == 0 else min(u ** -0.5, u * w ** -1.5)
            return self.peak * self.model_size ** -0.5 * shape
        if self.kind == "inverse_sqrt":
            if w == 0:
                return self.peak / math.sqrt(u)
            return self.peak * min(u / w, math.sqrt(w / u))
        warm = min(1.0, u / w) if w else 1.0
        if self.kind == "linear":
            if self.horizon is None or u <= self.start:
                return self.peak * warm
            left = max(0.0, 1.0 - (u - self.start) / max(self.horizon - self.start, 1))
            return self.min_lr + (self.peak - self.min_lr) * left
        return self.peak * warm * self.scale

    def wants_horizon(self, update: int) -> bool:
        """After update `update`, the linear schedule needs its horizon: the warm-up is over."""
        return self.kind == "linear" and self.horizon is None and update >= self.warmup

    def set_horizon(self, horizon: int, *, now: int) -> None:
        """Fall from the peak after update `now` to min_lr at update `horizon`."""
        self.start = max(int(now), self.warmup)
        self.horizon = max(int(horizon), self.start + 1)

    def apply(self, optimizer: torch.optim.Optimizer, update: int) -> float:
        """Set every parameter group's lr for update `update`; returns it."""
        lr = self.lr_at(update)
        for group in optimizer.param_groups:
            group["lr"] = lr
        return lr

    def observe(self, metric: float, *, higher_is_better: bool) -> bool:
        """Record a validation result; True when the plateau schedule lowered the lr."""
        if self.kind != "plateau":
            return False
        better = self.best is None or (metric > self.best if higher_is_better
                                       else metric < self.best)
        if better:
            self.best, self.bad = metric, 0
            return False
        self.bad += 1
        if self.bad <= self.patience or self.peak * self.scale <= self.min_lr:
            return False
        self.scale = max(self.scale * self.factor, self.min_lr / self.peak)
        self.bad = 0
        return True

    def state_dict(self) -> dict:
        return {"kind": self.kind, "scale": self.scale, "best": self.best, "bad": self.bad,
                "horizon": self.horizon, "start": self.start}

    def load_state_dict(self, state: dict) -> None:
        self.scale, self.best, self.bad = float(state["scale"]), state["best"], int(state["bad"])
        # a checkpoint of another schedule, or from before the horizon was chosen: none yet
        if state.get("kind") == self.kind and state.get("horizon") is not None:
            self.horizon, self.start = int(state["horizon"]), int(state["start"])
