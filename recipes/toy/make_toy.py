"""Generate the toy parallel task under recipes/toy/ (committed; rerun to regenerate).

Source: 2-7 made-up words drawn from a fixed list of 24. Target: the same words in reverse
order. A model must learn a reordering (its attention is anti-diagonal), which tiny models
learn in seconds. Seeded: the output is the same on every run. train.align holds the true
word alignment of the training split (Pharaoh links i-j, source word i = target word
n-1-i), for guided alignment (`data.train.align`).

    python recipes/toy/make_toy.py
"""

import random
from pathlib import Path

WORDS = ("ba", "ko", "mir", "tu", "lem", "sa", "dov", "pik", "ra", "nel", "gu", "fos",
         "zen", "ta", "lop", "wi", "ke", "dar", "mu", "hab", "so", "vin", "ju", "pel")
SPLITS = {"train": 1000, "valid": 60, "test": 60}


def main() -> None:
    rng = random.Random(1)
    out = Path(__file__).parent
    for name, n in SPLITS.items():
        src, tgt = [], []
        for _ in range(n):
            words = [rng.choice(WORDS) for _ in range(rng.randint(2, 7))]
            src.append(" ".join(words))
            tgt.append(" ".join(reversed(words)))
        (out / f"{name}.src").write_text("\n".join(src) + "\n", encoding="utf-8")
        (out / f"{name}.tgt").write_text("\n".join(tgt) + "\n", encoding="utf-8")
        if name == "train":
            links = [" ".join(f"{i}-{len(s.split()) - 1 - i}" for i in range(len(s.split())))
                     for s in src]
            (out / "train.align").write_text("\n".join(links) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
