"""Where mtkit's CPU-seconds go when it decodes: torch.profiler over beam search of Multi30k
test2016 (or --src) with mtkit's own decoder, per operator, for fp32 and int8.

    python bench/decode_profile.py runs/en-de-multi30k --threads 2 --sentences 300

Prints, per precision: the process CPU seconds of the decoding (time.process_time, both
threads), the profiler's total of operator self-times, and the top operators by self CPU
time with their share; what the operators do not account for is Python and the framework
between them. Loading is not timed; one short warm-up runs first. The profiler adds its own
overhead (a few percent on these op counts): compare rows within one run.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import io
import os
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sentences", type=int, default=300)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--top", type=int, default=14)
    ap.add_argument("--src", type=Path, default=REPO.parent / "shared" / "data" / "multi30k"
                    / "test_2016_flickr.en.gz")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    opener = gzip.open if args.src.suffix == ".gz" else open
    with opener(args.src, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()[: args.sentences]
    from mtkit.models.quantize import quantize_linear
    from mtkit.run import load_model
    from mtkit.translation.lines import StreamTranslator

    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {args.run}; "
          f"{len(lines)} sentences, beam {args.beam}, {args.threads} threads; load average "
          f"{os.getloadavg()}")
    for precision in ("fp32", "int8"):
        model, recipe, tok = load_model(args.run, "cpu")
        if precision == "int8":
            model = quantize_linear(model)
        cfg = dataclasses.replace(recipe.decode, method="beam", beam_size=args.beam,
                                  length_penalty="average")
        worker = StreamTranslator(model, tok, cfg, device=torch.device("cpu"),
                                  max_src_len=recipe.data.max_len,
                                  max_out_len=recipe.output_cap())
        worker.run(lines[:16], io.StringIO())
        cpu = time.process_time()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            stats = worker.run(lines, io.StringIO())
        cpu = time.process_time() - cpu
        events = prof.key_averages()
        total = sum(e.self_cpu_time_total for e in events) / 1e6
        print(f"\n## {precision}: {cpu:.2f} CPU s for {stats.sentences} sentences "
              f"({stats.tokens} tokens, {stats.seconds:.2f} s wall); operators' self time "
              f"{total:.2f} s (per thread of the caller; intra-op threads add to CPU s)")
        print("| operator | self CPU s | share of operators | calls |")
        print("| --- | --- | --- | --- |")
        for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[: args.top]:
            s = e.self_cpu_time_total / 1e6
            print(f"| {e.key} | {s:.3f} | {s / total:.1%} | {e.count} |")


if __name__ == "__main__":
    main()
