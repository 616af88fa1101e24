"""Documents: sentence splitting, markup placement, and whole files end to end.

    python bench/documents.py                      # the splitters (no model needed)
    python bench/documents.py RUN --threads 1      # and everything that needs an en-de model

1. Splitters: 1,000 paragraphs of 1-6 sentences joined by a space, drawn (seeded) from
   test2016 and from a sample of Tatoeba (only lines ending in . ! ? or a quote, and none
   holding a boundary inside: their gold boundaries are the joins); boundary recall and
   precision, paragraphs split exactly right, and the time for all 1,000, for BlingFire (what
   mtkit uses, through `sentence_ranges`), sentencex and pysbd where installed, timed
   alternately (the fastest of --repeat each; the machine may be shared).
2. Placement (RUN): bench/data/placement-test2016.jsonl holds 100 test2016 sentences with
   tags around 1-3 source words (50 single, 25 nested, 25 adjacent pairs) and where each tag
   belongs in the German reference, placed by reading it (word spans; the text stays in
   ../shared/data). Each reference is forced as the translation (`prefix`), so the placement
   is judged on fixed German words: a tag is right when it encloses exactly its gold words.
   The relative-position fallback, the documents' own links (`link_extras` through
   `model.decode`: the production path), and every layer and link method side by side.
3. BLEU (RUN): the 100 sentences translated with their tags through the HTML reader, tags
   stripped, against the same sentences translated plain: equal when the markup cannot
   change the words.
4. End to end: a 200-paragraph HTML page and a 500-cue SRT made from test2016 sentences,
   read, split, placed and written with a model-free copying translator (the documents' own
   cost, and a check that copying gives the input back), and (RUN) translated by
   `translate_document` (greedy), seconds and sentences/s, alternately with the search's own
   links (no forced pass) to price the forced pass.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data"
GOLD = REPO / "bench" / "data" / "placement-test2016.jsonl"
METHODS = ("argmax-tgt", "argmax-src", "intersection", "union", "grow-diag-final")


def _args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, nargs="?", help="a trained en-de run directory")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="timings per splitter")
    ap.add_argument("--data", type=Path, default=DATA, help="the shared data folder")
    return ap.parse_args(argv)


def _read(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


# --------------------------------------------------------------------------- splitters


def paragraphs(data: Path, n: int = 1000) -> list[list[str]]:
    rng = random.Random(1)
    final = re.compile(r"[.!?\"]$")
    inside = re.compile(r"[.!?][\"']?\s")
    t16 = [s for s in _read(data / "multi30k" / "test_2016_flickr.en.gz") if final.search(s)]
    tat = rng.sample(_read(data / "tatoeba" / "all.en.gz"), 4000)
    tat = [s for s in tat if final.search(s) and not inside.search(s[:-1])]
    pool = t16 + tat
    rng.shuffle(pool)
    out, at = [], 0
    while len(out) < n and at < len(pool):
        k = rng.randint(1, 6)
        out.append(pool[at:at + k])
        at += k
    return out


def _splitters():
    from mtkit.documents.sentences import sentence_ranges

    def mtkit_blingfire(text):
        words = [m.span() for m in re.finditer(r"\S+", text)]
        return [words[e - 1][1] for _, e in sentence_ranges(text, words)]

    found = {"blingfire (mtkit)": mtkit_blingfire}
    try:
        import sentencex

        def sx(text):
            ends, at = [], 0
            for s in sentencex.segment("en", text):
                s = s.strip()
                if s:
                    at = text.index(s, at) + len(s)
                    ends.append(at)
            return ends

        found["sentencex"] = sx
    except ImportError:
        pass
    try:
        import pysbd

        seg = pysbd.Segmenter(language="en", clean=False, char_span=True)
        found["pysbd"] = lambda text: [s.end for s in seg.segment(text)]
    except ImportError:
        pass
    return found


def bench_splitters(paras: list[list[str]], repeat: int) -> None:
    texts = [" ".join(p) for p in paras]
    gold = []
    for p in paras:
        ends, at = set(), 0
        for s in p[:-1]:
            at += len(s)
            ends.add(at)
            at += 1
        gold.append(ends)
    splitters = _splitters()
    times = {name: float("inf") for name in splitters}
    preds = {}
    for _ in range(repeat):  # alternately: load changes hit every splitter alike
        for name, split in splitters.items():
            start = time.perf_counter()
            preds[name] = [split(t) for t in texts]
            times[name] = min(times[name], time.perf_counter() - start)
    n_gold = sum(len(g) for g in gold)
    print(f"splitters: {len(paras)} paragraphs, {n_gold} boundaries, "
          f"{sum(len(p) for p in paras)} sentences")
    for name in splitters:
        tp = fp = exact = 0
        for t, g, pred in zip(texts, gold, preds[name], strict=True):
            got = {len(t[:e].rstrip()) for e in pred if 0 < e < len(t.rstrip())}
            tp += len(got & g)
            fp += len(got - g)
            exact += got == g
        print(f"  {name:18s} recall {tp / n_gold:.2%}  precision {tp / max(1, tp + fp):.2%}  "
              f"exact paragraphs {exact / len(paras):.1%}  time {times[name]:.3f} s "
              f"(x{times[name] / times['blingfire (mtkit)']:.2f})")


# --------------------------------------------------------------------------- placement


def _tagged_items(words: list[str], spans: list[list]):
    from mtkit.documents.inline import Tag, Text

    opens: dict[int, list] = {}
    closes: dict[int, list] = {}
    for a, b, name in spans:
        opens.setdefault(a, []).append((b, name))
        closes.setdefault(b, []).append((a, name))
    items = []
    for k in range(len(words) + 1):
        for _, name in sorted(closes.get(k, []), key=lambda t: t[0], reverse=True):
            items.append(Tag("close", f"</{name}>", name))
        if k < len(words):
            if k:
                items.append(Text(" "))
            for _, name in sorted(opens.get(k, []), key=lambda t: -t[0]):
                items.append(Tag("open", f"<{name}>", name))
            items.append(Text(words[k]))
    return items


def _spans_of(text: str) -> list[list]:
    """The word spans [a, b) of the <b>/<i> pairs in a tagged translation."""
    out, stack, k = [], [], 0
    for tok in text.split():
        lead, word, trail = re.fullmatch(r"((?:</?\w>)*)(.*?)((?:</?\w>)*)", tok).groups()
        _tags(lead, k, stack, out)
        k += bool(word)
        _tags(trail, k, stack, out)
    return sorted(out)


def _tags(part: str, k: int, stack: list, out: list) -> None:
    for close, name in re.findall(r"<(/?)(\w)>", part):
        if close:
            a, _ = stack.pop()
            out.append([a, k, name])
        else:
            stack.append((k, name))


def bench_placement(model, data: Path) -> list[tuple[str, str, list]]:
    """Placement by each attention and link method, on the whole set and on its two halves
    (even and odd entries: a method chosen on one half is checked on the other)."""
    gold = [json.loads(line) for line in GOLD.read_text().splitlines()]
    en = _read(data / "multi30k" / "test_2016_flickr.en.gz")
    de = _read(data / "multi30k" / "test_2016_flickr.de.gz")
    sources, refs = [en[g["line"]] for g in gold], [de[g["line"]] for g in gold]
    print(f"placement: {len(gold)} test2016 sentences, forced to their references; "
          "tags right: all, even entries, odd entries")
    matrices = {"alignment layer": _word_matrices(model, sources, refs, None)}
    for layer in range(model.info.layers or 0):
        matrices[f"layer {layer}"] = _word_matrices(model, sources, refs, layer)
    layered = [m for k, m in matrices.items() if k.startswith("layer ")]
    if layered:
        matrices["layers averaged"] = [sum(ms) / len(ms) for ms in zip(*layered, strict=True)]
    _placed(gold, en, {s: (r, []) for s, r in zip(sources, refs, strict=True)}, "position",
            "relative position (fallback)")
    _placed(gold, en, _production_links(model, sources, refs), "align",
            "documents' own links (production path)")
    from mtkit.align.links import extract_links

    for name, mats in matrices.items():
        for method in METHODS:
            links = [extract_links(w, method) for w in mats]
            by_source = {s: (r, k) for s, r, k in zip(sources, refs, links, strict=True)}
            _placed(gold, en, by_source, "align", f"{method}, {name}")
    return [(en[g["line"]], refs[k], g["en"]) for k, g in enumerate(gold)]


def _production_links(model, sources: list[str], refs: list[str]) -> dict:
    """Each sentence's forced reference with the links `translate_document` places markup by:
    its extras (`link_extras`) through `model.decode`, the output limit 0·S + 1 (raised to
    the prefix's length) so that the translation is the reference and nothing after it."""
    from mtkit.documents.formats import link_extras, parse_links

    extras = link_extras(model, "align")
    cfg = model.options({"method": "greedy", "max_len_a": 0, "max_len_b": 1})
    out = model.decode(sources, cfg, extras, prefixes=refs)
    by_source = {}
    for s, r, t in zip(sources, refs, out, strict=True):
        assert len(t.text.split()) == len(r.split()), (t.text, r)  # no continuation
        by_source[s] = (r, parse_links(t.candidates[0].alignment or ""))
    print(f"  (production path: {extras.align_method} links, layer {extras.align_layer})")
    return by_source


def _word_matrices(model, sources: list[str], refs: list[str], layer: int | None) -> list:
    """Each sentence's word-level (T, S) cross-attention with its reference forced, from
    `layer` (None: the search's own, the alignment layer), heads averaged: EOS dropped and
    rows renormalised before pieces merge into words, as the aligner does
    (`pharaoh_aligner`); rows past the reference's words (the model's continuation) cut."""
    import numpy as np

    from mtkit.align.matrix import drop_eos, merge_subwords

    out = model.translate_full(sources, attention=True, layer=layer, prefix=refs,
                               method="greedy")
    mats = []
    for t, src, ref in zip(out, sources, refs, strict=True):
        c = t.candidates[0]
        w = np.asarray(c.attention.subword.weights)
        w = merge_subwords(drop_eos(w, len(t.source_tokens), len(c.tokens)),
                           t.source_tokens, c.tokens)
        n = len(ref.split())
        assert w.shape[1] == len(src.split()) and w.shape[0] >= n, (src, w.shape)
        mats.append(w[:n])
    return mats


def _placed(gold, en, by_source, method, label) -> None:
    """The share of tags on their gold words with `method` (align or position), over all
    entries, the even and the odd ones; `by_source`: each sentence's forced reference and its
    links."""
    from mtkit.documents.blocks import translate_blocks
    from mtkit.documents.inline import Tag, Text

    def translate(sentences):
        return [by_source[s] for s in sentences]

    right = [[0, 0], [0, 0]]
    kinds = {"single": [0, 0], "nested": [0, 0], "adjacent": [0, 0]}
    for n, g in enumerate(gold):
        items = _tagged_items(en[g["line"]].split(), g["en"])
        out = translate_blocks([items], translate, placement=method)[0]
        text = "".join(it.text if isinstance(it, Text) else it.raw for it in out)
        got = _spans_of(text)
        for span in g["de"]:
            for tally in (right[n % 2], kinds[g["kind"]]):
                tally[0] += span in got
                tally[1] += 1
        assert sum(isinstance(it, Tag) for it in out) == 2 * len(g["en"])
    ok, total = right[0][0] + right[1][0], right[0][1] + right[1][1]
    halves = "  ".join(f"{r[0]}/{r[1]} = {r[0] / r[1]:.1%}" for r in right)
    by_kind = ", ".join(f"{k} {r[0]}/{r[1]}" for k, r in kinds.items())
    print(f"  {label:42s} {ok}/{total} = {ok / total:.1%}   {halves}   ({by_kind})")


def bench_bleu(model, sentences) -> None:
    import sacrebleu

    from mtkit.documents.formats import translate_document

    page = "".join(
        "<p>" + "".join(it.raw if hasattr(it, "raw") else it.text
                        for it in _tagged_items(src.split(), spans)) + "</p>\n"
        for src, _, spans in sentences)
    out = translate_document(model, page.encode(), "html",
                             options={"method": "greedy"}).data.decode()
    tagged = [re.sub(r"<[^>]+>", "", p) for p in re.findall(r"<p>(.*?)</p>", out)]
    plain = model.translate([s for s, _, _ in sentences], method="greedy")
    refs = [[r for _, r, _ in sentences]]
    a, b = sacrebleu.corpus_bleu(tagged, refs).score, sacrebleu.corpus_bleu(plain, refs).score
    same = sum(x.split() == y.split() for x, y in zip(tagged, plain, strict=True))
    print(f"BLEU, tags stripped {a:.2f} vs plain {b:.2f}; {same}/{len(plain)} outputs identical")


def documents(data: Path) -> tuple[str, str]:
    """A 200-paragraph HTML page (three test2016 sentences each, every fourth with a <b>)
    and a 500-cue SRT (a test2016 sentence per cue)."""
    src = _read(data / "multi30k" / "test_2016_flickr.en.gz")
    rng = random.Random(2)
    paras = ["<p>" + " ".join(rng.sample(src, 3)).replace("&", "&amp;") + "</p>"
             for _ in range(200)]
    for n in range(0, 200, 4):  # some inline markup, as a page has
        paras[n] = paras[n].replace(" a ", " <b>a</b> ", 1)
    page = "<html><body>\n" + "\n".join(paras) + "\n</body></html>\n"
    cues = [f"{n + 1}\n00:{n // 60:02d}:{n % 60:02d},000 --> 00:{n // 60:02d}:{n % 60:02d},900\n"
            f"{src[n]}\n" for n in range(500)]
    return page, "\n".join(cues)


def bench_overhead(data: Path) -> None:
    """The documents' own work (reading, splitting, placing, writing) with a translator that
    copies each sentence and links word i to word i: no model."""
    from mtkit.documents.blocks import translate_blocks
    from mtkit.documents.formats import open_document

    def copy(sentences):
        return [(s, [(i, i) for i in range(len(s.split()))]) for s in sentences]

    page, srt = documents(data)
    for name, text, fmt in (("200-paragraph HTML", page, "html"), ("500-cue SRT", srt, "srt")):
        start = time.perf_counter()
        doc = open_document(text.encode(), fmt)
        out = doc.render(translate_blocks(doc.blocks(), copy))
        took = time.perf_counter() - start
        same = "same" if out == text else "differs"
        print(f"{name}, no model: {took:.2f} s (the copy's output {same} as the input)")


def bench_end_to_end(model, data: Path, repeat: int) -> None:
    """Each document through `translate_document` (greedy), alternately as the documents
    place markup (links from a forced pass over the translation: the layers' mean) and with
    the search's own attention's links instead (no forced pass): the fastest of `repeat`
    each, and the forced pass's cost as a ratio."""
    import dataclasses

    from mtkit.documents.formats import translate_document

    def own_links(lines, cfg, extras, **kw):
        return model.decode(lines, cfg, dataclasses.replace(extras, align_layer=None), **kw)

    page, srt = documents(data)
    for name, data_in, fmt in (("200-paragraph HTML", page, "html"), ("500-cue SRT", srt, "srt")):
        mine, own = "documents' links", "search's own links"
        best = {mine: float("inf"), own: float("inf")}
        for _ in range(repeat):
            for label, decode in ((mine, None), (own, own_links)):
                start = time.perf_counter()
                result = translate_document(model, data_in.encode(), fmt, decode=decode,
                                            options={"method": "greedy"})
                best[label] = min(best[label], time.perf_counter() - start)
        took = best[mine]
        print(f"{name}: {took:.1f} s, {result.sentences} sentences, "
              f"{result.sentences / took:.1f} sentences/s, problems: {result.problems or 'none'}"
              f"; with the {own} {best[own]:.1f} s (x{took / best[own]:.2f} for the forced "
              f"pass), load {os.getloadavg()[0]:.1f}")


def main(argv=None) -> None:
    args = _args(argv)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}")
    bench_splitters(paragraphs(args.data), args.repeat)
    bench_overhead(args.data)
    if args.run is None:
        print("placement, BLEU, end to end: give an en-de run directory")
        return
    import mtkit

    model = mtkit.load(args.run, device="cpu", threads=args.threads)
    sentences = bench_placement(model, args.data)
    bench_bleu(model, sentences)
    bench_end_to_end(model, args.data, args.repeat)


if __name__ == "__main__":
    main()
