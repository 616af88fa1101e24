"""Training speed of a recipe's model on a device: target tokens per second and step time.

    python bench/train_speed.py recipes/en-de.yaml --device cpu --threads 2 --steps 20
    python bench/train_speed.py recipes/en-de.yaml --device cuda --steps 200 --batch-tokens 25000
    python bench/train_speed.py recipes/en-de.yaml --device cpu --threads 2 --steps 12 \
        --variant cpu=recipes/en-de-cpu.yaml --variant ffn512=,model.transformer.ffn_dim=512

With --variant LABEL=[RECIPE][,KEY=VALUE...] (repeatable) each variant (the positional recipe
is the baseline, "base") is built and timed in the same process, interleaved in rounds of
--round steps so that a noisy shared machine slows every variant alike, and the table gives
each one's throughput as a ratio to the baseline, with the load average before and after.

Each step is the training loop's own update (`mtkit.train.step`): collate the batches, copy
them to the device, forward (twice with `train.rdrop.weight`), label-smoothed loss, backward,
clip, optimizer step, in the recipe's precision (bf16 autocast on CUDA by default) and with
its optimizer (fused on CUDA).
The batches are the recipe's real training batches when its data is prepared in the run
directory (`mtkit prep RECIPE`), else random sentences with Multi30k-like lengths (about 13
source and 14 target tokens on average with an 8k joint vocabulary). The first --warmup steps
are not timed (allocator, cuDNN/compile warm-up).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from mtkit.config import load_recipe
from mtkit.data.batch import Batch, collate
from mtkit.data.prep import is_prepared
from mtkit.data.sampler import TokenBatchSampler
from mtkit.data.spm import Tokenizer
from mtkit.data.store import ParallelData
from mtkit.device import Amp, resolve_device, setup_backend
from mtkit.models.build import build_model
from mtkit.run import data_dir
from mtkit.train.distributed import Dist
from mtkit.train.optim import build_optimizer
from mtkit.train.step import finish_update, forward_backward


def random_corpus(n: int, vocab: int, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Sentences with Multi30k-like lengths under an 8k joint sentencepiece vocabulary:
    source ~ N(13, 4.5), target ~ source * N(1.07, 0.15), both clipped to [3, 60]."""
    rng = np.random.default_rng(seed)
    s_len = np.clip(rng.normal(13, 4.5, n).round(), 3, 60).astype(int)
    t_len = np.clip((s_len * rng.normal(1.07, 0.15, n)).round(), 3, 60).astype(int)
    src = [rng.integers(4, vocab, k) for k in s_len]
    tgt = [rng.integers(4, vocab, k) for k in t_len]
    return src, tgt


def batches_for(recipe, run_dir: Path, batch_tokens: int, seed: int):
    """(list of host batch factories, src vocab, tgt vocab, where the batches came from)."""
    max_len = recipe.data.max_len
    if is_prepared(recipe, run_dir):
        ddir = data_dir(run_dir)
        tok = Tokenizer.load(ddir)
        data = ParallelData.load(ddir, "train")
        src_lens, tgt_lens = data.src_lens, data.tgt_lens
        get_src, get_tgt = data.src, data.tgt
        vocab, what = (tok.src_vocab_size, tok.tgt_vocab_size), f"prepared data in {ddir}"
    else:
        vs = recipe.data.spm.vocab_size
        src, tgt = random_corpus(29000, vs, seed)
        src_lens = np.array([len(s) for s in src])
        tgt_lens = np.array([len(t) for t in tgt])
        get_src, get_tgt = src.__getitem__, tgt.__getitem__
        vocab, what = (vs, vs), "random Multi30k-like lengths (no prepared data)"
    sampler = TokenBatchSampler(src_lens, tgt_lens, batch_tokens=batch_tokens, seed=seed,
                                max_len=max_len)

    def make(idx: list[int]) -> Batch:
        return collate([get_src(i).tolist() for i in idx], [get_tgt(i).tolist() for i in idx],
                       idx, max_len)

    return [b.tolist() for b in sampler.batches()], make, vocab, what


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recipe", type=Path)
    ap.add_argument("--device", default=None, help="auto, cpu, cuda, cuda:N, mps "
                    "(default: the recipe's train.device)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps (default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (train.threads)")
    ap.add_argument("--batch-tokens", type=int, default=None, help="train.batch_tokens")
    ap.add_argument("--run-dir", type=Path, default=None,
                    help="where the recipe's data is prepared (default runs/<name>)")
    ap.add_argument("--set", action="append", default=[], help="recipe override KEY=VALUE")
    ap.add_argument("--variant", action="append", default=[],
                    help="LABEL=[RECIPE][,KEY=VALUE...]: also time this recipe (default: the "
                    "positional one) with these overrides, interleaved (repeatable)")
    ap.add_argument("--round", type=int, default=4, help="steps per variant and round when "
                    "interleaving (default 4)")
    return ap.parse_args(argv)


def _recipe(args: argparse.Namespace, path: Path, extra: list[str]):
    sets = list(args.set)
    for key, value in (("device", args.device), ("threads", args.threads),
                       ("batch_tokens", args.batch_tokens)):
        if value is not None:
            sets.append(f"train.{key}={value}")
    return load_recipe(path, sets + extra)


