"""mtkit's own decoding against the same weights exported to CTranslate2 (float32 and int8),
whole commands from process start to exit, on Multi30k test2016.

    python bench/export_speed.py runs/en-de-multi30k --threads 2 --runs 3

Exports RUN twice (`mtkit export`, float32 and int8) into --work, then times
`mtkit translate MODEL -i test2016.en -o OUT --threads T` for the three systems, beam 5 and
greedy, `--runs` times each, interleaved (run 1 of every system and search, then run 2, ...),
and prints the median seconds, sentences/s, BLEU (sacreBLEU, default settings) and the ratio
to CTranslate2 float32. Beam search uses the length penalty both engines share (`average`;
CTranslate2's length_penalty 1); the BLEU of mtkit's own default (gnmt) is printed beside it.

Start-up is timed as the whole command on a one-line input with --greedy (process start, the
imports, loading, one batch decoded, exit), median of --runs, interleaved.

mtkit's modules are compiled to bytecode first (`compileall`, both trees), as an installed
package has them: with PYTHONDONTWRITEBYTECODE set, as on the machine these figures come
from, every run would otherwise compile mtkit's sources again (~0.07 s of start-up).

The load average (os.getloadavg) is printed before and after: compare figures within one run.
Beside wall-clock seconds, each cell gives the command's CPU seconds (user + system, from
getrusage of the child), which other processes on a shared machine disturb less.

--before TREE adds the same model decoded by an older source tree: "mtkit before", and
"ct2 float32 before" (the float32 export through that tree's `mtkit translate`).

--options int8 shortlist int8+shortlist adds mtkit's own decoder with those options
(`--precision int8`, `--shortlist`, both) as more systems, interleaved with the rest; the
shortlist is counted once (untimed) before the runs. --src/--ref time another test set (plain
or .gz files, e.g. the Tatoeba split of bench/tatoeba_model.py); --searches picks the
searches; --no-export leaves CTranslate2 out (the ratios are then to mtkit).
"""

from __future__ import annotations

import argparse
import compileall
import gzip
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST_SRC, TEST_REF = "test_2016_flickr.en.gz", "test_2016_flickr.de.gz"
SEARCHES = {"beam 5": ["--beam", "5", "--length-penalty", "average"], "greedy": ["--greedy"]}
OPTIONS = {"int8": ["--precision", "int8"], "shortlist": ["--shortlist"],
           "int8+shortlist": ["--precision", "int8", "--shortlist"]}


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="run directory or checkpoint of a Transformer")
    ap.add_argument("--threads", type=int, default=2, help="threads for every system (2)")
    ap.add_argument("--runs", type=int, default=3, help="timed runs per cell; median (3)")
    ap.add_argument("--mirror", type=Path, default=None, help="folder with the Multi30k files "
                    "(default $MTKIT_DATA_MIRROR, else ../shared/data/multi30k)")
    ap.add_argument("--work", type=Path, default=None,
                    help="where the exports and outputs go (default: a temporary folder)")
    ap.add_argument("--before", type=Path, default=None, help="an older mtkit source tree "
                    "(e.g. `git worktree add /tmp/before COMMIT`): adds 'mtkit before', the "
                    "same model decoded by that code")
    ap.add_argument("--skip-gnmt", action="store_true", help="no mtkit gnmt BLEU run")
    ap.add_argument("--options", nargs="*", default=[], choices=list(OPTIONS),
                    help="mtkit's own decoder with these options, as more systems")
    ap.add_argument("--src", type=Path, default=None, help="test source (default test2016)")
    ap.add_argument("--ref", type=Path, default=None, help="its references")
    ap.add_argument("--searches", nargs="*", default=list(SEARCHES), choices=list(SEARCHES))
    ap.add_argument("--no-export", action="store_true", help="no CTranslate2 systems")
    return ap.parse_args(argv)


def _mirror(arg: Path | None) -> Path:
    if arg is not None:
        return arg
    env = os.environ.get("MTKIT_DATA_MIRROR")
    return Path(env) if env else REPO.parent / "shared" / "data" / "multi30k"


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _mtkit(*args: object, stdin: str | None = None, source: Path | None = None
           ) -> tuple[float, float]:
    """Run `mtkit ARGS` in a fresh process (from the source tree `source` if given); its
    wall-clock and CPU seconds. It runs in the temporary folder: `python -m` puts the working
    folder first on the path, where a checkout's own mtkit would win over `source`."""
    cmd = [sys.executable, "-m", "mtkit", *(str(a) for a in args)]
    env = {**os.environ, "PYTHONPATH": str(source)} if source else None
    start, cpu = time.perf_counter(), _cpu()
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env,
                          cwd=tempfile.gettempdir())
    seconds, cpu = time.perf_counter() - start, _cpu() - cpu
    if proc.returncode:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return seconds, cpu


def _text(path: Path) -> str:
    """A plain or gzipped text file's contents."""
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return f.read()
    return path.read_text(encoding="utf-8")


