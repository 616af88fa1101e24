"""Scoring with sacreBLEU's own metric classes: the options, reading the inputs, corpus
scores with signatures, paired significance tests and corpus BLEU by source length (see the
package's doc). Every call into sacreBLEU's private API goes through `sacrebleu_api`."""

from __future__ import annotations

import dataclasses
import gzip
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.metrics.base import Metric
from sacrebleu.significance import PairedTest

from mtkit.errors import DataError, MtkitError, OptionError, Problem
from mtkit.fileio import BOM, GZIP_MAGIC, InvalidUtf8, decode_lines, stdin_raw
from mtkit.score import sacrebleu_api
from mtkit.score.report import (
    LengthBucket,
    MetricScore,
    PairedScore,
    PairedTestResult,
    ScoreReport,
)

# The corpus metrics sacreBLEU computes for `mtkit score`, in the order shown, and whether a
# larger score is better; validation during training takes BLEU's and chrF's from here.
HIGHER_IS_BETTER = {"bleu": True, "chrf": True, "ter": False}
METRICS = tuple(HIGHER_IS_BETTER)
TESTS = ("bs", "ar")
DEFAULT_BUCKETS = (10, 20, 30, 40, 50)
STDIN = Path("-")
DEFAULT_TOKENIZER = BLEU.TOKENIZER_DEFAULT  # '13a'


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
        unknown = list(dict.fromkeys(m for m in self.metrics if m not in METRICS))
        given = repr(",".join(self.metrics))
        if "" in unknown:
            problems.append(Problem("metrics", "an empty name; expected names among "
                                    f"{', '.join(METRICS)}, separated by commas", given))
        elif unknown:
            problems.append(Problem("metrics", f"{', '.join(map(repr, unknown))} unknown; "
                                    f"expected names among {', '.join(METRICS)}", given))
        elif not self.metrics or len(set(self.metrics)) != len(self.metrics):
            problems.append(Problem("metrics", f"expected distinct names among "
                                    f"{', '.join(METRICS)}", given))
        if self.tokenize is not None and self.tokenize not in BLEU.TOKENIZERS:
            problems.append(Problem("tokenize", f"{self.tokenize!r} is not one of sacrebleu's: "
                                    f"{', '.join(BLEU.TOKENIZERS)}"))
        if self.chrf_word_order < 0:
            problems.append(Problem("chrf_word_order", "expected 0 or more (2 is chrF++)",
                                    self.chrf_word_order))
        if not 0 <= self.width <= 10:
            problems.append(Problem("width", "expected 0 to 10 decimals", self.width))
        if problems:
            raise OptionError(*problems)


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
    """`"bleu,chrf"` -> ("bleu", "chrf"); MetricOptions reports bad names, and an empty one
    (`bleu,,`) is one."""
    return tuple(m.strip().lower() for m in text.split(",")) if text.strip() else ()


def parse_buckets(text: str) -> tuple[int, ...]:
    """`"10,20,30"` -> (10, 20, 30): the upper edges (inclusive) of the length buckets."""
    try:
        edges = tuple(int(x) for x in text.split(","))
    except ValueError:
        edges = ()
    if not edges or edges[0] < 1 or any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
        raise MtkitError.about("buckets", "expected increasing positive integers separated by "
                               "commas, e.g. 10,20,30,40,50", value=repr(text))
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
    data = _read_bytes(path, name).removeprefix(BOM)  # split here: decode_lines sees no \n
    if not data:
        raise DataError(f"{name}: file is empty; expected one sentence per line")
    raw = data.split(b"\n")
    if raw[-1] == b"":
        raw.pop()  # the final newline ends the last line; it does not start an empty one
    invalid = InvalidUtf8(name)
    lines = tuple(line.rstrip() for line in decode_lines(raw, invalid))
    return Text(name, lines, invalid if invalid.found else None)


def _read_bytes(path: Path, name: str) -> bytes:
    try:
        raw = stdin_raw().read() if path == STDIN else path.read_bytes()
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


