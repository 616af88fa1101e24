"""Terminology on Multi30k test2016: the share of glossary terms in the output, BLEU and
sentences/s, without terms and with each `--terms-method`, and the speed of the lines that hold
no term (which must not change).

    python bench/terms.py /work/main/runs/en-de-multi30k-cpu --threads 1

The glossary comes from the references: each test pair's reference is forced as a target
prefix (the output is then the reference itself) to get the model's own word alignment of
source and reference; a (source word, reference word) link is a candidate when both are
words of 3+ letters, the source word is not among the 100 commonest of the test set, and in
every test pair whose source holds the source word the reference holds the reference word
(so the entry is right wherever it applies). Of those, the `--terms` candidates whose
reference word the plain translation misses most often are the glossary. Terms present: of
every (line, term) match, the share whose target term is in the output (as often as its
source term is in the line). BLEU: sacreBLEU over all lines. Speeds: the fastest of --repeat
timings (the machine may be shared), the lines without a term timed alternately plain and
with the glossary. The glossary and the outputs are written to --out.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST_SRC, TEST_REF = "test_2016_flickr.en.gz", "test_2016_flickr.de.gz"


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a trained en-de run directory or export")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    ap.add_argument("--mirror", type=Path, default=None, help="folder with the Multi30k files")
    ap.add_argument("--terms", type=int, default=200, help="glossary entries (default 200)")
    ap.add_argument("--beam", type=int, default=5, help="beam size (default 5)")
    ap.add_argument("--repeat", type=int, default=2, help="timings per figure; the fastest "
                    "is given (default 2)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/mtkit-bench-terms"),
                    help="where the glossary and outputs go")
    return ap.parse_args(argv)


def _read(path: Path) -> list[str]:
    from mtkit.fileio import read_lines

    return read_lines(path)


def _timed(model, lines: list[str], *, repeat: int = 1, **options) -> tuple[list, float]:
    """The outputs and the fastest of `repeat` timings: the machine is shared, and other
    jobs only ever slow a run down."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        out = model.translate_full(lines, **options)
        best = min(best, time.perf_counter() - start)
    return out, best


def build_glossary(model, src: list[str], ref: list[str], plain: list[str], n: int
                   ) -> list[tuple[str, str]]:
    """Up to n (source word, reference word) pairs, as the module docstring says."""
    from mtkit.translation.terms import word_key

    forced = model.translate_full(src, prefix=ref, align=True, max_len_a=0.0, max_len_b=1,
                                  method="greedy")
    common = {w for w, _ in Counter(word_key(w) for s in src for w in s.split()).most_common(100)}
    links: Counter = Counter()
    for s, f in zip(src, forced, strict=True):
        sw, tw = s.split(), f.text.split()
        for link in (f.candidates[0].alignment or "").split():
            i, j = map(int, link.split("-"))
            a, b = word_key(sw[i]), word_key(tw[j])
            if len(a) >= 3 and len(b) >= 3 and a.isalpha() and b.isalpha() and a not in common:
                links[a, tw[j].strip(".,;:!?\"'()")] += 1
    holders: dict[str, list[int]] = defaultdict(list)
    for k, s in enumerate(src):
        for key in {word_key(w) for w in s.split()}:
            holders[key].append(k)
    best: dict[str, tuple[int, str]] = {}
    for (a, b), count in links.items():
        if count > best.get(a, (0, ""))[0]:
            best[a] = (count, b)
    scored = []
    for a, (_, b) in best.items():
        rows = holders[a]
        if not all(word_key(b) in {word_key(w) for w in ref[k].split()} for k in rows):
            continue
        missed = sum(word_key(b) not in {word_key(w) for w in plain[k].split()} for k in rows)
        if missed:
            scored.append((missed, a, b))
    scored.sort(key=lambda x: (-x[0], x[1]))
    return [(a, b) for _, a, b in scored[:n]]


def presence(glossary, src: list[str], out: list[str]) -> tuple[int, int]:
    """(terms present, term matches) over the lines."""
    from mtkit.translation.terms import occurrences

    have = total = 0
    for s, o in zip(src, out, strict=True):
        matches = glossary.matches(s)
        words = o.split()
        for target in {m.target for m in matches}:
            need = sum(m.target == target for m in matches)
            total += need
            have += min(need, occurrences(target, words))
    return have, total


