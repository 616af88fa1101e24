"""Issue 33's quality levers on the CPU recipe, each alone and combined, against the recipe as
it is, at a fixed wall-clock budget, interleaved in one run so the host's speed (which varies
2x between days) touches every configuration alike.

    python bench/quality.py --work /tmp/q --minutes 10 --seeds 1,2

Training configurations (each recipes/en-de-cpu.yaml with --set overrides):
  today      the recipe as shipped
  average    train.average_last: 5 of checkpoints 50 updates apart (the better of best.pt and
             averaged.pt on validation is the run's model)
  sampling   train.subword_sampling.alpha: 0.3 (unigram, whole lattice: ~12% more pieces)
  rdrop      train.rdrop.weight: 1.0 (two passes a batch and a KL: a third of the updates)
  linear     train.schedule: linear (the lr falls from its peak to min_lr as the budget ends,
             instead of inverse_sqrt's slow decay: Li et al. 2020, budgeted training)
  combined   the training levers that beat `today` with the first seed (or --combined)
The length lever needs no training of its own: every run is scored as trained, then
`mtkit tune-length` chooses its length penalty on the validation split and the run is scored
again (rows `+length`). So `today +length` is the length lever alone, on the same model.
`today` and `combined` run with every seed of --seeds, the others with the first (one seed
chooses; two compare). Rounds go seed by seed, each through the configurations in order;
`combined` comes last in a round, so the first round chooses it. When no training lever won,
`combined` is `today` (+length) and is not trained again.
Each run is scored on Multi30k test2016 (the run's model and decoding, beam 5): BLEU, chrF2,
the brevity penalty and hyp/ref length, with the updates it made and the load average before
and after. Prints a table (means over seeds) and writes every record to WORK/results.jsonl.
The data is read from $MTKIT_DATA_MIRROR (default ../shared/data/multi30k), written under
--work only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RECIPE = REPO / "recipes" / "en-de-cpu.yaml"
MIRROR = Path(os.environ.get("MTKIT_DATA_MIRROR", REPO.parent / "shared" / "data" / "multi30k"))

LEVERS: dict[str, list[str]] = {
    "today": [],
    # Checkpoints 50 updates apart: at the validations' spacing (250 updates, three in a 10-minute
    # run) the average would mix a model a third into its training with the last one.
    "average": ["train.average_last=5", "train.keep_last=5", "train.checkpoint_every=50"],
    "sampling": ["train.subword_sampling.alpha=0.3"],
    "rdrop": ["train.rdrop.weight=1.0"],
    "linear": ["train.schedule=linear"],
}


def run_mtkit(*args: str, log: Path) -> None:
    """`mtkit ARGS` in a child process reading the mirror, its output appended to `log`."""
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"$ mtkit {' '.join(args)}\n")
        f.flush()
        subprocess.run([sys.executable, "-m", "mtkit", *args], stdout=f, stderr=f, check=True,
                       env={**os.environ, "MTKIT_DATA_MIRROR": str(MIRROR)})


def _score(run: Path, hyp: Path) -> dict:
    """test2016 as translated into `hyp`, against the run's reference."""
    import sacrebleu

    from mtkit.fileio import read_lines

    hyps = read_lines(hyp)
    refs = read_lines(run / "data" / "test2016.tgt.txt")
    bleu = sacrebleu.corpus_bleu(hyps, [refs])
    return {"bleu": bleu.score, "chrf": sacrebleu.corpus_chrf(hyps, [refs]).score,
            "bp": bleu.bp, "ratio": bleu.sys_len / bleu.ref_len}


def _scored(run: Path, log: Path, threads: int) -> dict:
    """Score the run's model on test2016 with the run's decoding; the record of that."""
    run_mtkit("score", "--run", str(run), "--split", "test2016", "--metrics", "bleu,chrf",
           "--threads", str(threads), log=log)
    # the newest: this decoding's, or the one it reused when tune-length kept the recipe's
    made = max((run / "translations").glob("test2016.*.txt"), key=lambda f: f.stat().st_mtime)
    choice = json.loads((run / "model.json").read_text()) if (run / "model.json").is_file() else {}
    return {**_score(run, made),
            "model": choice.get("checkpoint", "best.pt"), "decode": choice.get("decode", {})}


def _one(work: Path, data: Path, name: str, sets: list[str], *, seed: int, minutes: float,
         alphas: str, threads: int) -> list[dict]:
    """Train one configuration; its records as trained and with the length penalty tuned."""
    run = work / f"{name}-s{seed}"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    shutil.copytree(data, run / "data")  # prepared once: the same data for every run
    log = run.parent / f"{run.name}.log"
    load0 = os.getloadavg()
    t0 = time.monotonic()
    args = [a for s in [*sets, f"train.seed={seed}", f"train.max_time={minutes * 60:.0f}s",
                        f"train.threads={threads}"] for a in ("--set", s)]
    run_mtkit("train", str(RECIPE), "--run-dir", str(run), *args, log=log)
    trained = time.monotonic() - t0
    load1 = os.getloadavg()
    recs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    end = next(r for r in reversed(recs) if r["kind"] == "end")
    common = {"seed": seed, "sets": sets, "updates": end["update"], "train_s": round(trained, 1),
              "load_before": [round(x, 2) for x in load0],
              "load_after": [round(x, 2) for x in load1]}
    plain = {"config": name, **common, **_scored(run, log, threads)}
    run_mtkit("tune-length", str(run), "--alphas", alphas, "--threads", str(threads), log=log)
    tuned = {"config": f"{name} +length", **common, **_scored(run, log, threads)}
    return [plain, tuned]


