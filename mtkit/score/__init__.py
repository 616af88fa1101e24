"""Scoring translations the way MT papers report them: corpus BLEU, chrF/chrF++ and TER through
sacreBLEU's own metric classes, each with its reproducibility signature (Post 2018); paired
significance tests between systems through sacreBLEU's own paired bootstrap resampling (Koehn
2004) and approximate randomization (Riezler & Maxwell 2005); and corpus BLEU by source-sentence
length, the view of Bahdanau et al. (2015, Fig. 2) in which a fixed-vector encoder-decoder falls
off on long sentences while an attentional one holds.

Entry points: `score_files(refs, hyps, ...)` (paths; `-` is stdin) and `score_texts` (lines
already read) both return a `ScoreReport`, which renders as rich tables (`render`) or as JSON
(`to_dict`); `plot_by_length(report, path)` draws the length plot.

Modules: `metrics` (options, reading, scoring, tests, buckets), `report` (the result values,
tables, plot) and `sacrebleu_api` (the one adapter to sacreBLEU's private API).
"""

from mtkit.score.metrics import (
    DEFAULT_BUCKETS,
    METRICS,
    STDIN,
    TESTS,
    MetricOptions,
    SignificanceOptions,
    Text,
    bucket_bounds,
    check_line_counts,
    parse_buckets,
    parse_metrics,
    read_text,
    score_files,
    score_texts,
)
from mtkit.score.report import (
    PLOT_FORMATS,
    LengthBucket,
    MetricScore,
    PairedScore,
    PairedTestResult,
    ScoreReport,
    plot_by_length,
    plot_format,
)

__all__ = ["DEFAULT_BUCKETS", "METRICS", "PLOT_FORMATS", "STDIN", "TESTS", "LengthBucket",
           "MetricOptions", "MetricScore", "PairedScore", "PairedTestResult", "ScoreReport",
           "SignificanceOptions", "Text", "bucket_bounds", "check_line_counts", "parse_buckets",
           "parse_metrics", "plot_by_length", "plot_format", "read_text", "score_files",
           "score_texts"]
