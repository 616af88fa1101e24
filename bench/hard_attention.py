"""Hard and sparse attention against soft attention: translation quality and speed on Multi30k
at equal minutes, and alignment quality on synthetic tasks whose alignment is known.

    python bench/hard_attention.py --work /tmp/hard --minutes 3

Variants (recipes/en-de-rnn.yaml, the bi-GRU Bahdanau RNN, sized for a CPU with COMMON):
  soft       the recipe as shipped (additive attention, softmax)
  reinforce  model.rnn.hard.estimator: reinforce (entropy 0.01, no soft steps)
  exact      model.rnn.hard.estimator: exact, which needs placement luong without input
             feeding (so this row changes the decoder too)
  sparsemax  model.attention_normalizer: sparsemax
  entmax15   model.attention_normalizer: entmax15
Each trains for --minutes, then is scored on test2016 (greedy, BLEU by sacrebleu), with its
training target tokens/s (from metrics.jsonl) and, on the test2016 references (forced), the
mean attention mass on the most attended source piece (1 for a one-hot row) and the share of
exact zeros among real source positions. Interleaved with that, one tiny model per variant
(plus a soft Luong model without feeding, the exact model's soft twin) learns a synthetic
task of tests/system/align_tasks.py (--toy-task: permutation by default; --toy-only trains
these alone), and the AER of its argmax-tgt links is
measured: soft weights, the hard models' chosen position, the exact model's prior and
posterior. Prints one table; records go to WORK/results.jsonl. Multi30k comes from
$MTKIT_DATA_MIRROR (default ../shared/data/multi30k); everything is written under --work.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
RECIPE = REPO / "recipes" / "en-de-rnn.yaml"
from bench.quality import run_mtkit  # noqa: E402 (after the path is set)

# The GPU recipe on a CPU: smaller batches (more updates in the minutes), validation on a
# sample, a log record every few updates (tokens/s of the slow exact model), one thread (on
# this shared machine two threads per process ran an update 10x slower than one).
COMMON = ["train.device=cpu", "train.threads=1", "train.batch_tokens=2500",
          "train.valid_sentences=100", "train.valid_every=100000", "train.max_epochs=0",
          "train.patience=0", "train.log_every=5", "train.warmup=50", "train.lr=2e-3"]
LUONG = ["model.rnn.placement=luong", "model.rnn.input_feeding=false"]
VARIANTS: dict[str, list[str]] = {
    "soft": [],
    "reinforce": ["model.rnn.hard.estimator=reinforce", "model.rnn.hard.entropy=0.01"],
    "exact": [*LUONG, "model.rnn.hard.estimator=exact"],
    "sparsemax": ["model.attention_normalizer=sparsemax"],
    "entmax15": ["model.attention_normalizer=entmax15"],
}


def _tokens_per_s(run: Path) -> float:
    recs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in recs if r["kind"] == "train"]
    tokens = sum(r["tgt_tokens"] for r in train)
    secs = sum(r["tgt_tokens"] / r["tgt_tokens_per_s"] for r in train)
    return tokens / secs if secs else float("nan")


def _updates(run: Path) -> int:
    recs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return next(r for r in reversed(recs) if r["kind"] == "end")["update"]


def _multi30k(work: Path, data: Path, name: str, minutes: float) -> dict:
    """Train one variant; its test2016 BLEU, speed and attention sharpness."""
    import sacrebleu
    import torch

    import mtkit
    from mtkit.data.batch import collate
    from mtkit.fileio import read_lines
    from mtkit.run import load_model

    run = work / name
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    shutil.copytree(data, run / "data")
    log = work / f"{name}.log"
    load0 = os.getloadavg()[0]
    sets = [*COMMON, *VARIANTS[name], f"train.max_time={minutes * 60:.0f}s"]
    run_mtkit("train", str(RECIPE), "--run-dir", str(run), *[a for s in sets for a in ("--set", s)],
           log=log)
    src = read_lines(run / "data" / "test2016.src.txt")
    refs = read_lines(run / "data" / "test2016.tgt.txt")
    t0 = time.monotonic()
    hyps = mtkit.load(run, device="cpu", threads=1).translate(src, method="greedy")
    decode_s = time.monotonic() - t0
    bleu = sacrebleu.corpus_bleu(hyps, [refs]).score
    loaded = load_model(run)
    model, tok = loaded.model.eval(), loaded.tokenizer
    top = zeros = rows = real = 0.0
    with torch.inference_mode():
        for a in range(0, len(src), 100):
            s_ids = [tok.encode_src(x) for x in src[a:a + 100]]
            t_ids = [tok.encode_tgt(x) for x in refs[a:a + 100]]
            b = collate(s_ids, t_ids, range(len(s_ids)))
            choice = model.choose_view(model.choose_attention(), "prior")
            attn = model.attention_maps(b.src, b.src_lens, b.tgt_in, choice)
            mask = (b.tgt_out != 0).unsqueeze(-1) & (torch.arange(b.src.size(1)) <
                                                     b.src_lens.view(-1, 1, 1))
            keep = (b.tgt_out != 0)
            top += float(attn.amax(-1)[keep].sum())
            rows += float(keep.sum())
            zeros += float(((attn == 0) & mask).sum())
            real += float(mask.sum())
    return {"variant": name, "bleu": bleu, "tok_s": _tokens_per_s(run), "updates": _updates(run),
            "decode_s": round(decode_s, 1), "top_mass": top / rows, "zeros": zeros / real,
            "load_before": round(load0, 2), "load_after": round(os.getloadavg()[0], 2)}


def _toy_cfg(name: str):
    from mtkit.config import ModelConfig, RNNConfig
    from mtkit.config.attention import HardAttentionConfig

    base = {"cell": "gru", "emb_dim": 32, "hidden_dim": 64, "attn_dim": 64, "dropout": 0.0,
            "attention": "additive"}
    luong = {"placement": "luong", "input_feeding": False}
    normalizer = name if name in ("sparsemax", "entmax15") else "softmax"
    hard = HardAttentionConfig()
    if name == "reinforce":
        hard = HardAttentionConfig(estimator="reinforce", entropy=0.01)
    elif name == "exact":
        hard = HardAttentionConfig(estimator="exact")
    rnn = RNNConfig(**base, **(luong if name in ("exact", "soft-luong") else {}), hard=hard)
    return ModelConfig(arch="rnn", attention_normalizer=normalizer, rnn=rnn)


def _toy(name: str, updates: int, task: str) -> list[dict]:
    """One tiny model of the variant on the synthetic `task`; the AER of each view."""
    import torch

    from tests.system import align_tasks

    torch.set_num_threads(1)
    t0 = time.monotonic()
    model = align_tasks.train(_toy_cfg(name), task, updates=updates, lr=3e-3)
    secs = time.monotonic() - t0
    views = list(model.views) if name == "exact" else ["chosen"]
    if name in ("reinforce", "exact"):
        views = [v for v in views if v != "prior"] + ["prior"]
    out = []
    for view in views:
        choice = model.choose_view(model.choose_attention(), view)
        out.append({"toy": name, "task": task, "view": view, "train_s": round(secs, 1),
                    "aer": align_tasks.aer(model, task, choice)})
    return out


def _table(m30k: list[dict], toys: list[dict]) -> str:
    soft = next((r for r in m30k if r["variant"] == "soft"), None)
    lines = ["| variant | test2016 BLEU | vs soft | tgt tok/s | vs soft | updates | "
             "top-piece mass | zeros |", "|---|---|---|---|---|---|---|---|"]
    for r in m30k:
        db = f"{r['bleu'] - soft['bleu']:+.2f}" if soft else ""
        ds = f"{r['tok_s'] / soft['tok_s']:.2f}x" if soft else ""
        lines.append(f"| {r['variant']} | {r['bleu']:.2f} | {db} | {r['tok_s']:,.0f} | {ds} | "
                     f"{r['updates']} | {r['top_mass']:.3f} | {r['zeros']:.1%} |")
    lines += ["", "| toy model | task | view | AER |", "|---|---|---|---|"]
    lines += [f"| {r['toy']} | {r['task']} | {r['view']} | {r['aer']:.3f} |" for r in toys]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="folder for the runs")
    ap.add_argument("--minutes", type=float, default=3.0, help="training budget per variant")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="Multi30k variants run")
    ap.add_argument("--toy-updates", type=int, default=400, help="updates of each toy model")
    ap.add_argument("--toy-task", default="permutation",
                    help="the synthetic task: reversal, permutation or insert-delete")
    ap.add_argument("--toy-only", action="store_true", help="train no Multi30k model")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    a.work.mkdir(parents=True, exist_ok=True)
    prep = a.work / "prep"
    if not a.toy_only and not (prep / "data" / "manifest.json").is_file():
        shutil.rmtree(prep, ignore_errors=True)
        run_mtkit("prep", str(RECIPE), "--run-dir", str(prep), log=a.work / "prep.log")
    started = datetime.datetime.now(datetime.timezone.utc)
    print(f"hard_attention.py: {started:%Y-%m-%d %H:%M} UTC, {platform.node()}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()}, {a.minutes:g} min per variant",
          flush=True)
    m30k: list[dict] = []
    toys: list[dict] = []
    names = a.variants.split(",")
    toy_names = [*names, "soft-luong"] if "exact" in names else names
    with open(a.work / "results.jsonl", "a", encoding="utf-8") as out:
        for name in toy_names:
            if name in VARIANTS and not a.toy_only:
                rec = _multi30k(a.work, prep / "data", name, a.minutes)
                m30k.append(rec)
                out.write(json.dumps(rec) + "\n")
                print(f"  {name}: BLEU {rec['bleu']:.2f}, {rec['tok_s']:,.0f} tgt tok/s, "
                      f"{rec['updates']} updates, top mass {rec['top_mass']:.3f}, load "
                      f"{rec['load_before']} -> {rec['load_after']}", flush=True)
            for rec in _toy(name, a.toy_updates, a.toy_task):
                toys.append(rec)
                out.write(json.dumps(rec) + "\n")
                print(f"  toy {name} {rec['view']}: AER {rec['aer']:.3f} "
                      f"({rec['train_s']} s)", flush=True)
            out.flush()
    print(f"finished {datetime.datetime.now(datetime.timezone.utc):%H:%M} UTC, load "
          f"{os.getloadavg()}")
    print(_table(m30k, toys))


if __name__ == "__main__":
    main()
