"""Scoring translations the way MT papers report them: corpus BLEU, chrF/chrF++ and TER through
sacreBLEU's own metric classes, each with its reproducibility signature (Post 2018); paired
significance tests between systems through sacreBLEU's own paired bootstrap resampling (Koehn
2004) and approximate randomization (Riezler & Maxwell 2005); and corpus BLEU by source-sentence
length, the view of Bahdanau et al. (2015, Fig. 2) in which a fixed-vector encoder-decoder falls
off on long sentences while an attentional one holds.

Entry points: `score_files(refs, hyps, ...)` (paths; `-` is stdin) and `score_texts` (lines
already read) both return a `ScoreReport`, which renders as rich tables (`render`) or as JSON
(`to_dict`); `plot_by_length(report, path)` draws the length plot.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import math
import os
import sys
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.metrics.base import Metric
from sacrebleu.significance import PairedTest

from mtkit.errors import DataError, MtkitError
from mtkit.fileio import GZIP_MAGIC, InvalidUtf8, decode_lines

METRICS = ("bleu", "chrf", "ter")
TESTS = ("bs", "ar")
TEST_NAMES = {"bs": "Paired bootstrap resampling", "ar": "Paired approximate randomization"}
DEFAULT_BUCKETS = (10, 20, 30, 40, 50)
PLOT_FORMATS = ("png", "svg", "pdf")
STDIN = Path("-")


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class MetricOptions:
    """Which sacreBLEU metrics to compute and the options passed through to their classes."""

    metrics: tuple[str, ...] = METRICS  # any of "bleu", "chrf", "ter", in the order shown
    tokenize: str | None = None  # BLEU's tokenizer (sacrebleu's choices); None: its default 13a
    lowercase: bool = False  # BLEU and chrF; TER has its own flag, as in sacrebleu
    chrf_word_order: int = 0  # word n-gram order of chrF; 2 is chrF++ (Popović 2017)
    ter_case_sensitive: bool = False  # sacrebleu's TER ignores case unless asked
    width: int = 1  # decimals printed, sacrebleu's --width (JSON keeps full precision)

    def __post_init__(self) -> None:
        problems = []
        unknown = [m for m in self.metrics if m not in METRICS]
        if unknown or not self.metrics or len(set(self.metrics)) != len(self.metrics):
            problems.append(f"metrics {','.join(self.metrics) or '(none)'}: expected distinct "
                            f"names among {', '.join(METRICS)}")
        if self.tokenize is not None and self.tokenize not in BLEU.TOKENIZERS:
            problems.append(f"tokenizer {self.tokenize!r} is not one of sacrebleu's: "
                            f"{', '.join(BLEU.TOKENIZERS)}")
        if self.chrf_word_order < 0:
            problems.append(f"chrF word order {self.chrf_word_order}: expected 0 or more "
                            "(2 is chrF++)")
        if not 0 <= self.width <= 10:
            problems.append(f"width {self.width}: expected 0 to 10 decimals")
        if problems:
            raise MtkitError("; ".join(problems))


@dataclass(frozen=True)
class SignificanceOptions:
    """Paired tests of every system against the first (the baseline), as `sacrebleu --paired-bs`
    and `--paired-ar` run them.

    Known limit of sacrebleu's p-values, kept as is except for identical systems (see
    `_paired_score`): trials that tie with the observed difference are not counted. When a
    system differs from the baseline in only a sentence or two, many approximate randomization
    shuffles tie exactly and p comes out too small (1/(n+1) for one differing sentence)."""

    tests: tuple[str, ...] = ("bs",)  # "bs" bootstrap resampling, "ar" approximate randomization
    bs_samples: int = 1000  # bootstrap resamples; also the resamples behind AR's 95% CIs
    ar_trials: int = 10000  # approximate randomization trials
    seed: int = 12345  # sacrebleu's default; it treats 0 as "unseeded", so 0 is refused
    alpha: float = 0.05  # p-values below it are marked significant

    def __post_init__(self) -> None:
        problems = []
        if not self.tests or any(t not in TESTS for t in self.tests):
            problems.append(f"tests {','.join(self.tests) or '(none)'}: expected bs and/or ar")
        if self.bs_samples < 1 or self.ar_trials < 1:
            problems.append(f"bootstrap resamples {self.bs_samples} and AR trials "
                            f"{self.ar_trials}: both must be 1 or more")
        if self.seed < 1:
            problems.append(f"seed {self.seed}: expected 1 or more (sacrebleu reads 0 as "
                            "'no seed')")
        if not 0 < self.alpha < 1:
            problems.append(f"alpha {self.alpha}: expected a level between 0 and 1")
        if problems:
            raise MtkitError("; ".join(problems))


def parse_metrics(text: str) -> tuple[str, ...]:
    """`"bleu,chrf"` -> ("bleu", "chrf"); MetricOptions reports bad names."""
    return tuple(m.strip().lower() for m in text.split(",") if m.strip())


def parse_buckets(text: str) -> tuple[int, ...]:
    """`"10,20,30"` -> (10, 20, 30): the upper edges (inclusive) of the length buckets."""
    try:
        edges = tuple(int(x) for x in text.split(","))
    except ValueError:
        edges = ()
    if not edges or edges[0] < 1 or any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
        raise MtkitError(f"buckets {text!r}: expected increasing positive integers separated "
                         "by commas, e.g. 10,20,30,40,50")
    return edges


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Text:
    """The lines of one input (reference, hypothesis or source); `name` labels it in messages
    and tables."""

    name: str
    lines: tuple[str, ...]
    invalid: InvalidUtf8 | None = None  # where invalid UTF-8 was replaced, if anywhere


def read_text(path: Path) -> Text:
    """Read a file (plain or .gz; `-` is stdin) as lines under mtkit's text policy
    (`mtkit.fileio`), raising DataError for a missing or empty file. Trailing whitespace (a
    Windows `\\r` too) is stripped from each line, as sacrebleu's command line does."""
    name = "<stdin>" if path == STDIN else str(path)
    data = _read_bytes(path, name)
    if not data:
        raise DataError(f"{name}: file is empty; expected one sentence per line")
    raw = data.split(b"\n")
    if raw[-1] == b"":
        raw.pop()  # the final newline ends the last line; it does not start an empty one
    invalid = InvalidUtf8(name)
    lines = tuple(line.rstrip() for line in decode_lines(raw, invalid))
    return Text(name, lines, invalid if invalid.lines else None)


