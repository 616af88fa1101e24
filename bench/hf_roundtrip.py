"""The round trip that learns: a tiny random Marian imported, fine-tuned with `--init-from` on
Multi30k for two minutes, exported back (`mtkit export --engine hf`), and transformers'
`generate` must reproduce mtkit's greedy output on 100 test2016 sentences.

    python bench/hf_roundtrip.py --work /tmp/hf-roundtrip

Too long for the slow test tier (its fine-tuning alone is two minutes), so a script: it prints
the validation BLEU before and after fine-tuning (that it learned), how many of mtkit's greedy
outputs ended before their limit, and how many of transformers' are the same; it exits 1 when
one differs. Then it imports the export again and checks that the weights are the tuned
checkpoint's, tensor for tensor.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hf_import  # noqa: E402  (this folder's neighbour: the Marian maker and recipe)

REPO = hf_import.REPO


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--mirror", type=Path, default=Path(os.environ.get(
        "MTKIT_DATA_MIRROR", REPO.parent / "shared" / "data" / "multi30k")))
    ap.add_argument("--minutes", type=float, default=2.0, help="fine-tuning budget (2)")
    ap.add_argument("--sentences", type=int, default=100, help="test2016 sentences (100)")
    return ap.parse_args(argv)


def _valid_bleu(run: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["update"], r["bleu"]) for r in rows if r.get("kind") == "valid"]


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    work = a.work
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "marian").exists():
        hf_import.make_marian(work / "marian", a.mirror, d_model=64, layers=2, heads=4,
                              ffn=256, pieces=2000, vocab_size=0)
    if not (work / "imported").exists():
        hf_import.import_model(work / "marian", work / "imported")
    if not (work / "tuned" / "last.pt").exists():
        recipe = hf_import.finetune_recipe(work, work / "imported", a.minutes)
        hf_import._mtkit("prep", recipe, "--run-dir", work / "tuned", "--mirror", a.mirror)
        # one thread: a tiny model gains little from a second, and on a shared machine
        # loses much (tests/conftest.py, `one_thread`)
        hf_import._mtkit("train", recipe, "--run-dir", work / "tuned", "--init-from",
                         work / "imported", "--set", "train.lr=2e-3", "--set",
                         "train.threads=1", "--set", "train.valid_sentences=200")
    if not (work / "hf").exists():
        hf_import._mtkit("export", "--engine", "hf", work / "tuned", "-o", work / "hf")
    print("validation BLEU by update:", _valid_bleu(work / "tuned"))
    ok = compare(work, a)
    ok &= same_weights(work)
    return 0 if ok else 1


def compare(work: Path, a: argparse.Namespace) -> bool:
    """mtkit's greedy output against transformers' generate on the export: in batches with
    the export's generation_config (one length limit per call), and, where that differs,
    sentence by sentence with mtkit's own limit for the sentence (max_new_tokens: the limit
    and the end token, which transformers forces there as mtkit does)."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    import mtkit

    src = hf_import._lines(a.mirror / "test_2016_flickr.en.gz")[: a.sentences]
    tr = mtkit.load(work / "tuned", device="cpu", method="greedy")
    full = tr.translate_full(src)
    want = [t.candidates[0].text for t in full]
    limits = [tr.defaults.output_limit(len([p for p in t.source_tokens if p != "</s>"]))
              for t in full]
    ended = sum(len(t.candidates[0].tokens) < n for t, n in zip(full, limits, strict=True))
    tok = AutoTokenizer.from_pretrained(work / "hf")
    model = AutoModelForSeq2SeqLM.from_pretrained(work / "hf").eval()

    def generate(lines: list[str], **kwargs) -> list[str]:
        batch = tok(lines, return_tensors="pt", padding=True)
        with torch.inference_mode():
            gen = model.generate(**batch, num_beams=1, do_sample=False, **kwargs)
        return tok.batch_decode(gen, skip_special_tokens=True)

    got = [line for k in range(0, len(src), 25) for line in generate(src[k: k + 25])]
    same = sum(w == g for w, g in zip(want, got, strict=True))
    each = [g if g == w else generate([s], max_new_tokens=n + 1)[0]
            for s, w, g, n in zip(src, want, got, limits, strict=True)]
    same_each = sum(w == g for w, g in zip(want, each, strict=True))
    print(f"mtkit's greedy outputs that ended on their own: {ended}/{len(src)}")
    print(f"transformers' generate gives mtkit's greedy output for {same}/{len(src)} sentences "
          f"with the export's generation_config, {same_each}/{len(src)} with each sentence's "
          "limit")
    for w, g, s in zip(want, each, src, strict=True):
        if w != g:
            print(f"  differs: {s!r}\n    mtkit        {w!r}\n    transformers {g!r}")
    for s, w in list(zip(src, want, strict=True))[:3]:
        print(f"  example: {s} -> {w}")
    return same_each == len(src)


def same_weights(work: Path) -> bool:
    """Import of the export gives the tuned checkpoint's tensors."""
    import torch

    from mtkit.run import load_checkpoint, resolve_checkpoint

    if not (work / "reimported").exists():
        hf_import.import_model(work / "hf", work / "reimported")
    a = load_checkpoint(resolve_checkpoint(work / "tuned"))["model"]
    b = load_checkpoint(resolve_checkpoint(work / "reimported"))["model"]
    equal = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    print(f"import of the export: {'the same' if equal else 'NOT the same'} "
          f"{len(a)} tensors as the tuned checkpoint")
    return equal


if __name__ == "__main__":
    sys.exit(main())
