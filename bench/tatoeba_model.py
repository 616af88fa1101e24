"""A large-vocabulary bench model: recipes/en-de-cpu.yaml's Transformer with a 32,000-piece
joint vocabulary, trained on Tatoeba en-de (../shared/data/tatoeba) for a wall-clock budget;
the output projection is then most of a decoding step, as in imported OPUS-MT models.

    python bench/tatoeba_model.py --work /tmp/tato --time 20m

Writes WORK/tatoeba.{train,valid,test}.{src,tgt} (split by a hash of the English sentence,
as bench/finetune.py does: no English sentence in two splits), WORK/tatoeba-32k.yaml and the
run WORK/run (`mtkit prep` + `mtkit train`). The test split (1,000 pairs) is the recipe's
`test` set: bench/export_speed.py --src/--ref time it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from finetune import _carve  # noqa: E402  (the same carving as the fine-tuning bench)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--time", default="20m", help="training budget (default 20m)")
    ap.add_argument("--vocab", type=int, default=32_000, help="joint pieces (default 32000)")
    ap.add_argument("--threads", default="2")
    args = ap.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {os.getloadavg()}", flush=True)
    splits = _carve(work, n_test=1000, n_valid=500)
    r = yaml.safe_load((REPO / "recipes" / "en-de-cpu.yaml").read_text(encoding="utf-8"))
    r["name"] = "tatoeba-32k"
    r["data"]["train"], r["data"]["valid"] = splits["train"], splits["valid"]
    r["data"]["test"] = {"test": splits["test"]}
    # bpe: unigram training on this corpus at 32k pieces needs more sentences than it has
    r["data"]["spm"].update(vocab_size=args.vocab, model_type="bpe")
    recipe = work / "tatoeba-32k.yaml"
    recipe.write_text(yaml.safe_dump(r, sort_keys=False), encoding="utf-8")
    run = work / "run"
    for cmd in (["prep", str(recipe), "--run-dir", str(run)],
                ["train", str(recipe), "--run-dir", str(run), "--threads", args.threads,
                 "--set", f"train.max_time={args.time}"]):
        subprocess.run([sys.executable, "-m", "mtkit", *cmd], check=True)
    print(f"load average after: {os.getloadavg()}; the run: {run}", flush=True)


if __name__ == "__main__":
    main()