def _read_bytes(path: Path, name: str) -> bytes:
    if path == STDIN:
        return sys.stdin.buffer.read()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{name}: is a directory; expected a text file") from None
    except OSError as e:
        raise DataError(f"{name}: cannot read ({e.strerror})") from None
    if raw[:2] != GZIP_MAGIC:
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"{name}: broken gzip file ({e})") from None


def _check_line_counts(refs: Sequence[Text], hyps: Sequence[Text], src: Text | None) -> None:
    """Every input must be line-parallel with the first reference."""
    first = refs[0]
    others = [("reference", r) for r in refs[1:]] + [("hypothesis", h) for h in hyps]
    if src is not None:
        others.append(("source", src))
    for role, other in others:
        if len(other.lines) != len(first.lines):
            raise DataError(f"line counts differ: reference {first.name} has "
                            f"{len(first.lines)} lines, {role} {other.name} has "
                            f"{len(other.lines)}")


# --------------------------------------------------------------------------- results


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


@dataclass(frozen=True)
class LengthBucket:
    """Sentences whose source has `lo`..`hi` whitespace tokens (`hi` None: no upper bound)."""

    lo: int
    hi: int | None
    sentences: int
    bleu: tuple[float | None, ...]  # corpus BLEU per system; None when the bucket is empty

    @property
    def label(self) -> str:
        return f"{self.lo}+" if self.hi is None else f"{self.lo}-{self.hi}"


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
            "bleu": [{"system": n, "score": x} for n, x in zip(systems, b.bleu, strict=True)]}


def _test_dict(t: PairedTestResult, systems: list[str]) -> dict[str, Any]:
    rows = []
    for i, name in enumerate(systems):
        rows.append({"name": name, "baseline": i == 0, "metrics": {
            m: {"score": r[i].score, "mean": r[i].mean, "ci95": r[i].ci, "p_value": r[i].p_value,
                "significant": t.significant(m, i)} for m, r in t.results.items()}})
    return {"test": t.test, "n": t.n, "seed": t.seed, "alpha": t.alpha,
            "signatures": t.signatures, "systems": rows}


# --------------------------------------------------------------------------- scoring


def score_files(refs: Sequence[Path], hyps: Sequence[Path], *,
                metrics: MetricOptions = MetricOptions(),
                significance: SignificanceOptions | None = None,
                src: Path | None = None,
                buckets: Sequence[int] = DEFAULT_BUCKETS) -> ScoreReport:
    """Read the files (`-` is stdin, at most once) and score them; see `score_texts`."""
    if sum(p == STDIN for p in [*refs, *hyps, *([src] if src else [])]) > 1:
        raise MtkitError("`-` (stdin) can be given only once")
    return score_texts([read_text(p) for p in refs], [read_text(p) for p in hyps],
                       metrics=metrics, significance=significance,
                       src=read_text(src) if src is not None else None, buckets=buckets)