def _describe(recipe, model: torch.nn.Module, device: torch.device, amp: Amp) -> list[str]:
    m, cfg = recipe.model, recipe.train
    size = (f"{m.transformer.d_model} wide, {m.transformer.enc_layers}+"
            f"{m.transformer.dec_layers} layers" if m.arch == "transformer" else
            f"{m.rnn.cell} {m.rnn.hidden_dim}, {m.rnn.attention} attention")
    where = (f"{device}, {torch.get_num_threads()} threads" if device.type == "cpu" else
             f"{device} ({torch.cuda.get_device_name(device)})" if device.type == "cuda"
             else str(device))
    return [f"recipe      {recipe.name} ({m.arch}: {size}; "
            f"{model.parameter_counts()['total']:,} parameters)",
            f"device      {where}",
            f"precision   {amp.dtype or torch.float32}; compile {cfg.compile}; "
            f"batch_tokens {cfg.batch_tokens} x update_freq {cfg.update_freq}"]


class Runner:
    """One recipe's model, optimizer and batches; `step(k)` is the loop's k-th update."""

    def __init__(self, recipe, run_dir: Path) -> None:
        cfg = self.cfg = recipe.train
        self.recipe = recipe
        self.device = device = resolve_device(cfg.device)
        setup_backend(device, cfg)
        self.groups, self.make, (sv, tv), self.what = batches_for(
            recipe, run_dir, cfg.batch_tokens, cfg.seed)
        torch.manual_seed(cfg.seed)
        self.model = build_model(recipe.model, sv, tv).to(device).train()
        self.net = torch.compile(self.model, dynamic=True) if cfg.compile else self.model
        self.optimizer = build_optimizer(self.model, cfg, device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.amp = Amp.for_device(device, cfg.precision)

    def step(self, k: int) -> int:
        uf, cfg = self.cfg.update_freq, self.cfg
        batches = [self.make(self.groups[(k * uf + j) % len(self.groups)]) for j in range(uf)]
        ntok = sum(b.num_tgt_tokens for b in batches)
        loss, nll, _ = forward_backward(self.net, batches, device=self.device, amp=self.amp,
                                        smoothing=cfg.label_smoothing, normalizer=1.0 / ntok,
                                        rdrop=cfg.rdrop.weight)
        finish_update(self.params, self.optimizer, self.amp, clip_norm=cfg.clip_norm,
                      loss_sum=loss, nll_sum=nll, dist=Dist())
        return ntok

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def describe(self) -> list[str]:
        return _describe(self.recipe, self.model, self.device, self.amp)


def _single(args: argparse.Namespace, runner: Runner) -> None:
    for k in range(args.warmup):
        runner.step(k)
    runner.sync()
    times, step_tokens = [], []
    start = time.perf_counter()
    for k in range(args.warmup, args.warmup + args.steps):
        t = time.perf_counter()
        step_tokens.append(runner.step(k))
        if runner.device.type != "cuda":  # per-step times need no sync on a CPU
            times.append(time.perf_counter() - t)
    runner.sync()
    total = time.perf_counter() - start
    median_ms = median_rate = ""
    if times:
        median_ms = f" (median {1000 * statistics.median(times):.1f} ms)"
        rates = [n / t for n, t in zip(step_tokens, times, strict=True)]
        median_rate = f" (median over steps {statistics.median(rates):,.0f})"
    for line in runner.describe() + [
            f"batches     {runner.what}",
            f"steps       {args.steps} timed after {args.warmup} warm-up",
            f"step time   {1000 * total / args.steps:.1f} ms{median_ms}",
            f"throughput  {sum(step_tokens) / total:,.0f} target tokens/s{median_rate}"]:
        print(line)


def _variants(args: argparse.Namespace, run_dir: Path) -> dict[str, Runner]:
    runners = {"base": Runner(_recipe(args, args.recipe, []), run_dir)}
    for spec in args.variant:
        label, _, rest = spec.partition("=")
        path, *sets = rest.split(",")
        runners[label] = Runner(_recipe(args, Path(path) if path else args.recipe, sets),
                                run_dir)
    return runners


def _interleaved(args: argparse.Namespace, runners: dict[str, Runner]) -> None:
    for r in runners.values():
        for k in range(args.warmup):
            r.step(k)
        r.sync()
    seconds = dict.fromkeys(runners, 0.0)
    tokens = dict.fromkeys(runners, 0)
    done = dict.fromkeys(runners, 0)
    load0 = os.getloadavg()
    while min(done.values()) < args.steps:
        for label, r in runners.items():
            n = min(args.round, args.steps - done[label])
            t = time.perf_counter()
            for k in range(n):
                tokens[label] += r.step(args.warmup + done[label] + k)
            r.sync()
            seconds[label] += time.perf_counter() - t
            done[label] += n
    load1 = os.getloadavg()
    print(f"load average {load0[0]:.2f} before, {load1[0]:.2f} after; {args.steps} timed steps "
          f"per variant after {args.warmup} warm-up, interleaved in rounds of {args.round}")
    base = tokens["base"] / seconds["base"]
    for label, r in runners.items():
        rate = tokens[label] / seconds[label]
        print(f"\n[{label}] {rate:,.0f} target tokens/s, {1000 * seconds[label] / args.steps:.0f} "
              f"ms/update, {tokens[label] / args.steps:,.0f} target tokens/update; "
              f"{rate / base:.2f}x base")
        for line in r.describe():
            print("  " + line)


def main(argv: list[str] | None = None) -> None:
    args = _args(argv)
    base = _recipe(args, args.recipe, [])
    run_dir = args.run_dir or Path("runs") / base.name
    if not args.variant:
        _single(args, Runner(base, run_dir))
    else:
        _interleaved(args, _variants(args, run_dir))


if __name__ == "__main__":
    sys.exit(main())
