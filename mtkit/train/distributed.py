"""Multi-process training under torchrun: the process's place in the group, and the few
collectives the loop needs besides DistributedDataParallel's own gradient all-reduce.

``torchrun --nproc_per_node=K -m mtkit train RECIPE`` sets RANK, WORLD_SIZE and LOCAL_RANK;
without them training is one process and every helper here is a no-op.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as torch_dist

from mtkit.errors import MtkitError


@dataclass(frozen=True)
class Dist:
    """rank of world_size processes; local_rank picks the GPU on this machine."""

    rank: int = 0
    world_size: int = 1
    local_rank: int | None = None

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_reduce(self, t: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """In place, returned for chaining; op 'sum' or 'max'."""
        if self.enabled:
            torch_dist.all_reduce(t, op=torch_dist.ReduceOp.SUM if op == "sum"
                                  else torch_dist.ReduceOp.MAX)
        return t

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        if not self.enabled:
            return obj
        box = [obj]
        torch_dist.broadcast_object_list(box, src=0)
        return box[0]

    def main_result(self, fn: Callable[[], Any], failure: str) -> Any:
        """fn() (not None) run on rank 0, its result on every rank. Should it raise, rank 0
        raises its error and the others MtkitError(failure), where they would have waited
        for the result until the process group's timeout; so too where rank 0 has already
        ended (gloo's 'Connection closed by peer', a traceback on every other rank)."""
        res, failed = None, None
        try:
            res = fn() if self.is_main else None
        except BaseException as e:
            failed = e
        try:
            res = self.broadcast(res)
        except RuntimeError:  # torch.distributed's DistBackendError among them
            if self.is_main and failed is None:
                raise
            res = None  # rank 0 tells its own error, not the broadcast's
        if res is None:
            raise failed or MtkitError(failure)
        return res

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order, on every rank."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world_size
        torch_dist.all_gather_object(out, obj)
        return out


def dist_from_env() -> Dist:
    """The process group torchrun describes in the environment, or a single process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    return Dist(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))


def shared_store_warning() -> str | None:
    """Why torchrun's restarts of this job may fail, or None. Its agent shares one rendezvous
    store with every attempt's workers (unless TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, which the
    c10d rendezvous honours and the static one does not), and the store keeps each attempt's
    gloo/NCCL addresses under the same keys: a restarted worker can read its peer's address
    from the attempt before, then fail to connect, or wait for a connection that never comes
    until the process group's timeout (PyTorch issue 135712; bench/RESULTS.md)."""
    shared = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    if not shared or int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")) == 0:
        return None
    return ("torchrun may restart this job (--max-restarts) with the rendezvous store shared "
            "between attempts: a restarted attempt may fail to connect or hang; start torchrun "
            "with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 and a c10d rendezvous (--standalone or "
            "--rdzv-backend c10d)")


def init_process_group(dist: Dist, device: torch.device) -> None:
    """NCCL between GPUs, gloo between CPU processes."""
    if dist.enabled and not torch_dist.is_initialized():
        # torch.distributed.nn.functional's collectives take `group=group.WORLD` as a default
        # argument, evaluated when the module is first imported: by DistributedDataParallel,
        # after this call, so the defaults held the default group for good and
        # destroy_process_group could not end it (`mtkit.train.session.train` says why that
        # matters). Imported before the group exists, the defaults hold None.
        import torch.distributed.nn.functional  # noqa: F401

        backend = "nccl" if device.type == "cuda" else "gloo"
        # Ranks > 0 wait in a collective while rank 0 prepares data or validates alone: allow
        # an hour (NCCL's default is 10 minutes).
        torch_dist.init_process_group(backend, rank=dist.rank, world_size=dist.world_size,
                                      device_id=device if device.type == "cuda" else None,
                                      timeout=datetime.timedelta(hours=1))


def destroy_process_group(dist: Dist) -> None:
    if dist.enabled and torch_dist.is_initialized():
        torch_dist.destroy_process_group()
