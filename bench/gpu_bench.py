"""Training throughput of mtkit's update against a plain-PyTorch eager loop, same process, same
batches, same sizes (issue 8's table).

    python bench/gpu_bench.py --rows results.md                  # all four rows, on CUDA
    python bench/gpu_bench.py --only tf256-4k --seconds 10
    python bench/gpu_bench.py --device cpu --dry --rows /tmp/r.md  # a smoke run on a CPU

Rows (8k joint vocabulary, random sentences with Multi30k-like lengths, token-bucketed
batches as the trainer cuts them):

  tf512       Transformer 512 wide, 6+6 layers, FFN 2048, 8 heads, 25k-token batches
  tf256-4k    Transformer 256 wide, 3+3, FFN 1024, 4 heads, 4k-token batches
  tf256-25k   the same, 25k-token batches
  gru256-25k  bi-GRU 256 + Bahdanau attention with the context fed back into the GRU
              (recipes/en-de-rnn.yaml's model), 25k-token batches

Each row times two updates over the same host batches (CPU tensors, copied to the device in
every update as a training loop must):

  mtkit   `mtkit.train.step.forward_backward` + `finish_update`: bf16 autocast, label-smoothed
          loss, clipping, fused Adam with the skip-on-non-finite flag, no host syncs.
  plain   what one writes by hand: `nn.Transformer` (SDPA inside) or a GRUCell loop with
          additive attention, `F.cross_entropy(label_smoothing=0.1)`, `clip_grad_norm_`,
          fused AdamW, bf16 autocast.

Dropout is the same in both (0.1 everywhere for the Transformers, as nn.Transformer applies
one rate to residuals, attention weights and the FFN; 0.3 for the GRU as its recipe). Target
tokens per second count the real (non-pad) target tokens.
"""

from __future__ import annotations

import argparse
import gc
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from mtkit.config import Recipe, load_recipe
from mtkit.data.batch import Batch, collate
from mtkit.data.sampler import TokenBatchSampler
from mtkit.device import Amp, resolve_device, setup_backend
from mtkit.models.build import build_model
from mtkit.models.embedding import sinusoids
from mtkit.train.distributed import Dist
from mtkit.train.optim import build_optimizer
from mtkit.train.step import finish_update, forward_backward

REPO = Path(__file__).resolve().parents[1]
VOCAB = 8000
TF = ["model.transformer.dropout=0.1", "model.transformer.attn_dropout=0.1",
      "model.transformer.act_dropout=0.1", "model.transformer.norm=pre",
      "model.transformer.share_embeddings=true"]
ROWS = {  # name: (recipe, overrides, batch tokens, the issue's plain-PyTorch figure, target)
    "tf512": ("en-de.yaml", TF + ["model.transformer.d_model=512", "model.transformer.heads=8",
                                  "model.transformer.enc_layers=6",
                                  "model.transformer.dec_layers=6",
                                  "model.transformer.ffn_dim=2048"], 25000, 199e3, 300e3),
    "tf256-4k": ("en-de.yaml", TF, 4000, 124e3, 150e3),
    "tf256-25k": ("en-de.yaml", TF, 25000, 554e3, 600e3),
    "gru256-25k": ("en-de-rnn.yaml", [], 25000, 363e3, 440e3),
}


def random_batches(batch_tokens: int, seed: int = 1, n: int = 29000) -> list[Batch]:
    """Host batches of random ids with Multi30k-like lengths (source ~ N(13, 4.5), target ~
    source x N(1.07, 0.15), as bench/train_speed.py), cut and shuffled by the trainer's
    sampler."""
    rng = np.random.default_rng(seed)
    s_len = np.clip(rng.normal(13, 4.5, n).round(), 3, 60).astype(int)
    t_len = np.clip((s_len * rng.normal(1.07, 0.15, n)).round(), 3, 60).astype(int)
    src = [rng.integers(4, VOCAB, k) for k in s_len]
    tgt = [rng.integers(4, VOCAB, k) for k in t_len]
    sampler = TokenBatchSampler(s_len, t_len, batch_tokens=batch_tokens, seed=seed)
    return [collate([src[i] for i in idx], [tgt[i] for i in idx], idx)
            for idx in sampler.batches()]


# --------------------------------------------------------------------------- baselines


