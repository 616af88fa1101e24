"""How long a training checkpoint takes to write, for the SIGTERM one that must fit in
torchrun's 30 s between SIGTERM and SIGKILL (and a scheduler's grace period).

    python bench/checkpoint_write.py --runs 3 --dir /tmp/ckpt

Builds two models on the CPU, takes one Adam update so that the optimizer holds its moments,
and times `mtkit.run.save_checkpoint` of the state the trainer writes (weights, optimizer,
schedule, RNG states, recipe), median of --runs, into --dir (use the file system your runs
live on): recipes/en-de.yaml's model (8,000 pieces) and a Transformer-base (Vaswani et al.
2017: d_model 512, 6+6 layers, ffn 2048, 8 heads, a 32,000-piece joint vocabulary). Prints
the file size, the median seconds and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from mtkit.config import dump_recipe, load_recipe
from mtkit.models.build import build_model
from mtkit.run import save_checkpoint
from mtkit.train.checkpoint import capture_rng
from mtkit.train.optim import Schedule, build_optimizer

REPO = Path(__file__).resolve().parent.parent
BASE = ["model.transformer.d_model=512", "model.transformer.heads=8",
        "model.transformer.enc_layers=6", "model.transformer.dec_layers=6",
        "model.transformer.ffn_dim=2048"]


def _state(sets: list[str], vocab: int) -> dict:
    recipe = load_recipe(REPO / "recipes" / "en-de.yaml", ["train.device=cpu", *sets])
    model = build_model(recipe.model, vocab, vocab)
    optimizer = build_optimizer(model, recipe.train, torch.device("cpu"))
    for p in model.parameters():  # one update: Adam's moments exist, as in training
        p.grad = torch.randn_like(p) * 1e-3
    optimizer.step()
    return {"recipe": dump_recipe(recipe), "vocab": {"src": vocab, "tgt": vocab},
            "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "schedule": Schedule(recipe.train, model_size=recipe.model.size).state_dict(),
            "scaler": None, "progress": {"update": 1}, "rng": [capture_rng()]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/mtkit-ckpt-bench"))
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {os.getloadavg()}")
    for name, sets, vocab in (("recipes/en-de.yaml", [], 8000),
                              ("Transformer-base", BASE, 32000)):
        state = _state(sets, vocab)
        params = sum(t.numel() for t in state["model"].values())
        path, times = args.dir / "checkpoint.pt", []
        for _ in range(args.runs):
            start = time.perf_counter()
            save_checkpoint(path, state)
            times.append(time.perf_counter() - start)
        size = path.stat().st_size / 2**20
        print(f"{name}: {params / 1e6:.1f}M weights, {size:.0f} MiB checkpoint, write "
              f"{statistics.median(times):.2f} s median of {args.runs} "
              f"({', '.join(f'{t:.2f}' for t in times)})")
        path.unlink()
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