def score_texts(refs: Sequence[Text], hyps: Sequence[Text], *,
                metrics: MetricOptions = MetricOptions(),
                significance: SignificanceOptions | None = None,
                src: Text | None = None,
                buckets: Sequence[int] = DEFAULT_BUCKETS) -> ScoreReport:
    """Score every hypothesis against all references (several references: sacrebleu takes the
    best match per sentence); with `significance`, test every system against hyps[0]; with
    `src`, add corpus BLEU per source-length bucket (`buckets` are inclusive upper edges)."""
    if not refs or not hyps:
        raise MtkitError("need at least one reference and one hypothesis")
    if significance is not None and len(hyps) < 2:
        raise MtkitError("paired significance tests need two or more hypothesis files; "
                         "the first is the baseline")
    _check_line_counts(refs, hyps, src)
    scorers = {key: _make_metric(key, metrics, refs) for key in metrics.metrics}
    # Per-sentence sufficient statistics, once per metric and system; the corpus score is their
    # aggregate, exactly as in sacrebleu's corpus_score.
    stats = {k: [m._extract_corpus_statistics(list(h.lines), None) for h in hyps]
             for k, m in scorers.items()}
    scores = [{k: _aggregate(m, stats[k][i]) for k, m in scorers.items()} for i in range(len(hyps))]
    name = {k: s.name for k, s in scores[0].items()}  # sacrebleu's names: BLEU, chrF2++, TER
    # signatures exist once references were cached; tables are keyed by sacrebleu's names
    signatures = {name[k]: m.get_signature().format() for k, m in scorers.items()}
    same = {name[k]: [st == stats[k][0] for st in stats[k]] for k in scorers}
    tests = [_paired_test(t, hyps, scorers, significance, same)
             for t in (significance.tests if significance else ())]
    warnings = tuple(t.invalid.warning() or "" for t in (*refs, *hyps, *([src] if src else []))
                     if t.invalid is not None)
    report = ScoreReport(
        references=[r.name for r in refs], systems=[h.name for h in hyps],
        sentences=len(refs[0].lines), signatures=signatures, width=metrics.width,
        scores=[{name[k]: s for k, s in row.items()} for row in scores], significance=tests,
        warnings=warnings)
    if src is None:
        return report
    bleu = scorers.get("bleu") or _make_metric("bleu", metrics, refs)
    bleu_stats = stats.get("bleu") or [bleu._extract_corpus_statistics(list(h.lines), None)
                                       for h in hyps]
    return dataclasses.replace(report, by_length=_bleu_by_length(src, bleu, bleu_stats, buckets),
                               length_signature=bleu.get_signature().format())


def _make_metric(name: str, opts: MetricOptions, refs: Sequence[Text]) -> Metric:
    """A sacrebleu metric with the references cached once (as sacrebleu's CLI does)."""
    ref_streams = [list(r.lines) for r in refs]
    try:
        if name == "bleu":
            return BLEU(tokenize=opts.tokenize, lowercase=opts.lowercase, references=ref_streams)
        if name == "chrf":
            return CHRF(word_order=opts.chrf_word_order, lowercase=opts.lowercase,
                        references=ref_streams)
        return TER(case_sensitive=opts.ter_case_sensitive, references=ref_streams)
    except (ImportError, OSError, RuntimeError) as e:
        # the mecab tokenizers need extra packages (RuntimeError), the spm ones a download
        reason = " ".join(str(e).split())
        raise MtkitError(f"sacrebleu cannot set up {name} with tokenizer "
                         f"{opts.tokenize!r}: {reason}") from None


def _aggregate(metric: Metric, stats: list[Any]) -> MetricScore:
    s = metric._aggregate_and_compute(stats)
    return MetricScore(s.name, float(s.score), s._verbose)


# --------------------------------------------------------------------------- significance


@contextlib.contextmanager
def _sacrebleu_seed(seed: int) -> Iterator[None]:
    """sacrebleu takes its RNG seed from $SACREBLEU_SEED, not from an argument (PairedTest and
    its baseline bootstrap both read it), so set it for the duration of one test."""
    old = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if old is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = old


