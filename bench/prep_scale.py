"""Prep and training start on corpora of millions of pairs (issue 16).

For each N, repeats the Tatoeba en-de corpus (../shared/data/tatoeba) to N pairs as plain text
under a scratch folder, runs ``mtkit prep`` on it with the settings of recipes/en-de.yaml
(8k joint unigram), then ``mtkit train`` for a few updates, each as its own process, and prints:
prep seconds (and its passes), pairs/s, the peak resident memory of prep, of training up to its
first update, and the seconds from launching ``mtkit train`` to its first update. The scratch
corpus and runs are deleted after each N.

Peak memory is polled every 50 ms over the process and its children (sum of VmRSS), and also
taken from the kernel's high-water mark (wait4 of the process; VmHWM at the first update).

    .venv/bin/python bench/prep_scale.py                       # N = 0.2M, 2M, 10M
    .venv/bin/python bench/prep_scale.py --sizes 200000 --baseline /tmp/mtkit-main

`--baseline DIR` also runs the same steps with the mtkit source tree in DIR (e.g. ``git
archive main | tar -x -C DIR``) for every N up to --baseline-max, interleaved with this tree.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
TATOEBA = REPO.parent / "shared" / "data" / "tatoeba"


def write_corpus(folder: Path, pairs: int) -> tuple[Path, Path, Path, Path]:
    """Tatoeba repeated (and cut) to `pairs` lines per side, and a 500-pair validation split
    (every 300th pair); plain text, as big corpora usually arrive after download."""
    paths = []
    for lang in ("en", "de"):
        with gzip.open(TATOEBA / f"all.{lang}.gz", "rb") as f:
            lines = f.read().splitlines(keepends=True)
        train, valid = folder / f"train.{lang}", folder / f"valid.{lang}"
        with open(train, "wb") as out:
            for _ in range(pairs // len(lines)):
                out.write(b"".join(lines))
            out.write(b"".join(lines[:pairs % len(lines)]))
        valid.write_bytes(b"".join(lines[::300][:500]))
        paths += [train, valid]
    return paths[0], paths[2], paths[1], paths[3]


def write_recipe(folder: Path, files: tuple[Path, ...], *, spm_sample: int,
                 updates: int) -> Path:
    raw = yaml.safe_load((REPO / "recipes" / "en-de.yaml").read_text(encoding="utf-8"))
    src, tgt, vsrc, vtgt = map(str, files)
    raw["name"] = "prep-scale"
    raw["data"].update(train={"src": src, "tgt": tgt}, valid={"src": vsrc, "tgt": vtgt},
                       test={})
    raw["data"]["spm"]["input_sentence_size"] = spm_sample
    raw["train"].update(device="cpu", max_updates=updates, max_epochs=0, log_every=1,
                        valid_every=10**9, valid_metric="loss", patience=0)
    path = folder / "recipe.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


def _tree_rss_kb(pid: int) -> int:
    """Resident memory of a process and all its descendants, in kB (0 once it is gone)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next((int(line.split()[1]) for line in f if line.startswith("VmRSS")),
                              0)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return total


def _hwm_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
    except (OSError, StopIteration):
        return 0


class Watched:
    """A command run as a child process, its memory polled while it runs."""

    def __init__(self, cmd: list[str], cwd: Path, log: Path) -> None:
        self.t0 = time.perf_counter()
        self._log = open(log, "wb")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(cmd, cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT)
        self.peak_kb = 0
        self._done = False
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._done:
            self.peak_kb = max(self.peak_kb, _tree_rss_kb(self.proc.pid))
            time.sleep(0.05)

    def wait(self) -> tuple[int, float, int]:
        """(exit status, seconds, kernel high-water mark of the process in kB); sets
        `cpu_s`, the CPU seconds it used (user + system, its children included), which
        other jobs on the machine move less than wall-clock seconds."""
        _, status, usage = os.wait4(self.proc.pid, 0)
        seconds = time.perf_counter() - self.t0
        self.cpu_s = usage.ru_utime + usage.ru_stime
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self._done = True
        self._thread.join()
        self._log.close()
        return self.proc.returncode, seconds, usage.ru_maxrss


def _fail(what: str, rc: int, log: Path) -> None:
    tail = log.read_text(errors="replace").strip().splitlines()[-5:]
    sys.exit(f"{what} failed ({rc}):\n" + "\n".join(tail))