class PlainTransformer(nn.Module):
    """nn.Transformer (pre-norm) with a tied embedding/output table and sinusoidal
    positions."""

    def __init__(self, d: int, heads: int, layers: int, ffn: int, dropout: float) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d, padding_idx=0)
        nn.init.normal_(self.emb.weight, std=d ** -0.5)
        self.register_buffer("pos", sinusoids(512, d), persistent=False)
        self.drop = nn.Dropout(dropout)
        self.tf = nn.Transformer(d, heads, layers, layers, ffn, dropout, batch_first=True,
                                 norm_first=True)
        self.gen = nn.Linear(d, VOCAB)
        self.gen.weight = self.emb.weight
        self.scale = math.sqrt(d)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        def embed(x: torch.Tensor) -> torch.Tensor:
            return self.drop(self.emb(x) * self.scale + self.pos[: x.size(1)])

        t = tgt_in.size(1)
        pad = torch.zeros(src.shape, device=src.device).masked_fill(src == 0, -math.inf)
        causal = nn.Transformer.generate_square_subsequent_mask(t, device=src.device)
        out = self.tf(embed(src), embed(tgt_in), tgt_mask=causal, tgt_is_causal=True,
                      src_key_padding_mask=pad, memory_key_padding_mask=pad)
        return self.gen(out)


class PlainBahdanau(nn.Module):
    """Bahdanau et al. 2015 by hand: bi-GRU encoder over packed sequences, tanh bridge,
    additive attention from the previous state, GRUCell fed [embedding; context], deep
    output tanh(W [s; c; e])."""

    def __init__(self, e: int = 256, h: int = 256, a: int = 256, dropout: float = 0.3) -> None:
        super().__init__()
        self.src_emb = nn.Embedding(VOCAB, e, padding_idx=0)
        self.tgt_emb = nn.Embedding(VOCAB, e, padding_idx=0)
        self.enc = nn.GRU(e, h, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(2 * h, h)
        self.w_h = nn.Linear(2 * h, a, bias=False)
        self.w_s = nn.Linear(h, a, bias=False)
        self.v = nn.Linear(a, 1, bias=False)
        self.cell = nn.GRUCell(e + 2 * h, h)
        self.readout = nn.Linear(h + 2 * h + e, h)
        self.gen = nn.Linear(h, VOCAB)
        self.drop = nn.Dropout(dropout)

    def forward(self, src: torch.Tensor, src_lens: torch.Tensor,
                tgt_in: torch.Tensor) -> torch.Tensor:
        x = self.drop(self.src_emb(src))
        packed = pack_padded_sequence(x, src_lens.cpu(), batch_first=True, enforce_sorted=False)
        out, h_n = self.enc(packed)
        memory, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))
        s = torch.tanh(self.bridge(torch.cat([h_n[0], h_n[1]], -1)))
        keys, mask = self.w_h(memory), src != 0
        emb = self.drop(self.tgt_emb(tgt_in))
        states, contexts = [], []
        for e_t in emb.unbind(1):
            score = self.v(torch.tanh(self.w_s(s).unsqueeze(1) + keys)).squeeze(-1)
            alpha = score.masked_fill(~mask, -math.inf).softmax(-1)
            ctx = torch.bmm(alpha.unsqueeze(1), memory).squeeze(1)
            s = self.cell(torch.cat([e_t, ctx], -1), s)
            states.append(s)
            contexts.append(ctx)
        out = torch.cat([torch.stack(states, 1), torch.stack(contexts, 1), emb], -1)
        return self.gen(self.drop(torch.tanh(self.readout(out))))


# --------------------------------------------------------------------------- updates


Update = Callable[[Batch], int]


def mtkit_update(recipe: Recipe, device: torch.device, *, compile: bool) -> Update:
    """One training-loop update of mtkit on a host batch; returns its target tokens."""
    cfg = recipe.train
    torch.manual_seed(cfg.seed)
    model = build_model(recipe.model, VOCAB, VOCAB).to(device).train()
    net = torch.compile(model, dynamic=True) if compile else model
    opt = build_optimizer(model, cfg, device)
    params = [p for p in model.parameters() if p.requires_grad]
    amp = Amp.for_device(device, cfg.precision)

    def update(b: Batch) -> int:
        ntok = b.num_tgt_tokens
        loss, nll, _ = forward_backward(net, [b], device=device, amp=amp,
                                        smoothing=cfg.label_smoothing, normalizer=1.0 / ntok)
        finish_update(params, opt, amp, clip_norm=cfg.clip_norm, loss_sum=loss, nll_sum=nll,
                      dist=Dist())
        return ntok

    return update


