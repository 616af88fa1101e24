"""Translation speed (sentences/s, target tokens/s) for beam 5 and greedy on Multi30k test2016,
and the peak memory of `mtkit translate` on a 100,000-line input against a 1,000-line one.

    python bench/translate_speed.py runs/en-de-multi30k --threads 2
    python bench/translate_speed.py --threads 1          # no run: see below
    python bench/translate_speed.py runs/en-de-multi30k --device cuda --skip-memory

The 1000 test2016 sentences come from the Multi30k mirror (--mirror, else $MTKIT_DATA_MIRROR,
else ../shared/data/multi30k). Timing covers `StreamTranslator.run` over all of them (reading,
batching, search, detokenising, formatting), after a short untimed warm-up; loading the model
is not timed. Without a run directory, the model is an UNTRAINED one the size of
recipes/en-de.yaml's, on its prepared data (prepared once into --work): it rarely emits EOS,
so its outputs run to the length limit (1.5 x source + 10) and take about twice the steps a
trained model's would; the output says so and gives the tokens per sentence.

The memory check runs `mtkit translate` in child processes, greedy with the output cut to one
token (--max-len-a 0 --max-len-b 1) so that 100,000 lines take minutes on a CPU; reading,
batching, encoding and writing are the code paths whose memory could grow with the input.
Peak RSS comes from resource.getrusage(RUSAGE_CHILDREN) of a fresh wrapper per run.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
TEST_SRC, TEST_REF = "test_2016_flickr.en.gz", "test_2016_flickr.de.gz"
# Reports the peak RSS (kB on Linux) of the command given as arguments, run as its child.
_RSS = ("import resource, subprocess, sys; "
        "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE); "
        "sys.stderr.write(r.stderr.decode()[-2000:]) if r.returncode else None; "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)")


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, nargs="?", help="run directory or checkpoint (default: "
                    "an untrained model of recipes/en-de.yaml's size)")
    ap.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N, mps, auto")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads (default 2)")
    ap.add_argument("--mirror", type=Path, default=None, help="folder with the Multi30k files")
    ap.add_argument("--sentences", type=int, default=1000, help="test2016 lines (default all)")
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "bench-en-de-untrained",
                    help="where the untrained model and its data go (default runs/...)")
    ap.add_argument("--memory-lines", type=int, default=100_000,
                    help="lines of the large memory run (default 100000; the small one: 1000)")
    ap.add_argument("--batch-tokens", type=int, nargs="*", default=None,
                    help="time each search at each of these decode.batch_tokens (default: "
                    "the recipe's); label 'beam 5 @N'")
    ap.add_argument("--skip-memory", action="store_true", help="only time the searches")
    return ap.parse_args(argv)


def _mirror(given: Path | None) -> Path:
    path = given or Path(os.environ.get("MTKIT_DATA_MIRROR") or
                         REPO.parent / "shared" / "data" / "multi30k")
    if not (path / TEST_SRC).is_file():
        sys.exit(f"translate_speed: {path} has no {TEST_SRC}; give --mirror or set "
                 "MTKIT_DATA_MIRROR")
    return path


def untrained_run(work: Path, mirror: Path) -> Path:
    """A run directory with recipes/en-de.yaml's data prepared and a freshly initialised model
    of its size saved as best.pt (made once, then reused)."""
    from mtkit.config import dump_recipe, load_recipe
    from mtkit.data.prep import prepare
    from mtkit.data.spm import Tokenizer
    from mtkit.models.build import build_model
    from mtkit.run import data_dir, save_checkpoint

    recipe = load_recipe(REPO / "recipes" / "en-de.yaml")
    if not (work / "best.pt").is_file():
        prepare(recipe, work, mirror=mirror)
        tok = Tokenizer.load(data_dir(work))
        torch.manual_seed(recipe.train.seed)
        model = build_model(recipe.model, tok.src_vocab_size, tok.tgt_vocab_size)
        save_checkpoint(work / "best.pt", {
            "recipe": dump_recipe(recipe), "model": model.state_dict(),
            "vocab": {"src": tok.src_vocab_size, "tgt": tok.tgt_vocab_size}})
    return work


def _read(path: Path, n: int) -> list[str]:
    from mtkit.fileio import open_text

    with open_text(path) as f:
        return [line.rstrip("\n") for _, line in zip(range(n), f, strict=False)]


def time_search(loaded: tuple, lines: list[str], device: torch.device, **decode) -> dict:
    """Translate `lines` with the loaded (model, recipe, tokenizer), the recipe's decode
    section changed by `decode`."""
    from mtkit.translation.lines import StreamTranslator

    model, recipe, tok = loaded
    cfg = dataclasses.replace(recipe.decode, **decode)
    worker = StreamTranslator(model, tok, cfg, device=device, max_src_len=recipe.data.max_len)
    worker.run(lines[:32], io.StringIO())  # warm-up: allocator, kernels
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    out = io.StringIO()
    stats = worker.run(lines, out)  # the output is on the host when run returns
    return {"sentences": stats.sentences, "tokens": stats.tokens, "seconds": stats.seconds,
            "sent/s": stats.sentences / stats.seconds, "tok/s": stats.tokens / stats.seconds}


def peak_rss_mb(run: Path, lines: list[str], repeat: int, args: argparse.Namespace
                ) -> tuple[float, float]:
    """(peak RSS in MB, seconds) of `mtkit translate` on `lines` repeated `repeat` times."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        for _ in range(repeat):
            f.write("\n".join(lines) + "\n")
    cmd = [sys.executable, "-m", "mtkit", "translate", str(run), "-i", f.name, "--greedy",
           "--max-len-a", "0", "--max-len-b", "1", "--device", args.device,
           "--threads", str(args.threads)]
    start = time.perf_counter()
    try:
        res = subprocess.run([sys.executable, "-c", _RSS, *cmd], capture_output=True, text=True,
                             check=False)
    finally:
        os.unlink(f.name)
    if res.returncode:
        sys.exit(f"translate_speed: {' '.join(cmd)} failed:\n{res.stderr}")
    return int(res.stdout.split()[-1]) / 1024, time.perf_counter() - start