def run_prep(code: Path, recipe: Path, run_dir: Path) -> dict:
    w = Watched([sys.executable, "-m", "mtkit", "prep", str(recipe), "--run-dir", str(run_dir)],
                code, run_dir.parent / f"{run_dir.name}.prep.log")
    rc, seconds, hwm = w.wait()
    if rc != 0:
        _fail("prep", rc, run_dir.parent / f"{run_dir.name}.prep.log")
    man = json.loads((run_dir / "data" / "manifest.json").read_text(encoding="utf-8"))
    return {"wall_s": seconds, "cpu_s": w.cpu_s, "prep_s": man["seconds"],
            "phases": man.get("phases", {}),
            "pairs": man["splits"]["train"]["pairs"], "read": man["clean"]["read"],
            "peak_mb": max(w.peak_kb, hwm) / 1024}


def _first_update_done(metrics: Path) -> bool:
    return metrics.is_file() and any(json.loads(line).get("kind") == "train"
                                     for line in metrics.read_text().splitlines() if line)


def run_train(code: Path, recipe: Path, run_dir: Path) -> dict:
    """Seconds and peak memory of `mtkit train` when its set-up is done (the "training a ...
    model" log line, just before the first batch) and when its first update is done."""
    log = run_dir.parent / f"{run_dir.name}.train.log"
    w = Watched([sys.executable, "-m", "mtkit", "train", str(recipe), "--run-dir", str(run_dir)],
                code, log)
    setup = first = None
    while w.proc.poll() is None and first is None:
        now, hwm = time.perf_counter() - w.t0, max(w.peak_kb, _hwm_kb(w.proc.pid)) / 1024
        if setup is None and b": training a " in log.read_bytes():
            setup = (now, hwm)
        if _first_update_done(run_dir / "metrics.jsonl"):
            first = (now, hwm)
        time.sleep(0.02)
    rc, seconds, hwm = w.wait()
    if rc != 0 or first is None or setup is None:
        _fail("train", rc, log)
    return {"setup_s": setup[0], "setup_peak_mb": setup[1], "first_update_s": first[0],
            "start_peak_mb": first[1], "train_s": seconds,
            "train_peak_mb": max(w.peak_kb, hwm) / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="200000,2000000,10000000",
                    help="comma-separated corpus sizes in pairs")
    ap.add_argument("--spm-sample", type=int, default=1_000_000,
                    help="data.spm.input_sentence_size (sentences sampled for sentencepiece)")
    ap.add_argument("--updates", type=int, default=20, help="training updates to run")
    ap.add_argument("--work", default=None, help="scratch folder (default: a new one in /tmp)")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="an mtkit source tree to run as well, for comparison")
    ap.add_argument("--baseline-max", type=int, default=2_000_000,
                    help="largest N the baseline runs (it holds the corpus in memory)")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="mtkit-prep-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    trees = [("this", REPO)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; spm sample {args.spm_sample:,}, "
          f"{args.updates} updates", flush=True)
    print("| N pairs | code | prep s (read / spm / encode) | pairs/s | prep CPU s | "
          "prep peak RSS MB | train set-up s / peak MB | first update s / peak MB | load |",
          flush=True)
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |", flush=True)
    try:
        for n in (int(x) for x in args.sizes.split(",")):
            folder = work / f"n{n}"
            folder.mkdir()
            recipe = write_recipe(folder, write_corpus(folder, n), spm_sample=args.spm_sample,
                                  updates=args.updates)
            for name, code in trees:
                if name == "baseline" and n > args.baseline_max:
                    continue
                run_dir = folder / f"run-{name}"
                p = run_prep(code, recipe, run_dir)
                t = run_train(code, recipe, run_dir)
                ph = p["phases"]
                split = (f" ({ph['read']:.1f} / {ph['sentencepiece']:.1f} / {ph['encode']:.1f})"
                         if ph else "")
                rate = p["read"] / p["prep_s"]
                print(f"| {n:,} | {name} | {p['prep_s']:.1f}{split} | {rate:,.0f}"
                      f" | {p['cpu_s']:.0f} | {p['peak_mb']:,.0f} | "
                      f"{t['setup_s']:.1f} / {t['setup_peak_mb']:,.0f} | "
                      f"{t['first_update_s']:.1f} / {t['start_peak_mb']:,.0f} | "
                      f"{os.getloadavg()[0]:.2f} |", flush=True)
                shutil.rmtree(run_dir)
            shutil.rmtree(folder)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