def _table(results: list[dict]) -> str:
    """Means over seeds; each configuration's difference is to `today` as trained on the same
    seeds (a lever run with seed 1 alone is compared with today's seed-1 run)."""
    rows = ["| config | seeds | updates | BLEU (vs today, same seeds) | chrF2 | BP | hyp/ref | "
            "model, decoding |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    today = {r["seed"]: r["bleu"] for r in results if r["config"] == "today"}
    for name in dict.fromkeys(r["config"] for r in results):
        rs = [r for r in results if r["config"] == name]
        mean = {k: statistics.mean(r[k] for r in rs) for k in ("bleu", "chrf", "bp", "ratio")}
        seeds = [r["seed"] for r in rs]
        delta = ""
        if name != "today" and all(s in today for s in seeds):
            delta = f" ({mean['bleu'] - statistics.mean(today[s] for s in seeds):+.2f})"
        bleus = "/".join(f"{r['bleu']:.2f}" for r in rs)
        how = "; ".join(sorted({f"{r['model']} {r['decode'] or ''}".strip() for r in rs}))
        rows.append(f"| {name} | {','.join(map(str, seeds))} | "
                    f"{'/'.join(str(r['updates']) for r in rs)} | {mean['bleu']:.2f}{delta} "
                    f"[{bleus}] | {mean['chrf']:.2f} | {mean['bp']:.3f} | {mean['ratio']:.3f} "
                    f"| {how} |")
    return "\n".join(rows)


def _winners(results: list[dict]) -> list[str]:
    """The training levers whose first-seed run beat today's (both as trained)."""
    first = results[0]["seed"]
    bleu = {r["config"]: r["bleu"] for r in results if r["seed"] == first}
    return [n for n in LEVERS if n != "today" and n in bleu and bleu[n] > bleu["today"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="folder for the runs")
    ap.add_argument("--minutes", type=float, default=10.0, help="training budget per run")
    ap.add_argument("--seeds", default="1,2", help="seeds of today and combined")
    ap.add_argument("--configs", default="today,average,sampling,rdrop,linear,combined",
                    help="configurations run, in this order within a round")
    ap.add_argument("--combined", default="",
                    help="the training levers of the combined configuration (default: those "
                         "that beat today with the first seed)")
    ap.add_argument("--alphas", default="1.5,2.0,2.5",
                    help="tune-length's GNMT alphas (besides the recipe's 1.0, none and average)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: its default)")
    ap.add_argument("--report", action="store_true",
                    help="train nothing: print the table of every record in WORK/results.jsonl "
                         "(all the invocations that wrote there)")
    a = ap.parse_args()
    if a.report:
        lines = (a.work / "results.jsonl").read_text(encoding="utf-8").splitlines()
        print(_table([json.loads(x) for x in lines]))
        return
    seeds = [int(s) for s in a.seeds.split(",")]
    configs = a.configs.split(",")
    for name in [*configs, *(a.combined.split(",") if a.combined else [])]:
        if name not in LEVERS and name != "combined":
            sys.exit(f"quality.py: unknown configuration {name!r}; expected one of "
                     f"{', '.join([*LEVERS, 'combined'])}")
    a.work.mkdir(parents=True, exist_ok=True)
    prep = a.work / "prep"
    if not (prep / "data" / "manifest.json").is_file():
        shutil.rmtree(prep, ignore_errors=True)
        run_mtkit("prep", str(RECIPE), "--run-dir", str(prep), log=a.work / "prep.log")
    started = datetime.datetime.now(datetime.timezone.utc)
    print(f"quality.py: {started:%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} "
          f"CPUs, load {os.getloadavg()}, {a.minutes:g} min per run, seeds {seeds}",
          flush=True)
    results: list[dict] = []
    combined = a.combined.split(",") if a.combined else None
    with open(a.work / "results.jsonl", "a", encoding="utf-8") as out:
        for i, seed in enumerate(seeds):
            for name in configs:
                if i > 0 and name not in ("today", "combined"):
                    continue
                if name == "combined":
                    if combined is None:
                        combined = _winners(results)
                        print(f"  combined: {', '.join(combined) or 'no training lever won'}",
                              flush=True)
                    if not combined:
                        continue  # combined is today (+length): its rows are today's
                sets = [s for p in (combined if name == "combined" else [name])
                        for s in LEVERS[p]]
                recs = _one(a.work, prep / "data", name, sets, seed=seed, minutes=a.minutes,
                            alphas=a.alphas, threads=a.threads)
                for res in recs:
                    out.write(json.dumps(res) + "\n")
                    results.append(res)
                    print(f"  {res['config']} seed {seed}: BLEU {res['bleu']:.2f}, chrF2 "
                          f"{res['chrf']:.2f}, BP {res['bp']:.3f}, {res['updates']} updates, "
                          f"load {res['load_before'][0]:.2f} -> {res['load_after'][0]:.2f}",
                          flush=True)
                out.flush()
    print(_table(results))


if __name__ == "__main__":
    main()
