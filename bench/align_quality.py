"""Word alignments of mtkit's attention on Multi30k test2016, as agreement (AER) with a
statistical aligner's links, for every read-out, layer and head; and each run's BLEU.

    python bench/align_quality.py runs/en-de-multi30k
    python bench/align_quality.py runs/plain --compare runs/guided    # e.g. a guided-trained run
    python bench/align_quality.py runs/x --train recipes/en-de-cpu.yaml   # prep + train first

The reference links come from eflomal (Östling & Tiedemann 2017, model 3), which this script
needs and mtkit does not: `pip install eflomal` (bench-only; it is NOT one of mtkit's runtime
dependencies). eflomal is trained on Multi30k train + all of Tatoeba en-de (no part of Tatoeba
is evaluated here, so none is held out) + test2016 itself (a statistical aligner is trained on
the text it aligns), from ../shared/data (--data), lowercased, on whitespace words; its
forward and reverse links are symmetrized with grow-diag-final (mtkit.align.grow_diag_final)
and cached in --work. mtkit's words are sentencepiece's (pieces merged at '▁'), which are the
same whitespace words; a sentence where the two counts differ is left out and counted.

For each run (a Transformer: every decoder layer, the mean over heads and each head; an RNN:
its one attention) and each read-out (current, shift: `mtkit align --help`), the test2016
reference pairs are aligned by forced decoding as `mtkit align -t --readout R --layer L
--head H` does, links extracted by --align-method (default argmax-tgt), and scored with
eflomal's links as both sure and possible gold. BLEU: test2016 translated with the run's
recipe decoding (beam), as `mtkit score --run RUN --split test2016`.

Agreement with another aligner is not accuracy: eflomal makes its own errors (22.6 AER on the
standard de-en gold set), and a method closer to it is only closer to it.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
CAVEAT = ("caveat: agreement with another aligner is not accuracy; eflomal has its own errors "
          "(about 23 AER on the standard de-en gold set), so lower means closer to eflomal, not "
          "necessarily better")
SPLIT = "test2016"


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="run directory (its best.pt) to measure")
    ap.add_argument("--compare", type=Path, default=None,
                    help="a second run directory, e.g. trained with guided alignment")
    ap.add_argument("--train", type=Path, default=None, metavar="RECIPE",
                    help="prep and train RUN with this recipe first, if it has no best.pt")
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data",
                    help="folder with multi30k/ and tatoeba/ (default ../shared/data)")
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "bench-align-eflomal",
                    help="where eflomal's input and links are cached (default runs/...)")
    ap.add_argument("--align-method", default="argmax-tgt",
                    help="link extraction from each matrix (default argmax-tgt)")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads (default 2)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--skip-bleu", action="store_true", help="only the alignment figures")
    ap.add_argument("--sentences", type=int, default=None,
                    help="align only the first N test2016 pairs, for a quick look (default all; "
                    "eflomal still learns from all, BLEU is always on the whole split)")
    return ap.parse_args(argv)


# --------------------------------------------------------------------------- the reference


def _gz_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def _words(line: str) -> list[str]:
    return line.lower().split()


def eflomal_links(data: Path, test_src: list[str], test_tgt: list[str], work: Path
                  ) -> list[set[tuple[int, int]]]:
    """eflomal's grow-diag-final links of every test pair, computed once and cached under
    `work` by the hash of the corpus it was trained on."""
    from mtkit.align import grow_diag_final, parse_links

    src = (_gz_lines(data / "multi30k" / "train.en.gz") + _gz_lines(data / "tatoeba" / "all.en.gz")
           + test_src)
    tgt = (_gz_lines(data / "multi30k" / "train.de.gz") + _gz_lines(data / "tatoeba" / "all.de.gz")
           + test_tgt)
    assert len(src) == len(tgt), (len(src), len(tgt))
    key = hashlib.sha256("\n".join(src + ["|||"] + tgt).encode()).hexdigest()[:16]
    fwd, rev = work / f"{key}.fwd", work / f"{key}.rev"
    if not (fwd.is_file() and rev.is_file()):
        _run_eflomal(src, tgt, fwd, rev)
    n = len(test_src)
    f_lines = fwd.read_text(encoding="utf-8").splitlines()[-n:]
    r_lines = rev.read_text(encoding="utf-8").splitlines()[-n:]
    return [grow_diag_final(set(parse_links(a).sure), set(parse_links(b).sure))
            for a, b in zip(f_lines, r_lines, strict=True)]


def _run_eflomal(src: list[str], tgt: list[str], fwd: Path, rev: Path) -> None:
    try:
        from eflomal import Aligner
    except ImportError:
        sys.exit("bench: eflomal is not installed: pip install eflomal (bench-only)")
    fwd.parent.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    print(f"bench: training eflomal on {len(src)} pairs (once; cached in {fwd.parent})",
          file=sys.stderr)
    tmp_f, tmp_r = fwd.with_suffix(".fwd.tmp"), rev.with_suffix(".rev.tmp")
    Aligner(model=3).align([" ".join(_words(s)) + "\n" for s in src],
                           [" ".join(_words(s)) + "\n" for s in tgt],
                           links_filename_fwd=str(tmp_f), links_filename_rev=str(tmp_r))
    tmp_f.replace(fwd)
    tmp_r.replace(rev)
    print(f"bench: eflomal took {time.perf_counter() - t:.0f} s", file=sys.stderr)


# --------------------------------------------------------------------------- mtkit's links


@dataclass(frozen=True)
class Row:
    """AER of one attention choice and read-out against the reference."""

    layer: int | None
    head: int | str | None
    readout: str
    aer: float
    precision: float
    recall: float


def _choices(model) -> list:
    """Every cross-attention an `mtkit align` user can pick: each decoder layer with the head
    mean and each head (Transformer), or the one attention (RNN)."""
    if getattr(model, "heads", None) is None:
        return [model.choose_attention()]
    return [model.choose_attention(layer=layer, head=head)
            for layer in range(len(model.decoder.layers))
            for head in ["mean", *range(model.heads)]]


def run_rows(run: Path, src: list[str], tgt: list[str], refs: list[set[tuple[int, int]]],
             method: str) -> tuple[list[Row], int]:
    """AER rows of every choice and read-out of `run` on the pairs, and the number of pairs
    scored (those whose word counts match the reference's)."""
    from mtkit.align import READOUTS, Gold, extract_links, score_corpus
    from mtkit.align.pairs import Pair, label, pair_attention
    from mtkit.run import load_model

    model, _, tok = load_model(run, "cpu")
    pairs = [Pair(i, s, t, a, b) for i, (s, t, a, b) in enumerate(zip(
        tok.encode_src_lines(src), tok.encode_tgt_lines(tgt), src, tgt, strict=True))]
    rows: list[Row] = []
    kept: list[int] | None = None
    for choice in _choices(model):
        maps = pair_attention(model, pairs, choice, device=torch.device("cpu"),
                              batch_tokens=4000)
        for readout in READOUTS:
            matrices = [label(tok, p, w, "cross", "word", readout)
                        for p, w in zip(pairs, maps, strict=True)]
            if kept is None:  # the same pairs for every choice: fixed by the tokenizer
                kept = [i for i, m in enumerate(matrices)
                        if m.weights.shape == (len(_words(tgt[i])), len(_words(src[i])))]
            golds = [Gold(frozenset(refs[i]), frozenset(refs[i]), f"{SPLIT}:{i + 1}")
                     for i in kept]
            links = [extract_links(matrices[i].weights, method) for i in kept]
            s, _ = score_corpus(links, golds)
            rows.append(Row(choice.layer, choice.head, readout, s.aer, s.precision, s.recall))
    return rows, len(kept or [])


def bleu(run: Path) -> tuple[float, str]:
    """test2016 BLEU of the run's best checkpoint with its recipe's decoding, and the tag."""
    from mtkit.api.splits import translate_split
    from mtkit.score.metrics import MetricOptions, score_files

    done = translate_split(run, SPLIT, device=torch.device("cpu"))
    report = score_files([done.reference], [done.path], metrics=MetricOptions(("bleu",)))
    return report.scores[0]["BLEU"].score, f"{done.cfg.method} {done.cfg.beam_size}"


# --------------------------------------------------------------------------- report


def _table(run: Path, rows: list[Row], kept: int, total: int, method: str) -> str:
    out = [f"{run}: AER against eflomal ({method} links; {kept} of {total} {SPLIT} pairs)",
           f"  {'layer':>5}  {'head':>4}  {'current':>7}  {'shift':>7}   "
           f"(precision / recall: current | shift)"]
    by = {(r.layer, str(r.head), r.readout): r for r in rows}
    for layer, head in dict.fromkeys((r.layer, str(r.head)) for r in rows):
        p, s = by[(layer, head, "current")], by[(layer, head, "shift")]
        out.append(f"  {'-' if layer is None else layer:>5}  {head if head != 'None' else '-':>4}"
                   f"  {p.aer:7.3f}  {s.aer:7.3f}   ({p.precision:.2f}/{p.recall:.2f} | "
                   f"{s.precision:.2f}/{s.recall:.2f})")
    best = {ro: min((r for r in rows if r.readout == ro), key=lambda r: r.aer)
            for ro in ("current", "shift")}
    where = {ro: "" if r.layer is None else f" (layer {r.layer}, head {r.head})"
             for ro, r in best.items()}
    out.append("  best: " + "; ".join(f"{ro} {r.aer:.3f}{where[ro]}" for ro, r in best.items()))
    return "\n".join(out)


def _train(recipe: Path, run: Path, data: Path) -> None:
    env = {**os.environ, "MTKIT_DATA_MIRROR": str(data / "multi30k")}
    mtkit = [sys.executable, "-m", "mtkit"]
    for cmd in (["prep", str(recipe), "--run-dir", str(run)],
                ["train", str(recipe), "--run-dir", str(run)]):
        subprocess.run([*mtkit, *cmd], check=True, env=env)


def main(argv: list[str] | None = None) -> None:
    a = _args(argv)
    torch.set_num_threads(a.threads)
    if a.train is not None and not (a.run / "best.pt").is_file():
        _train(a.train, a.run, a.data)
    start, load = time.perf_counter(), os.getloadavg()
    src = _gz_lines(a.data / "multi30k" / "test_2016_flickr.en.gz")
    tgt = _gz_lines(a.data / "multi30k" / "test_2016_flickr.de.gz")
    refs = eflomal_links(a.data, src, tgt, a.work)
    src, tgt, refs = src[:a.sentences], tgt[:a.sentences], refs[:a.sentences]
    print(f"eflomal (model 3, grow-diag-final): {sum(map(len, refs))} links on {len(refs)} "
          f"{SPLIT} pairs")
    results = {}
    for run in [a.run] + ([a.compare] if a.compare else []):
        rows, kept = run_rows(run, src, tgt, refs, a.align_method)
        print(_table(run, rows, kept, len(src), a.align_method))
        entry = {"pairs": kept, "rows": [r.__dict__ for r in rows]}
        if not a.skip_bleu:
            score, how = bleu(run)
            print(f"  {SPLIT} BLEU {score:.1f} ({how})")
            entry["bleu"] = score
        results[str(run)] = entry
    print(CAVEAT)
    print(f"bench: {time.perf_counter() - start:.0f} s, load average {load[0]:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end ({a.threads} threads)")
    if a.json is not None:
        a.json.write_text(json.dumps({"split": SPLIT, "method": a.align_method,
                                      "runs": results}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
