"""How often a torchrun restart reconnects its workers, with the agent's rendezvous store shared
by every attempt (torchrun's default) and with one store per attempt
(TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1), on gloo between CPU processes.

    python bench/torchrun_restarts.py --runs 10

Each run is `torchrun --standalone --nproc_per_node=2 --max-restarts=1` of a worker that
joins a gloo process group, all-reduces once, and (rank 1 of the first attempt) exits 1, so
that the agent restarts both workers; the run succeeds when the second attempt all-reduces.
No mtkit code runs: the cause is torchrun's, not mtkit's. Prints, per mode, the successes,
the failures by the error they ended with, each run's seconds, and the load average.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKER = """
import datetime, os
import torch, torch.distributed as dist
first = os.environ["TORCHELASTIC_RESTART_COUNT"] == "0"
# the process group's timeout bounds a hung attempt (mtkit's is an hour)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
dist.all_reduce(torch.ones(1))
if first and dist.get_rank() == 1:
    os._exit(1)
dist.destroy_process_group()
"""

ERRORS = ("Connection refused", "Connect timeout", "Connection reset", "timed out")


def one_run(worker: Path, shared: bool, timeout: float) -> tuple[str, float]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", None)
    if not shared:
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    torchrun = Path(sys.executable).parent / "torchrun"
    t0 = time.monotonic()
    try:
        proc = subprocess.run([str(torchrun), "--standalone", "--nproc_per_node=2",
                               "--max-restarts=1", str(worker)], capture_output=True,
                              text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "hung past --timeout", time.monotonic() - t0
    seconds = time.monotonic() - t0
    if proc.returncode == 0:
        return "ok", seconds
    found = [e for e in ERRORS if re.search(e, proc.stderr)]
    return f"failed: {found[0] if found else 'exit ' + str(proc.returncode)}", seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="runs per mode")
    ap.add_argument("--timeout", type=float, default=300, help="seconds one run may take")
    args = ap.parse_args()
    print(f"torch {__import__('torch').__version__}; load average {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        worker = Path(tmp) / "worker.py"
        worker.write_text(WORKER)
        for shared in (True, False):
            outcomes, times = collections.Counter(), []
            for _ in range(args.runs):
                outcome, seconds = one_run(worker, shared, args.timeout)
                outcomes[outcome] += 1
                times.append(f"{seconds:.0f}")
            mode = "shared store (default)" if shared else "store per attempt"
            print(f"{mode}: {dict(outcomes)}; seconds {' '.join(times)}")
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
