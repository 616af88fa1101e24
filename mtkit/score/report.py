"""What `mtkit score` found, as values (`ScoreReport` and its parts), as rich tables
(`ScoreReport.render`), as JSON (`ScoreReport.to_dict`) and as a plot of BLEU by source
length (`plot_by_length`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mtkit.errors import MtkitError

TEST_NAMES = {"bs": "Paired bootstrap resampling", "ar": "Paired approximate randomization"}
PLOT_FORMATS = ("png", "svg", "pdf")


@dataclass(frozen=True)
class MetricScore:
    """One corpus score as sacrebleu computes it."""

    name: str  # sacrebleu's own name: BLEU, chrF2, chrF2++, TER
    score: float
    verbose: str  # BLEU's n-gram precisions, brevity penalty and lengths; "" for the others


@dataclass(frozen=True)
class PairedScore:
    """One system under one paired test and metric (sacrebleu.significance.Result)."""

    score: float
    mean: float | None  # mean over the bootstrap resamples
    ci: float | None  # half-width of the 95% bootstrap interval: mean ± ci
    p_value: float | None  # None for the baseline


@dataclass(frozen=True)
class PairedTestResult:
    """One paired test (`bs` or `ar`) of every system against the baseline (system 0)."""

    test: str
    n: int  # resamples (bs) or trials (ar)
    seed: int
    alpha: float
    signatures: dict[str, str]  # metric name -> signature with the test's n and seed
    results: dict[str, list[PairedScore]]  # metric name -> one per system, baseline first

    def significant(self, metric: str, system: int) -> bool:
        p = self.results[metric][system].p_value
        return p is not None and p < self.alpha


# A bucket of fewer sentences is marked as unreliable: its corpus BLEU rests on too few
# n-grams to compare with the other buckets'.
MIN_RELIABLE = 20


@dataclass(frozen=True)
class LengthBucket:
    """Sentences whose source has `lo`..`hi` whitespace tokens (`hi` None: no upper bound); a
    bucket holds at least one sentence."""

    lo: int
    hi: int | None
    sentences: int
    bleu: tuple[float, ...]  # corpus BLEU per system

    @property
    def label(self) -> str:
        return f"{self.lo}+" if self.hi is None else f"{self.lo}-{self.hi}"

    @property
    def reliable(self) -> bool:
        return self.sentences >= MIN_RELIABLE

    @property
    def count(self) -> str:
        """The sentence count as tables and plots show it: 'few' when not reliable."""
        return f"{self.sentences}" if self.reliable else f"{self.sentences}, few"


@dataclass(frozen=True)
class ScoreReport:
    """Everything `mtkit score` found; `render` prints it as tables, `to_dict` as JSON."""

    references: list[str]
    systems: list[str]  # hypothesis names; systems[0] is the baseline of the paired tests
    sentences: int
    scores: list[dict[str, MetricScore]]  # per system: metric name -> score
    signatures: dict[str, str]  # metric name -> sacrebleu signature
    width: int
    significance: list[PairedTestResult]
    by_length: list[LengthBucket] | None = None
    length_signature: str | None = None  # signature of the BLEU behind `by_length`
    warnings: tuple[str, ...] = ()  # about the inputs (invalid UTF-8), for stderr

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "references": self.references, "sentences": self.sentences,
            "signatures": self.signatures,
            "systems": [{"name": name, "scores": {m: _score_dict(s) for m, s in sc.items()}}
                        for name, sc in zip(self.systems, self.scores, strict=True)],
        }
        if self.significance:
            out["significance"] = [_test_dict(t, self.systems) for t in self.significance]
        if self.by_length is not None:
            out["by_length"] = {
                "signature": self.length_signature, "length": "source whitespace tokens",
                "buckets": [_bucket_dict(b, self.systems) for b in self.by_length]}
        return out

    def render(self, console: Console) -> None:
        _render_scores(self, console)
        for test in self.significance:
            _render_test(self, test, console)
        if self.by_length is not None:
            _render_lengths(self, console)


def _score_dict(s: MetricScore) -> dict[str, Any]:
    d: dict[str, Any] = {"score": s.score}
    if s.verbose:
        d["verbose"] = s.verbose
    return d


def _bucket_dict(b: LengthBucket, systems: list[str]) -> dict[str, Any]:
    return {"label": b.label, "min": b.lo, "max": b.hi, "sentences": b.sentences,
            "reliable": b.reliable,
            "bleu": [{"system": n, "score": x} for n, x in zip(systems, b.bleu, strict=True)]}


def _test_dict(t: PairedTestResult, systems: list[str]) -> dict[str, Any]:
    rows = []
    for i, name in enumerate(systems):
        rows.append({"name": name, "baseline": i == 0, "metrics": {
            m: {"score": r[i].score, "mean": r[i].mean, "ci95": r[i].ci, "p_value": r[i].p_value,
                "significant": t.significant(m, i)} for m, r in t.results.items()}})
    return {"test": t.test, "n": t.n, "seed": t.seed, "alpha": t.alpha,
            "signatures": t.signatures, "systems": rows}


# --------------------------------------------------------------------------- plot


def plot_format(path: Path) -> str:
    """The image format a plot path asks for, by its extension."""
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in PLOT_FORMATS:
        raise MtkitError(f"plot file {path}: expected a .png, .svg or .pdf name")
    return fmt


def plot_by_length(report: ScoreReport, path: Path) -> None:
    """Line plot of corpus BLEU per source-length bucket, one line per system (Bahdanau et al.
    2015, Fig. 2), written atomically as PNG, SVG or PDF by the file's extension. Buckets of
    fewer than `MIN_RELIABLE` sentences are hollow points, their counts marked 'few'."""
    if report.by_length is None:
        raise MtkitError("no BLEU by length to plot: score with a source file")
    fmt = plot_format(path)
    # A bare Figure: no pyplot, so no global backend state and no display needed
    from matplotlib.figure import Figure

    from mtkit.fileio import save_figure

    fig = Figure(figsize=(7.0, 4.2), layout="constrained")
    ax = fig.add_subplot()
    buckets = report.by_length
    x = list(range(len(buckets)))
    few = [i for i, b in enumerate(buckets) if not b.reliable]
    for j, name in enumerate(report.systems):
        y = [b.bleu[j] for b in buckets]
        (line,) = ax.plot(x, y, marker="o", label=name)
        ax.plot([x[i] for i in few], [y[i] for i in few], linestyle="none", marker="o",
                markerfacecolor="white", markeredgecolor=line.get_color())
    ax.set_xticks(x, [f"{b.label}\n({b.count})" for b in buckets])
    ax.set_xlabel("source sentence length in words (sentences in bucket; hollow, few: under "
                  f"{MIN_RELIABLE} sentences, unreliable)" if few else
                  "source sentence length in words (sentences in bucket)")
    ax.set_ylabel("BLEU")
    ax.set_title("BLEU by source sentence length")
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, path, fmt)


# --------------------------------------------------------------------------- tables


def _fmt(x: float | None, width: int) -> str:
    return "-" if x is None else f"{x:.{width}f}"


def _render_scores(report: ScoreReport, console: Console) -> None:
    names = list(report.signatures)
    console.print(f"[bold]Scores[/bold]: {report.sentences} sentences against "
                  f"{', '.join(report.references)}", soft_wrap=True)
    table = Table()
    table.add_column("System")
    for n in names:
        table.add_column(n, justify="right")
    for system, scores in zip(report.systems, report.scores, strict=True):
        table.add_row(system, *(_fmt(scores[n].score, report.width) for n in names))
    console.print(table)
    for n in names:
        console.print(f"{n} signature: {report.signatures[n]}", soft_wrap=True, highlight=False)
    for system, scores in zip(report.systems, report.scores, strict=True):
        for n in names:
            if scores[n].verbose:
                console.print(f"{n} {system}: {scores[n].verbose}", soft_wrap=True,
                              highlight=False)


def _render_test(report: ScoreReport, test: PairedTestResult, console: Console) -> None:
    w = report.width
    console.print(f"[bold]{TEST_NAMES[test.test]}[/bold] (n={test.n}, seed {test.seed}): "
                  f"score (μ ± 95% CI); * p < {test.alpha} against the baseline", soft_wrap=True)
    table = Table()
    table.add_column("System")
    for m in test.results:
        table.add_column(m, justify="right")
    for i, system in enumerate(report.systems):
        cells = []
        for m, column in test.results.items():
            r = column[i]
            cell = _fmt(r.score, w)
            if r.mean is not None and r.ci is not None:
                cell += f" ({r.mean:.{w}f} ± {r.ci:.{w}f})"
            if r.p_value is not None:
                star = " *" if test.significant(m, i) else ""
                cell += f"\np = {r.p_value:.4f}{star}"
            cells.append(cell)
        table.add_row(f"Baseline: {system}" if i == 0 else system, *cells)
    console.print(table)
    for m, sig in test.signatures.items():
        console.print(f"{m} signature: {sig}", soft_wrap=True, highlight=False)


def _render_lengths(report: ScoreReport, console: Console) -> None:
    assert report.by_length is not None
    console.print("[bold]BLEU by source length[/bold] (whitespace tokens)", soft_wrap=True)
    table = Table()
    table.add_column("Length")
    table.add_column("Sentences", justify="right")
    for system in report.systems:
        table.add_column(system, justify="right")
    for b in report.by_length:
        table.add_row(b.label, b.count, *(_fmt(x, report.width) for x in b.bleu))
    console.print(table)
    if not all(b.reliable for b in report.by_length):
        console.print(f"few: a bucket of under {MIN_RELIABLE} sentences, whose BLEU is "
                      "unreliable; empty buckets are left out", soft_wrap=True,
                      highlight=False)
    console.print(f"BLEU signature: {report.length_signature}", soft_wrap=True, highlight=False)