def plain_update(recipe: Recipe, device: torch.device) -> Update:
    """The hand-written baseline of the same size."""
    torch.manual_seed(recipe.train.seed)
    if recipe.model.arch == "transformer":
        t = recipe.model.transformer
        model: nn.Module = PlainTransformer(t.d_model, t.heads, t.enc_layers, t.ffn_dim,
                                            t.dropout)
    else:
        r = recipe.model.rnn
        model = PlainBahdanau(r.emb_dim, r.hidden_dim, r.attn_dim, r.dropout)
    model = model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, fused=True)
    use_amp = device.type == "cuda"
    rnn = recipe.model.arch == "rnn"

    def update(b: Batch) -> int:
        host = b.pin_memory() if device.type == "cuda" else b
        src, tgt_in, tgt_out = (x.to(device, non_blocking=True)
                                for x in (host.src, host.tgt_in, host.tgt_out))
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp):
            logits = model(src, b.src_lens, tgt_in) if rnn else model(src, tgt_in)
        loss = F.cross_entropy(logits.float().flatten(0, 1), tgt_out.flatten(),
                               ignore_index=0, label_smoothing=0.1)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return b.num_tgt_tokens

    return update


def measure(update: Update, batches: list[Batch], device: torch.device, *, warmup: int,
            seconds: float, min_steps: int) -> tuple[float, float, int]:
    """(target tokens/s, ms per update, updates timed) after `warmup` untimed updates. The
    host may queue updates ahead of the GPU; the clock stops after a final synchronize."""
    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for k in range(warmup):
        update(batches[k % len(batches)])
    sync()
    tokens = steps = 0
    start = time.perf_counter()
    while steps < min_steps or time.perf_counter() - start < seconds:
        tokens += update(batches[(warmup + steps) % len(batches)])
        steps += 1
    sync()
    elapsed = time.perf_counter() - start
    return tokens / elapsed, 1000 * elapsed / steps, steps