def _bleu(hyp: Path, ref: list[str]) -> float:
    import sacrebleu

    return sacrebleu.corpus_bleu(hyp.read_text(encoding="utf-8").splitlines(), [ref]).score


# name -> (model, source tree or None for this one, mtkit translate's extra flags)
Systems = dict[str, tuple[Path, Path | None, list[str]]]


def _time_all(systems: Systems, searches: list[str], src: Path, work: Path, runs: int,
              threads: int) -> dict[tuple[str, str], list[tuple[float, float]]]:
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(runs):
        for search in searches:
            for name, (model, tree, extra) in systems.items():
                out = work / f"{name}.{search.replace(' ', '')}.de"
                sec = _mtkit("translate", model, "-i", src, "-o", out, "--threads", threads,
                             *SEARCHES[search], *extra, source=tree)
                times.setdefault((name, search), []).append(sec)
    return times


def _startup(systems: Systems, runs: int, threads: int, line: str
             ) -> dict[str, tuple[float, float]]:
    times: dict[str, list[tuple[float, float]]] = {}
    for _ in range(runs):
        for name, (model, tree, extra) in systems.items():
            sec = _mtkit("translate", model, "--greedy", "--threads", threads, *extra,
                         stdin=line + "\n", source=tree)
            times.setdefault(name, []).append(sec)
    return {name: _medians(t) for name, t in times.items()}


def _medians(runs: list[tuple[float, float]]) -> tuple[float, float]:
    """Median wall-clock and median CPU seconds of (wall, cpu) runs."""
    return (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))


def main(argv: list[str] | None = None) -> None:
    args = _args(argv)
    mirror = _mirror(args.mirror)
    args.run = args.run.resolve()
    work = (args.work or Path(tempfile.mkdtemp(prefix="export-speed-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    src = work / "test.src"
    src.write_text(_text(args.src or mirror / TEST_SRC), encoding="utf-8")
    ref = _text(args.ref or mirror / TEST_REF).splitlines()
    n = len(ref)
    systems: Systems = {"mtkit": (args.run, None, [])}
    if args.before is not None:
        systems["mtkit before"] = (args.run, args.before.resolve(), [])
    for option in args.options:
        systems[f"mtkit {option}"] = (args.run, None, OPTIONS[option])
    if "shortlist" in " ".join(args.options):  # counted and saved in the run, untimed
        _mtkit("translate", args.run, "--greedy", "--shortlist", stdin="a\n")
    if not args.no_export:
        for q in ("float32", "int8"):
            _mtkit("export", args.run, "-o", work / f"ct2-{q}", "--quantize", q)
        systems["ct2 float32"] = (work / "ct2-float32", None, [])
        if args.before is not None:
            systems["ct2 float32 before"] = (work / "ct2-float32", args.before.resolve(), [])
        systems["ct2 int8"] = (work / "ct2-int8", None, [])
    peer = "mtkit" if args.no_export else "ct2 float32"
    for tree in {REPO, *(t for _, t, _ in systems.values() if t is not None)}:
        compileall.compile_dir(tree / "mtkit", quiet=1)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, "
          f"{os.cpu_count()} CPUs, python {platform.python_version()}; model {args.run}; "
          f"{n} sentences; {args.threads} threads; median of {args.runs} interleaved runs")
    print(f"# load average before: {os.getloadavg()}")
    times = _time_all(systems, args.searches, src, work, args.runs, args.threads)
    first = src.read_text(encoding="utf-8").splitlines()[0]
    start = _startup(systems, args.runs, args.threads, first)
    print(f"# load average after: {os.getloadavg()}")
    print(f"| system | search | seconds | CPU s | sentences/s | BLEU | × {peer} "
          f"| × {peer}, CPU |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for search in args.searches:
        base, base_cpu = _medians(times[(peer, search)])
        for name in systems:
            sec, cpu = _medians(times[(name, search)])
            bleu = _bleu(work / f"{name}.{search.replace(' ', '')}.de", ref)
            print(f"| {name} | {search} | {sec:.2f} | {cpu:.2f} | {n / sec:.1f} | {bleu:.1f} | "
                  f"{sec / base:.2f} | {cpu / base_cpu:.2f} |")
    print("\n| system | start-up: one line, greedy, whole command (s) | CPU s |")
    print("| --- | --- | --- |")
    for name, (sec, cpu) in start.items():
        print(f"| {name} | {sec:.2f} | {cpu:.2f} |")
    if not args.skip_gnmt and "beam 5" in args.searches:
        out = work / "mtkit.beam5-gnmt.de"
        _mtkit("translate", args.run, "-i", src, "-o", out, "--threads", args.threads,
               "--beam", "5", "--length-penalty", "gnmt", "--alpha", "1.0")
        print(f"\nmtkit beam 5 with gnmt (alpha 1): BLEU {_bleu(out, ref):.1f} (average: "
              f"{_bleu(work / 'mtkit.beam5.de', ref):.1f})")


if __name__ == "__main__":
    main()