def beside(glossary, src: list[str], plain: list, out: list[str]) -> tuple[int, int]:
    """(placed terms with the model's own word beside them, placed terms): a term is placed
    where the plain translation (`plain`, with its links) missed it; the model's own words
    for it are the plain output's words linked to the source term's words; such a word just
    before or after the placed term ("Ein Köter Hund ...") stayed beside it."""
    from mtkit.translation.terms import word_key

    doubled = placed = 0
    for s, p, o in zip(src, plain, out, strict=True):
        pw, ow = p.text.split(), [word_key(w) for w in o.split()]
        links = [tuple(map(int, x.split("-"))) for x in (p.candidates[0].alignment or "").split()]
        for m in glossary.matches(s):
            want = [word_key(w) for w in m.target]
            if any([word_key(w) for w in pw[i:i + len(want)]] == want for i in range(len(pw))):
                continue  # the model had it: nothing placed
            own = {word_key(pw[j]) for i, j in links if m.start <= i < m.end} - set(want)
            at = [i for i in range(len(ow)) if ow[i:i + len(want)] == want]
            if not at:
                continue
            placed += 1
            doubled += any({ow[i - 1] if i else "", ow[i + len(want)]
                            if i + len(want) < len(ow) else ""} & own for i in at)
    return doubled, placed


def main(argv: list[str] | None = None) -> None:
    args = _args(argv)
    import sacrebleu

    import mtkit

    mirror = args.mirror or Path(os.environ.get("MTKIT_DATA_MIRROR") or
                                 REPO.parent / "shared" / "data" / "multi30k")
    src, ref = _read(mirror / TEST_SRC), _read(mirror / TEST_REF)
    model = mtkit.load(args.run, device="cpu", threads=args.threads, beam_size=args.beam)
    model.translate(src[:16])  # warm-up
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"# {args.run}, test2016 ({len(src)} lines), beam {args.beam}, "
          f"{args.threads} thread(s), load average {os.getloadavg()[0]:.2f}", flush=True)
    plain, t_plain = _timed(model, src, repeat=args.repeat)
    plain_text = [r.text for r in plain]
    pairs = build_glossary(model, src, ref, plain_text, args.terms)
    (args.out / "glossary.tsv").write_text("".join(f"{a}\t{b}\n" for a, b in pairs))
    glossary = model.glossary(pairs)
    termed = [k for k, s in enumerate(src) if glossary.matches(s)]
    bare = [k for k in range(len(src)) if k not in set(termed)]
    print(f"# glossary: {len(pairs)} entries; {len(termed)} lines hold a term, "
          f"{len(bare)} none", flush=True)

    def row(name: str, texts: list[str], seconds: float) -> None:
        have, total = presence(glossary, src, texts)
        bleu = sacrebleu.corpus_bleu(texts, [ref]).score
        print(f"| {name} | {100 * have / max(total, 1):.1f}% ({have}/{total}) | {bleu:.2f} | "
              f"{len(src) / seconds:.1f} | load {os.getloadavg()[0]:.2f} |", flush=True)

    print("| output | terms present | BLEU | sentences/s (all lines) | |")
    print("| --- | --- | --- | --- | --- |")
    row("no terms", plain_text, t_plain)
    (args.out / "plain.de").write_text("\n".join(plain_text) + "\n")
    sub, own = {}, {}
    linked = model.translate_full(src, align=True)  # the plain outputs' links, untimed
    for method in ("prefix", "align"):
        out, secs = _timed(model, src, terms=pairs, terms_method=method, repeat=args.repeat)
        texts = [r.text for r in out]
        (args.out / f"{method}.de").write_text("\n".join(texts) + "\n")
        row(f"terms, {method}", texts, secs)
        changed = sum(texts[k] != plain_text[k] for k in bare)
        sub[method] = changed
        own[method] = beside(glossary, src, linked, texts)
    print("\nPlaced terms with the model's own word for them just beside (\"Ein Köter Hund\"): "
          + ", ".join(f"{m} {d}/{n} ({100 * d / max(n, 1):.1f}%)" for m, (d, n) in own.items()))
    print("\nLines without a term (unchanged output and speed):")
    lines = [src[k] for k in bare]
    t0 = t1 = float("inf")
    for _ in range(args.repeat + 1):  # alternated, so that both see the same load
        t0 = min(t0, _timed(model, lines)[1])
        t1 = min(t1, _timed(model, lines, terms=pairs)[1])
    print(f"- {len(lines)} lines: {len(lines) / t0:.1f} sentences/s plain, "
          f"{len(lines) / t1:.1f} with the glossary; outputs that differ from plain: "
          + ", ".join(f"{m} {n}" for m, n in sub.items())
          + f" (load {os.getloadavg()[0]:.2f})")
    tl = [src[k] for k in termed]
    _, t2 = _timed(model, tl, repeat=args.repeat)
    speeds = [f"{len(tl) / t2:.1f} plain"]
    for method in ("prefix", "align"):
        _, t3 = _timed(model, tl, terms=pairs, terms_method=method, repeat=args.repeat)
        speeds.append(f"{len(tl) / t3:.1f} {method}")
    print(f"- {len(tl)} lines with terms: sentences/s " + ", ".join(speeds)
          + f" (load {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    sys.exit(main())
