"""The decoding length penalty of a trained run, chosen on its validation split.

Beam search prefers short hypotheses (each token multiplies in a probability below 1), and
small-data models trained for minutes decode short: on the CPU demo's model the brevity
penalty of test2016 is 0.93. The length penalty corrects for that (Wu et al. 2016, eq. 14);
its best strength depends on the model, so it is chosen per run: a small grid (no penalty,
the average per token, GNMT at several alphas) is decoded on the validation split with the
run's beam, scored with corpus BLEU, and the winner is written into the run's decoding
defaults (`mtkit.run.RunChoice`), which `translate`, `score --run`, `align` and the API use for
the run's model. Every setting's score is kept in model.json and metrics.jsonl, and said.

`min_len` is not swept: it is a count of tokens for every sentence, where Multi30k's run
from 3 to 40 words; the output limit (`max_len_a`/`max_len_b`) is not either, as it cuts
long outputs and the problem is short ones.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mtkit.config import DecodeConfig
from mtkit.config.sections import LengthPenalty
from mtkit.errors import ConfigError

DEFAULT_ALPHAS = (0.6, 1.0, 1.5, 2.0)


@dataclass(frozen=True)
class LengthSetting:
    """One point of the grid: a `decode.length_penalty` and, for gnmt (or a current power
    penalty), its alpha."""

    length_penalty: LengthPenalty
    alpha: float

    def changes(self) -> dict[str, object]:
        """The decode fields this setting sets."""
        return {"length_penalty": self.length_penalty, "alpha": self.alpha}

    def label(self) -> str:
        return (f"{self.length_penalty} alpha {self.alpha:g}"
                if self.length_penalty in ("gnmt", "power") else self.length_penalty)


@dataclass(frozen=True)
class SweepPoint:
    setting: LengthSetting
    bleu: float
    chrf: float
    brevity_penalty: float
    length_ratio: float


@dataclass(frozen=True)
class SweepResult:
    """Every point, in the order decoded (the run's current setting first), and the winner:
    the highest BLEU, the current setting on a tie."""

    points: list[SweepPoint]
    chosen: SweepPoint
    current: SweepPoint
    checkpoint: Path
    choice_path: Path


def grid(current: DecodeConfig, alphas: Sequence[float] = DEFAULT_ALPHAS) -> list[LengthSetting]:
    """The settings swept: the current one first (it wins ties), then none, average, and
    gnmt at each alpha."""
    if not alphas:
        raise ConfigError("alphas: expected at least one GNMT alpha")
    for a in alphas:
        if not 0.0 <= a <= 10.0:
            raise ConfigError(f"alphas: {a:g} is outside [0, 10] (decode.alpha's range)")
    # alpha does not enter `none` or `average`: they keep the current alpha, so that the
    # current setting is recognised whichever penalty it has
    settings = [LengthSetting(current.length_penalty, current.alpha)]
    settings += [LengthSetting("none", current.alpha), LengthSetting("average", current.alpha)]
    settings += [LengthSetting("gnmt", float(a)) for a in alphas]
    return list(dict.fromkeys(settings))


def record(run: Path, ckpt: Path, points: list[SweepPoint], chosen: SweepPoint, *,
           split: str) -> Path:
    """Write the winner into the run's decoding defaults (keeping its choice of model) and
    every point into model.json's `why` and a `length_sweep` record of metrics.jsonl."""
    from mtkit.fileio import open_own
    from mtkit.run import METRICS, RunChoice, file_fingerprint, read_choice, write_choice

    table = [{"length_penalty": p.setting.length_penalty, "alpha": p.setting.alpha,
              "bleu": p.bleu, "chrf": p.chrf, "bp": p.brevity_penalty,
              "ratio": p.length_ratio} for p in points]
    decode = {"length_penalty": chosen.setting.length_penalty, "alpha": chosen.setting.alpha}
    sweep_note = {"split": split, "metric": "bleu", "points": table}
    was = read_choice(run)
    why = {**(was.why if was is not None else {}), "length_sweep": sweep_note}
    path = write_choice(run, RunChoice(ckpt.name, file_fingerprint(ckpt),
                                       {**(was.decode if was else {}), **decode}, why))
    with os.fdopen(open_own(run / METRICS), "a", encoding="utf-8") as f:
        f.write(json.dumps({"kind": "length_sweep", "checkpoint": ckpt.name, "chosen": decode,
                            **sweep_note}) + "\n")
    return path
