"""Language identification for `source: auto`: py3langid against lingua-language-detector,
interleaved in one run, on Tatoeba (../shared/data/tatoeba, en and de).

    python bench/detect_accuracy.py

For each language, 1,000 sentences drawn with a fixed seed from the whole corpus (it is
sorted by length, so a draw spans every length), and 1,000 short inputs: the sentences of 1
to 3 words. Each detector is asked twice: restricted to {en, de} (what the server does with an
en->de and a de->en model loaded) and over every language it offers (97 for py3langid, 75
for lingua). Printed: accuracy per set and language, and the median time of one call.
"""

from __future__ import annotations

import argparse
import gzip
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LANGS = ("en", "de")


def _sets(data: Path, n: int) -> dict[str, dict[str, list[str]]]:
    rng = random.Random(1)
    out: dict[str, dict[str, list[str]]] = {"sentences": {}, "1-3 words": {}}
    for lang in LANGS:
        lines = [line.strip() for line in gzip.open(data / f"all.{lang}.gz", "rt",
                                                    encoding="utf-8")]
        lines = sorted(set(filter(None, lines)))
        short = [s for s in lines if len(s.split()) <= 3]
        out["sentences"][lang] = rng.sample(lines, n)
        out["1-3 words"][lang] = rng.sample(short, min(n, len(short)))
    return out


def _py3langid(restrict: bool) -> Callable[[str], str]:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    if restrict:
        ident.set_languages(list(LANGS))
    return lambda text: ident.classify(text)[0]


def _lingua(restrict: bool) -> Callable[[str], str]:
    from lingua import IsoCode639_1, Language, LanguageDetectorBuilder

    if restrict:
        langs = [Language.from_iso_code_639_1(getattr(IsoCode639_1, c.upper())) for c in LANGS]
        builder = LanguageDetectorBuilder.from_languages(*langs)
    else:
        builder = LanguageDetectorBuilder.from_all_languages()
    detector = builder.with_preloaded_language_models().build()

    def detect(text: str) -> str:
        found = detector.detect_language_of(text)
        return "?" if found is None else found.iso_code_639_1.name.lower()

    return detect


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "tatoeba")
    ap.add_argument("-n", type=int, default=1000)
    args = ap.parse_args()
    import os

    print(f"load average: {os.getloadavg()}", file=sys.stderr)
    sets = _sets(args.data, args.n)
    for restrict in (True, False):
        scope = "restricted to en, de" if restrict else "every language it offers"
        t0 = time.perf_counter()
        detectors = {"py3langid": _py3langid(restrict), "lingua": _lingua(restrict)}
        print(f"\n{scope} (both loaded in {time.perf_counter() - t0:.1f} s)")
        for set_name, by_lang in sets.items():
            for lang, texts in by_lang.items():
                row = []
                for name, detect in detectors.items():  # interleaved: same load for both
                    times, right = [], 0
                    for text in texts:
                        start = time.perf_counter()
                        right += detect(text) == lang
                        times.append(time.perf_counter() - start)
                    row.append(f"{name} {right / len(texts):6.1%} "
                               f"({statistics.median(times) * 1e6:5.0f} us/call)")
                print(f"  {set_name:10s} {lang} n={len(texts)}: " + "   ".join(row))
    print(f"load average: {os.getloadavg()}", file=sys.stderr)


if __name__ == "__main__":
    main()
