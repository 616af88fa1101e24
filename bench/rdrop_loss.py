"""R-Drop's loss alone: forward and backward of `mtkit.train.loss.rdrop_loss` (autograd through
R-Drop's formula) on one batch's logits, against the plain label-smoothed loss of the same
(2N, V) logits.

    python bench/rdrop_loss.py --threads 2
    python bench/rdrop_loss.py --device cuda --tokens 25000

Each configuration is timed --reps times, interleaved; the table gives the fastest and the
median run, and each one's ratio to the plain loss, with the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch

from mtkit.models.vocab import PAD_ID
from mtkit.train.loss import LossSums, label_smoothed_nll, rdrop_loss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    ap.add_argument("--tokens", type=int, default=3072,
                    help="target tokens of the batch, each passed twice (default 3072)")
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    g = torch.Generator().manual_seed(0)
    width = 24  # Multi30k-like: sentences of 24 positions, the last 4 padding
    target = torch.randint(4, args.vocab, (max(1, args.tokens // width), width), generator=g)
    target[:, width - 4:] = PAD_ID
    logits = torch.randn(2 * target.size(0), width, args.vocab, generator=g)
    target, logits = target.to(device), logits.to(device)
    configs: dict[str, Callable[[torch.Tensor], LossSums]] = {
        "plain loss, 2N rows": lambda x: label_smoothed_nll(x, target.repeat(2, 1),
                                                            smoothing=0.1),
        "rdrop_loss": lambda x: rdrop_loss(x, target, smoothing=0.1, weight=1.0),
    }

    def timed(fn: Callable[[torch.Tensor], LossSums]) -> float:
        x = logits.clone().requires_grad_()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn(x).loss.backward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    load = os.getloadavg()[0]
    for fn in configs.values():  # warm-up
        timed(fn)
    times: dict[str, list[float]] = {name: [] for name in configs}
    for _ in range(args.reps):
        for name, fn in configs.items():
            times[name].append(timed(fn))
    print(f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after; {args.reps} runs "
          f"each, interleaved; {target.numel()} target positions x 2 passes, vocabulary "
          f"{args.vocab}, {device}, {torch.get_num_threads()} threads")
    base = statistics.median(times["plain loss, 2N rows"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:32} fastest {min(ts) * 1000:7.1f} ms  median {med * 1000:7.1f} ms  "
              f"{med / base:4.2f}x the plain loss")


if __name__ == "__main__":
    main()
