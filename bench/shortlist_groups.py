"""How many sentences should share one shortlisted output layer: mtkit's own decoder over a
test set, beam 5, on the full vocabulary and with the shortlist searched in groups of each
--groups size (`mtkit.decode.shortlist.GROUP`), interleaved round by round in one process.

    python bench/shortlist_groups.py RUN --src test.src --ref test.tgt --groups 16 32 64 4096

Prints per system and round the CPU seconds (time.process_time: every thread of this
process) and wall seconds of the decoding, the load average; then medians, the ratio of each
to the full vocabulary, BLEU, the lines identical to the full vocabulary's, and the mean
number of output columns per group. Loading is not timed; one short warm-up runs first.
"""

from __future__ import annotations

import argparse
import gzip
import os
import statistics
import time
from pathlib import Path

import sacrebleu
import torch

import mtkit
import mtkit.decode

REPO = Path(__file__).resolve().parents[1]
MULTI30K = REPO.parent / "shared" / "data" / "multi30k"


def _lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def _columns(run: Path, lines: list[str], group: int) -> float:
    """Mean columns of a group's output layer over `lines` sorted by length."""
    from mtkit.data.spm import Tokenizer
    from mtkit.decode.shortlist import OutputShortlist
    from mtkit.run import data_dir, resolve_checkpoint, run_shortlist

    found, _ = run_shortlist(run)
    tok = Tokenizer.load(data_dir(resolve_checkpoint(run).parent))
    short = OutputShortlist.of(found.table, found.frequent, tok.tgt_vocab_size,
                               torch.device("cpu"))
    ids = sorted((tok.encode_src(s) for s in lines), key=len)
    sizes = []
    for start in range(0, len(ids), group):
        rows = ids[start:start + group]
        width = max(len(r) for r in rows)
        src = torch.tensor([r + [0] * (width - len(r)) for r in rows])
        sizes.append(short.rows(src).numel())
    return statistics.mean(sizes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--src", type=Path, default=MULTI30K / "test_2016_flickr.en.gz")
    ap.add_argument("--ref", type=Path, default=MULTI30K / "test_2016_flickr.de.gz")
    ap.add_argument("--groups", type=int, nargs="+", default=[16, 32, 64, 128, 4096])
    ap.add_argument("--precision", default=None, choices=[None, "int8"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--sentences", type=int, default=0, help="first N lines (0: all)")
    args = ap.parse_args()
    src, ref = _lines(args.src), _lines(args.ref)
    if args.sentences:
        src, ref = src[: args.sentences], ref[: args.sentences]
    opts = {"beam_size": 5, "method": "beam", "length_penalty": "average"}
    full = mtkit.load(args.run, device="cpu", threads=args.threads, precision=args.precision)
    short = mtkit.load(args.run, device="cpu", threads=args.threads, precision=args.precision,
                       shortlist=True)
    systems = {"full vocabulary": (full, None)}
    systems.update({f"shortlist, groups of {g}": (short, g) for g in args.groups})
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {args.run}; {len(src)} "
          f"sentences, beam 5, {args.threads} threads, precision {args.precision or 'fp32'}; "
          f"load average {os.getloadavg()}", flush=True)
    full.translate(src[:8], **opts)
    short.translate(src[:8], **opts)
    cpu: dict[str, list[float]] = {k: [] for k in systems}
    wall: dict[str, list[float]] = {k: [] for k in systems}
    outs: dict[str, list[str]] = {}
    for r in range(args.rounds):
        for name, (model, group) in systems.items():
            if group is not None:
                mtkit.decode.GROUP = group
            c, w = time.process_time(), time.perf_counter()
            outs[name] = model.translate(src, **opts)
            cpu[name].append(time.process_time() - c)
            wall[name].append(time.perf_counter() - w)
            print(f"round {r + 1} {name}: {cpu[name][-1]:.2f} CPU s, {wall[name][-1]:.2f} s; "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)
    base = statistics.median(cpu["full vocabulary"])
    print("| system | CPU s | wall s | x full, CPU | BLEU | lines = full | columns/group |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, (_, group) in systems.items():
        c, w = statistics.median(cpu[name]), statistics.median(wall[name])
        bleu = sacrebleu.corpus_bleu(outs[name], [ref]).score
        same = sum(a == b for a, b in zip(outs[name], outs["full vocabulary"], strict=True))
        cols = "-" if group is None else f"{_columns(args.run, src, group):,.0f}"
        print(f"| {name} | {c:.2f} | {w:.2f} | {base / c:.2f}x faster | {bleu:.2f} | "
              f"{same}/{len(src)} | {cols} |")
    print(f"# load average after {os.getloadavg()}")


if __name__ == "__main__":
    main()