def check_line_counts(refs: Sequence[Text], hyps: Sequence[Text], src: Text | None) -> None:
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
    check_line_counts(refs, hyps, src)
    notices: list[str] = []
    scorers = {key: _make_metric(key, metrics, refs, notices) for key in metrics.metrics}
    # Per-sentence sufficient statistics, once per metric and system; the corpus score is their
    # aggregate, exactly as in sacrebleu's corpus_score.
    stats = {k: [sacrebleu_api.sentence_statistics(m, h.lines) for h in hyps]
             for k, m in scorers.items()}
    scores = [{k: _aggregate(m, stats[k][i]) for k, m in scorers.items()} for i in range(len(hyps))]
    name = {k: s.name for k, s in scores[0].items()}  # sacrebleu's names: BLEU, chrF2++, TER
    # signatures exist once references were cached; tables are keyed by sacrebleu's names
    signatures = {name[k]: m.get_signature().format() for k, m in scorers.items()}
    same = {name[k]: [st == stats[k][0] for st in stats[k]] for k in scorers}
    tests = [_paired_test(t, hyps, scorers, significance, same)
             for t in (significance.tests if significance else ())]
    warnings = tuple(t.invalid.warning() or "" for t in (*refs, *hyps, *([src] if src else []))
                     if t.invalid is not None) + tuple(dict.fromkeys(notices)) + tuple(
        w for h in hyps if "bleu" in scorers and (w := _tokenized(h)))
    report = ScoreReport(
        references=[r.name for r in refs], systems=[h.name for h in hyps],
        sentences=len(refs[0].lines), signatures=signatures, width=metrics.width,
        scores=[{name[k]: s for k, s in row.items()} for row in scores], significance=tests,
        warnings=warnings)
    if src is None:
        return report
    bleu = scorers.get("bleu") or _make_metric("bleu", metrics, refs, [])
    bleu_stats = stats.get("bleu") or [sacrebleu_api.sentence_statistics(bleu, h.lines)
                                       for h in hyps]
    return dataclasses.replace(report, by_length=_bleu_by_length(src, bleu, bleu_stats, buckets),
                               length_signature=bleu.get_signature().format())


# sacreBLEU's own check, said once per file in one line: it warns in three lines that name a
# Python parameter (`force`) and not the file, and only BLEU runs it (it is off below).
_TOKENIZED_LINES = 100


def _tokenized(hyp: Text) -> str | None:
    """A warning when `hyp` looks tokenized: 100 or more lines end in ' .'."""
    n = sum(line.endswith(" .") for line in hyp.lines)
    if n < _TOKENIZED_LINES:
        return None
    return (f"{hyp.name}: {n} of {len(hyp.lines)} lines end in a tokenized period (' .'); "
            "BLEU expects detokenized text, which would score differently")


def _make_metric(name: str, opts: MetricOptions, refs: Sequence[Text],
                 notices: list[str]) -> Metric:
    """A sacrebleu metric with the references cached once (as sacrebleu's CLI does); what
    sacrebleu logs while it is made (a tokenizer renamed) is added to `notices`."""
    ref_streams = [list(r.lines) for r in refs]
    try:
        with sacrebleu_api.logged_warnings() as logged:
            if name == "bleu":
                metric: Metric = BLEU(tokenize=opts.tokenize, lowercase=opts.lowercase,
                                      force=True, references=ref_streams)
            elif name == "chrf":
                metric = CHRF(word_order=opts.chrf_word_order, lowercase=opts.lowercase,
                              references=ref_streams)
            else:
                metric = TER(case_sensitive=opts.ter_case_sensitive, references=ref_streams)
        notices.extend(f"sacreBLEU: {m}" for m in logged)
        return metric
    except (ImportError, OSError, RuntimeError) as e:
        # the mecab tokenizers need extra packages (RuntimeError), the spm ones a download
        reason = " ".join(str(e).split())
        raise MtkitError(f"sacrebleu cannot set up {name} with tokenizer "
                         f"{opts.tokenize or DEFAULT_TOKENIZER!r}: {reason}") from None


def _aggregate(metric: Metric, stats: list[Any]) -> MetricScore:
    return MetricScore(*sacrebleu_api.corpus_score(metric, stats))


# --------------------------------------------------------------------------- significance


def _paired_test(test: str, hyps: Sequence[Text], scorers: dict[str, Metric],
                 opts: SignificanceOptions, same: dict[str, list[bool]]) -> PairedTestResult:
    """Run sacrebleu's PairedTest exactly as `sacrebleu --paired-bs/--paired-ar` does (one worker,
    references from the metrics' caches); with AR the CIs come from `bs_samples` resamples.
    `same[metric][i]`: system i has the baseline's per-sentence statistics."""
    n = opts.bs_samples if test == "bs" else opts.ar_trials
    named = [(h.name, list(h.lines)) for h in hyps]
    with sacrebleu_api.seeded(opts.seed):
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
    `corpus_score` on just those lines. Empty buckets are left out."""
    bounds = bucket_bounds(edges)
    members: list[list[int]] = [[] for _ in bounds]
    for i, line in enumerate(src.lines):
        n = len(line.split())
        members[next(k for k, (_, hi) in enumerate(bounds) if hi is None or n <= hi)].append(i)
    return [LengthBucket(lo, hi, len(idx), tuple(
        sacrebleu_api.corpus_score(bleu, [st[i] for i in idx])[1] for st in stats))
        for (lo, hi), idx in zip(bounds, members, strict=True) if idx]