def _paired_test(test: str, hyps: Sequence[Text], scorers: dict[str, Metric],
                 opts: SignificanceOptions, same: dict[str, list[bool]]) -> PairedTestResult:
    """Run sacrebleu's PairedTest exactly as `sacrebleu --paired-bs/--paired-ar` does (one worker,
    references from the metrics' caches); with AR the CIs come from `bs_samples` resamples.
    `same[metric][i]`: system i has the baseline's per-sentence statistics."""
    n = opts.bs_samples if test == "bs" else opts.ar_trials
    named = [(h.name, list(h.lines)) for h in hyps]
    with _sacrebleu_seed(opts.seed):
        paired = PairedTest(named, scorers, references=None, test_type=test, n_samples=n,
                            n_ar_confidence=opts.bs_samples if test == "ar" else -1, n_jobs=1)
        signatures, table = paired()
    results = {}
    for metric, column in table.items():
        if metric == "System":
            continue
        results[metric] = [_paired_score(r, i == 0, same[metric][i]) for i, r in enumerate(column)]
    return PairedTestResult(test=test, n=n, seed=opts.seed, alpha=opts.alpha,
                            signatures={m: s.format() for m, s in signatures.items()},
                            results=results)


def _paired_score(r: Any, is_baseline: bool, same_as_baseline: bool) -> PairedScore:
    p = None if is_baseline else float(r.p_value)
    if p is not None and same_as_baseline:
        # sacrebleu counts only resampled differences strictly above the observed one
        # (significance._compute_p_value), so a system whose sentences score exactly like the
        # baseline's (observed and every resampled difference 0) gets p = 1/(n+1) and is marked
        # significant. With the >= of Riezler & Maxwell (2005) every trial counts: p = 1.
        p = 1.0
    return PairedScore(score=float(r.score),
                       mean=None if r.mean is None else float(r.mean),
                       ci=None if r.ci is None else float(r.ci), p_value=p)


# --------------------------------------------------------------------------- by length


def bucket_bounds(edges: Sequence[int]) -> list[tuple[int, int | None]]:
    """(10, 20) -> [(0, 10), (11, 20), (21, None)]: inclusive length ranges, the last open."""
    lows = [0, *(e + 1 for e in edges)]
    return list(zip(lows, [*edges, None], strict=True))


def _bleu_by_length(src: Text, bleu: Metric, stats: list[list[Any]],
                    edges: Sequence[int]) -> list[LengthBucket]:
    """Corpus BLEU of each bucket's sentences per system, from sacrebleu's per-sentence
    statistics (`stats[system][sentence]`) aggregated over the bucket: the same number as
    `corpus_score` on just those lines."""
    bounds = bucket_bounds(edges)
    members: list[list[int]] = [[] for _ in bounds]
    for i, line in enumerate(src.lines):
        n = len(line.split())
        members[next(k for k, (_, hi) in enumerate(bounds) if hi is None or n <= hi)].append(i)
    return [LengthBucket(lo, hi, len(idx), tuple(
        float(bleu._aggregate_and_compute([st[i] for i in idx]).score) if idx else None
        for st in stats)) for (lo, hi), idx in zip(bounds, members, strict=True)]


def plot_format(path: Path) -> str:
    """The image format a plot path asks for, by its extension."""
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in PLOT_FORMATS:
        raise MtkitError(f"plot file {path}: expected a .png, .svg or .pdf name")
    return fmt


def plot_by_length(report: ScoreReport, path: Path) -> None:
    """Line plot of corpus BLEU per source-length bucket, one line per system (Bahdanau et al.
    2015, Fig. 2), written atomically as PNG, SVG or PDF by the file's extension."""
    if report.by_length is None:
        raise MtkitError("no BLEU by length to plot: score with a source file")
    fmt = plot_format(path)
    # A bare Figure: no pyplot, so no global backend state and no display needed
    from matplotlib.figure import Figure

    from mtkit.viz import save_figure

    fig = Figure(figsize=(7.0, 4.2), layout="constrained")
    ax = fig.add_subplot()
    x = list(range(len(report.by_length)))
    for j, name in enumerate(report.systems):
        y = [math.nan if b.bleu[j] is None else b.bleu[j] for b in report.by_length]
        ax.plot(x, y, marker="o", label=name)
    ax.set_xticks(x, [f"{b.label}\n({b.sentences})" for b in report.by_length])
    ax.set_xlabel("source sentence length in words (sentences in bucket)")
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
        table.add_row(b.label, str(b.sentences), *(_fmt(x, report.width) for x in b.bleu))
    console.print(table)
    console.print(f"BLEU signature: {report.length_signature}", soft_wrap=True, highlight=False)