def _header(run: Path, untrained: bool, device: torch.device, lines: list[str],
            loaded: tuple) -> list[str]:
    model, recipe, tok = loaded
    tf = recipe.model.transformer
    size = (f"transformer {tf.d_model} wide, {tf.enc_layers}+{tf.dec_layers} layers"
            if recipe.model.arch == "transformer" else f"rnn {recipe.model.rnn.cell}")
    what = ("UNTRAINED model of recipes/en-de.yaml's size (no run given)" if untrained
            else f"trained model {run}")
    where = (f"cpu, {torch.get_num_threads()} threads, {os.cpu_count()} cores" if
             device.type == "cpu" else f"{device} ({torch.cuda.get_device_name(device)})"
             if device.type == "cuda" else str(device))
    return [f"model       {what}", f"            {size}, {tok.tgt_vocab_size} target pieces, "
            f"{model.parameter_counts()['total']:,} parameters",
            f"device      {where}", f"input       Multi30k test2016, {len(lines)} sentences",
            f"load        {_load()} (1/5/15-minute load averages before timing)"]


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> None:
    from mtkit.device import inference_device

    args = _args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = inference_device(args.device)
    mirror = _mirror(args.mirror)
    untrained = args.run is None
    run = untrained_run(args.work, mirror) if untrained else args.run
    lines = _read(mirror / TEST_SRC, args.sentences)
    from mtkit.translation.lines import load_translator

    loaded = load_translator([run], device)  # once: loading is not what is timed
    for line in _header(run, untrained, device, lines, loaded):
        print(line, flush=True)
    for batch_tokens in args.batch_tokens or [None]:
        size = {} if batch_tokens is None else {"batch_tokens": batch_tokens}
        for name, decode in (("beam 5", {"method": "beam", "beam_size": 5, "nbest": 1}),
                             ("greedy", {"method": "greedy"})):
            r = time_search(loaded, lines, device, **decode, **size)
            label = name if batch_tokens is None else f"{name} @{batch_tokens}"
            print(f"{label:<11} {r['sent/s']:7.1f} sentences/s {r['tok/s']:8.0f} target "
                  f"tokens/s  ({r['sentences']} sentences, "
                  f"{r['tokens'] / r['sentences']:.1f} tokens each, {r['seconds']:.2f} s; "
                  f"load now {_load()})", flush=True)
    if args.skip_memory:
        return
    small, t_small = peak_rss_mb(run, lines, 1, args)
    big, t_big = peak_rss_mb(run, lines, max(1, args.memory_lines // len(lines)), args)
    n_big = max(1, args.memory_lines // len(lines)) * len(lines)
    print(f"memory      peak RSS {small:.0f} MB on {len(lines):,} lines ({t_small:.0f} s), "
          f"{big:.0f} MB on {n_big:,} lines ({t_big:.0f} s): ratio {big / small:.3f} "
          "(greedy, one output token)")


if __name__ == "__main__":
    main()