def profile(update: Update, batches: list[Batch], device: torch.device, label: str,
            ms_per_update: float, steps: int = 3, top: int = 12) -> None:
    """Print where `steps` updates spend device time (torch.profiler): device time per update
    against the unprofiled wall time per update (a low share means the host, not the GPU,
    sets the pace) and the `top` operators by their own device time."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    update(batches[0])
    torch.cuda.synchronize(device)
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for k in range(steps):
            update(batches[(k + 1) % len(batches)])
        torch.cuda.synchronize(device)
    events = prof.key_averages()
    # Kernels and copies are the events of device type CUDA (the operators that launched
    # them carry the same time again), as the profiler's own table sums them.
    device_us = sum(e.self_device_time_total for e in events
                    if e.device_type == DeviceType.CUDA
                    and not getattr(e, "is_user_annotation", False)) / steps
    print(f"gpu_bench: profile {label}: {device_us / 1e3:.1f} ms of device time per update, "
          f"{ms_per_update:.1f} ms wall ({100 * device_us / 1e3 / ms_per_update:.0f}% busy)",
          flush=True)
    print(events.table(sort_by="self_device_time_total", row_limit=top, max_name_column_width=60),
          flush=True)


# --------------------------------------------------------------------------- rows


def _recipe(name: str, device: torch.device, dry: bool) -> tuple[Recipe, int]:
    recipe_file, sets, batch_tokens, _, _ = ROWS[name]
    if dry:
        batch_tokens = max(batch_tokens // 20, 200)
    sets = [*sets, f"train.device={device}", f"train.batch_tokens={batch_tokens}",
            f"data.spm.vocab_size={VOCAB}"]
    return load_recipe(REPO / "recipes" / recipe_file, sets), batch_tokens


def run_row(name: str, kinds: list[str], device: torch.device, args: argparse.Namespace,
            baselines: dict[str, tuple[float, float, int] | None]) -> list[str]:
    """Markdown table rows for one model/batch and the variants `kinds` (the plain baseline
    measured for this row is kept in `baselines` for a later compiled variant's ratio)."""
    recipe, batch_tokens = _recipe(name, device, args.dry)
    setup_backend(device, recipe.train)
    batches = random_batches(batch_tokens)
    *_, issue_plain, target = ROWS[name]
    timing = dict(warmup=args.warmup, seconds=args.seconds, min_steps=args.min_steps)
    results = {}
    for kind in kinds:
        try:
            update = (plain_update(recipe, device) if kind == "plain" else
                      mtkit_update(recipe, device, compile=kind == "mtkit compiled"))
            results[kind] = measure(update, batches, device, **timing)
        except Exception as e:  # one failing variant must not lose the others
            print(f"gpu_bench: {name} {kind}: FAIL {type(e).__name__}: {e}", file=sys.stderr)
            results[kind] = None
        finally:
            update = None
            _free(device)
        _log(name, kind, results[kind])
    if "plain" in results:
        baselines[name] = results["plain"]
    else:
        results["plain"] = baselines.get(name)
    return _rows(name, results, batch_tokens, issue_plain, target)


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _log(name: str, kind: str, r: tuple[float, float, int] | None) -> None:
    if r is not None:
        print(f"gpu_bench: {name:<11} {kind:<15} {r[0]:>12,.0f} tgt tok/s  "
              f"{r[1]:8.1f} ms/update  ({r[2]} updates)", flush=True)


def _rate(r: tuple[float, float, int] | None) -> str:
    if r is None:
        return "FAIL"
    rate = f"{r[0] / 1e3:,.0f}k" if r[0] >= 1e4 else f"{r[0]:,.0f}"
    return f"{rate} tok/s ({r[1]:.0f} ms)"


def _rows(name: str, results: dict, batch_tokens: int, issue_plain: float,
          target: float) -> list[str]:
    plain = results.get("plain")
    out = []
    for kind in [k for k in results if k != "plain"]:
        mine = results[kind]
        value, base = _rate(mine), _rate(plain)
        ratio = "-" if mine is None or plain is None else f"{mine[0] / plain[0]:.2f}x"
        ok = "" if mine is None else (" OK" if mine[0] >= target else " below")
        out.append(f"| train {name} ({kind}, {batch_tokens} tok) | {value} | {base} | {ratio} "
                   f"| >= {target / 1e3:.0f}k{ok} (issue's plain eager: "
                   f"{issue_plain / 1e3:.0f}k) |")
    return out


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    ap.add_argument("--only", nargs="*", default=list(ROWS), choices=list(ROWS),
                    help="rows to run (default all)")
    ap.add_argument("--compile", nargs="*", default=[], choices=list(ROWS),
                    help="rows that also time mtkit under torch.compile")
    ap.add_argument("--compiled-only", action="store_true",
                    help="time only the --compile rows (with their plain baseline)")
    ap.add_argument("--seconds", type=float, default=6.0, help="timed seconds per variant")
    ap.add_argument("--warmup", type=int, default=5, help="untimed updates first")
    ap.add_argument("--min-steps", type=int, default=10, help="timed updates at least")
    ap.add_argument("--profile", action="store_true",
                    help="after all timings, print each variant's device-time profile (CUDA only)")
    ap.add_argument("--dry", action="store_true",
                    help="batches 20x smaller (smoke test of the script on a CPU)")
    ap.add_argument("--rows", type=Path, default=None, help="append the table rows here")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = _args(argv)
    if args.compiled_only and not args.compile:
        sys.exit("gpu_bench: --compiled-only needs --compile ROW ...")
    device = resolve_device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    # Eager rows first, compiled variants last (their compile time is the least predictable),
    # and each row appended as soon as it is measured, so that a stage killed by its time
    # limit keeps what it measured.
    plan = [] if args.compiled_only else [(name, ["mtkit", "plain"]) for name in args.only]
    compiled = ["plain", "mtkit compiled"] if args.compiled_only else ["mtkit compiled"]
    plan += [(name, compiled) for name in args.only if name in args.compile]
    baselines: dict[str, tuple[float, float, int] | None] = {}
    for name, kinds in plan:
        for line in run_row(name, kinds, device, args, baselines):
            print(line, flush=True)
            if args.rows is not None:
                with open(args.rows, "a") as f:
                    f.write(line + "\n")
    if args.profile and device.type == "cuda":
        # After every timing: CUDA's profiling library stays loaded once used and slows
        # whatever is timed after it.
        for name, kinds in plan:
            profile_row(name, kinds, device, args)


def profile_row(name: str, kinds: list[str], device: torch.device,
                args: argparse.Namespace) -> None:
    """Device-time profiles of the variants `kinds` of one row (untimed warm-up first)."""
    recipe, batch_tokens = _recipe(name, device, args.dry)
    setup_backend(device, recipe.train)
    batches = random_batches(batch_tokens)
    for kind in kinds:
        try:
            update = (plain_update(recipe, device) if kind == "plain" else
                      mtkit_update(recipe, device, compile=kind == "mtkit compiled"))
            ms = measure(update, batches, device, warmup=args.warmup, seconds=0,
                         min_steps=args.min_steps)[1]
            profile(update, batches, device, f"{name} {kind}", ms)
        except Exception as e:
            print(f"gpu_bench: profile {name} {kind}: FAIL {type(e).__name__}: {e}",
                  file=sys.stderr)
        finally:
            update = None
            _free(device)


if __name__ == "__main__":
    main()
