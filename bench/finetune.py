"""What a general start buys a domain model, and what fine-tuning costs the general one, on
the CPU in one run (`mtkit train --init-from`, `data.spm.from_run`).

    python bench/finetune.py --work /tmp/ft --general 3m --finetune 3m

Three runs of recipes/en-de-cpu.yaml's model, each trained for a fixed wall-clock budget:
  general    Tatoeba en-de (../shared/data/tatoeba), a test split carved off by English sentence
             (every pair of a held-out English sentence goes to the test split: no leakage)
  finetuned  the general run, fine-tuned on Multi30k (--init-from, its sentencepiece model,
             lr 2e-4, warm-up 50), for --finetune
  multi30k   Multi30k only, for --general + --finetune (the same total budget)
Each is scored (greedy search, sacreBLEU) on Multi30k test2016 and on the Tatoeba test split
(`mtkit score --run RUN --split NAME --greedy --json`). Prints a table and the load average.
The data is read from $MTKIT_DATA_ROOT (default ../shared/data) and written under --work only.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("MTKIT_DATA_ROOT", REPO.parent / "shared" / "data")).resolve()
M30K = DATA / "multi30k"


def _carve(work: Path, n_test: int, n_valid: int) -> dict[str, dict[str, str]]:
    """Tatoeba split by a hash of the English sentence into train / valid / test files."""
    en = gzip.open(DATA / "tatoeba" / "all.en.gz", "rt", encoding="utf-8").read().splitlines()
    de = gzip.open(DATA / "tatoeba" / "all.de.gz", "rt", encoding="utf-8").read().splitlines()
    buckets: dict[str, list[tuple[str, str]]] = {"train": [], "valid": [], "test": []}
    for e, d in zip(en, de, strict=True):
        h = int(hashlib.sha256(e.encode("utf-8")).hexdigest()[:8], 16) % 1000
        buckets["test" if h < 10 else "valid" if h < 20 else "train"].append((e, d))
    buckets["test"], buckets["valid"] = buckets["test"][:n_test], buckets["valid"][:n_valid]
    out = {}
    for name, pairs in buckets.items():
        out[name] = {}
        for side, i in (("src", 0), ("tgt", 1)):
            path = work / f"tatoeba.{name}.{side}"
            path.write_text("".join(p[i] + "\n" for p in pairs), encoding="utf-8")
            out[name][side] = str(path)
    return out


def _recipe(work: Path, name: str, train: dict, valid: dict, tests: dict, **train_sets) -> Path:
    r = yaml.safe_load((REPO / "recipes" / "en-de-cpu.yaml").read_text(encoding="utf-8"))
    r["name"] = name
    r["data"]["train"], r["data"]["valid"], r["data"]["test"] = train, valid, tests
    r["train"].update(train_sets)
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(r, sort_keys=False), encoding="utf-8")
    return path


def _mtkit(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "mtkit", *args], check=True)


def _bleu(run: Path, split: str) -> float:
    out = subprocess.run([sys.executable, "-m", "mtkit", "score", "--run", str(run), "--split",
                          split, "--greedy", "--json"], check=True, capture_output=True,
                         text=True).stdout
    found = []

    def walk(v: object) -> None:  # the BLEU score wherever the JSON puts it
        if isinstance(v, dict):
            for k, x in v.items():
                if k.lower() == "bleu" and isinstance(x, int | float):
                    found.append(float(x))
                elif k.lower() == "bleu" and isinstance(x, dict) and "score" in x:
                    found.append(float(x["score"]))
                else:
                    walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(json.loads(out))
    return found[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--general", default="3m", help="budget of the general run")
    ap.add_argument("--finetune", default="3m", help="budget of the fine-tuning run")
    ap.add_argument("--total", default="6m", help="budget of the Multi30k-only run (the sum)")
    ap.add_argument("--threads", default="2")
    args = ap.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {os.getloadavg()}", flush=True)
    tato = _carve(work, n_test=1000, n_valid=500)
    m30k = {s: {"src": str(M30K / f"{s}.en.gz"), "tgt": str(M30K / f"{s}.de.gz")}
            for s in ("train", "val", "test_2016_flickr")}
    tests = {"test2016": m30k["test_2016_flickr"], "tatoeba": tato["test"]}
    general = _recipe(work, "general", tato["train"], tato["valid"], tests)
    only = _recipe(work, "multi30k", m30k["train"], m30k["val"], tests)
    child = _recipe(work, "finetuned", m30k["train"], m30k["val"], tests, lr=2.0e-4, warmup=50)
    runs = {name: work / "runs" / name for name in ("general", "finetuned", "multi30k")}
    common = ["--threads", args.threads, "--device", "cpu"]
    _mtkit("train", str(general), "--run-dir", str(runs["general"]), *common,
           "--set", f"train.max_time={args.general}")
    _mtkit("train", str(child), "--run-dir", str(runs["finetuned"]), *common,
           "--init-from", str(runs["general"]), "--set", f"data.spm.from_run={runs['general']}",
           "--set", f"train.max_time={args.finetune}")
    _mtkit("train", str(only), "--run-dir", str(runs["multi30k"]), *common,
           "--set", f"train.max_time={args.total}")
    print(f"load average after training: {os.getloadavg()}", flush=True)
    print("| run | budget | test2016 BLEU | Tatoeba test BLEU |")
    print("| --- | --- | --- | --- |")
    budgets = {"general": args.general, "finetuned": f"{args.general} + {args.finetune}",
               "multi30k": args.total}
    for name, run in runs.items():
        print(f"| {name} | {budgets[name]} | {_bleu(run, 'test2016'):.1f} | "
              f"{_bleu(run, 'tatoeba'):.1f} |", flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
