"""`mtkit score`: sacreBLEU metrics of hypothesis files, or of a run's translation of a split;
`mtkit tune-length`: the length penalty of a run chosen on its validation split."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mtkit.cli.options import (
    NO_DECODING_FLAGS,
    DecodeFlags,
    HelpOpt,
    at_least,
    decoding_flags,
    flag,
    output_problems,
    refuse,
)
from mtkit.cli.translate import report_translation

if TYPE_CHECKING:
    from mtkit.score import MetricOptions, ScoreReport, SignificanceOptions
    from mtkit.score.split_translation import SplitTranslation


@dataclass(frozen=True)
class ScoreRunFlags:
    """What `mtkit score` is asked to score: files (HYP, --ref) or a run's split (--run)."""

    run: Path | None
    split: str | None
    refs: tuple[Path, ...]
    hyps: tuple[Path, ...]
    src: Path | None
    beam: int | None
    greedy: bool
    device: str | None
    threads: int | None

    def problems(self) -> list[str]:
        """Flags that belong to --run, or that --run makes wrong."""
        given = {"--split": self.split is not None, "--beam": self.beam is not None,
                 "--greedy": self.greedy, "--device": self.device is not None,
                 "--threads": self.threads is not None}
        run_only = [name for name, on in given.items() if on]
        run = self.run
        checks = [
            (run is None and bool(run_only), f"{', '.join(run_only)}: only with --run RUN_DIR"),
            (run is not None and self.split is None, "--run needs --split NAME (e.g. test2016)"),
            (run is not None and bool(self.refs), "--ref: with --run the reference is the "
             "split's own (RUN_DIR/data/SPLIT.tgt.txt)"),
            (run is not None and self.src is not None, "--src: with --run the source is the "
             "split's own (RUN_DIR/data/SPLIT.src.txt)"),
            (self.greedy and self.beam is not None, "--greedy and --beam exclude each other"),
            (run is None and not self.refs,
             "missing option --ref/-r FILE (or --run RUN_DIR --split NAME)"),
            (run is None and not self.hyps,
             "missing hypothesis file HYP (or --run RUN_DIR --split NAME)"),
        ]
        return [message for bad, message in checks if bad]


@dataclass(frozen=True)
class ScoreFlags:
    """The metric, significance and report flags of `mtkit score`, as a request."""

    metrics: tuple[str, ...]
    paired_bs: bool
    paired_ar: bool
    paired_bs_n: int | None
    paired_ar_n: int | None
    seed: int | None
    src: Path | None
    by_length: bool
    buckets: str | None
    chrf_plus: bool
    chrf_word_order: int | None
    tokenize: str | None
    lowercase: bool
    ter_case_sensitive: bool
    width: int | None
    json_out: bool

    def problems(self) -> list[str]:
        """Flags that `mtkit score` would otherwise accept and ignore."""
        paired, metrics = self.paired_bs or self.paired_ar, self.metrics
        checks = [
            (self.width is not None and self.json_out, "--width sets the decimals of the "
             "tables; --json prints full precision"),
            (self.paired_bs_n is not None and not paired,
             "--paired-bs-n needs --paired-bs or --paired-ar"),
            (self.paired_ar_n is not None and not self.paired_ar,
             "--paired-ar-n needs --paired-ar"),
            (self.seed is not None and not paired, "--seed needs --paired-bs or --paired-ar"),
            (self.by_length and self.src is None, "--by-length and --plot need --src FILE"),
            (self.src is not None and not self.by_length,
             "--src is used only by --by-length or --plot"),
            (self.buckets is not None and not self.by_length,
             "--buckets needs --by-length or --plot"),
            (self.chrf_plus and self.chrf_word_order not in (None, 2),
             "--chrf-plus is --chrf-word-order 2; give one of them"),
            ((self.chrf_plus or self.chrf_word_order is not None) and "chrf" not in metrics,
             "--chrf-plus/--chrf-word-order need chrf in --metrics"),
            (self.ter_case_sensitive and "ter" not in metrics,
             "--ter-case-sensitive needs ter in --metrics"),
            (self.tokenize is not None and "bleu" not in metrics and not self.by_length,
             "--tokenize applies to BLEU; add bleu to --metrics or use --by-length"),
            (self.lowercase and not {"bleu", "chrf"} & set(metrics) and not self.by_length,
             "--lowercase applies to BLEU and chrF (TER: --ter-case-sensitive)"),
        ]
        return [message for bad, message in checks if bad]

    def metric_options(self) -> MetricOptions:
        """The metrics asked for, and how they are computed and printed."""
        from mtkit.score import MetricOptions

        return MetricOptions(
            metrics=self.metrics, tokenize=self.tokenize, lowercase=self.lowercase,
            chrf_word_order=2 if self.chrf_plus else (self.chrf_word_order or 0),
            ter_case_sensitive=self.ter_case_sensitive,
            width=1 if self.width is None else self.width)

    def significance(self) -> SignificanceOptions | None:
        """The paired tests asked for (None: none), sacrebleu's settings where not given."""
        from mtkit.score import SignificanceOptions

        if not (self.paired_bs or self.paired_ar):
            return None
        d = SignificanceOptions()
        return SignificanceOptions(
            tests=tuple(t for t, on in (("bs", self.paired_bs), ("ar", self.paired_ar)) if on),
            bs_samples=d.bs_samples if self.paired_bs_n is None else self.paired_bs_n,
            ar_trials=d.ar_trials if self.paired_ar_n is None else self.paired_ar_n,
            seed=d.seed if self.seed is None else self.seed)


@decoding_flags(("search",), only=("beam_size", "greedy"), scope="With --run: ")
def score(
    hyps: Annotated[list[Path] | None, typer.Argument(
        metavar="HYP", hidden=True, show_default=False)] = None,
    refs: Annotated[list[Path] | None, typer.Option(
        "--ref", "-r", metavar="FILE", help="Reference file; repeat for several references."
        )] = None,
    metrics: Annotated[str, typer.Option(
        "--metrics", "-m", metavar="LIST", show_default=False,
        help="Comma-separated, among bleu, chrf and ter (default: bleu,chrf,ter).")]
    = "bleu,chrf,ter",
    tokenize: Annotated[str | None, typer.Option(
        "--tokenize", metavar="NAME", help="BLEU tokenizer, one of sacrebleu's: 13a, intl, "
        "char, zh, none, ... (default: 13a).")] = None,
    lowercase: Annotated[bool, flag(
        "--lowercase", help="Lowercase before BLEU and chrF.")] = False,
    chrf_plus: Annotated[bool, flag(
        "--chrf-plus", help="chrF++ (word bigrams too): --chrf-word-order 2.")] = False,
    chrf_word_order: Annotated[int | None, typer.Option(
        "--chrf-word-order", metavar="N", help="Word n-gram order of chrF (default: 0).")]
    = None,
    ter_case_sensitive: Annotated[bool, flag(
        "--ter-case-sensitive", help="Case-sensitive TER (sacrebleu ignores case).")] = False,
    paired_bs: Annotated[bool, flag(
        "--paired-bs", help="Paired bootstrap resampling test of each system against the "
        "first.")] = False,
    paired_ar: Annotated[bool, flag(
        "--paired-ar", help="Paired approximate randomization test of each system against the "
        "first.")] = False,
    paired_bs_n: Annotated[int | None, typer.Option(
        "--paired-bs-n", metavar="N", parser=at_least(1), help="Bootstrap resamples, also "
        "for the confidence intervals of --paired-ar (default: 1000).")] = None,
    paired_ar_n: Annotated[int | None, typer.Option(
        "--paired-ar-n", metavar="N", parser=at_least(1), help="Approximate randomization "
        "trials (default: 10000).")] = None,
    seed: Annotated[int | None, typer.Option(
        "--seed", metavar="N", parser=at_least(1), help="Seed of the paired tests (default: "
        "12345, sacrebleu's).")] = None,
    src: Annotated[Path | None, typer.Option(
        "--src", metavar="FILE", help="Source file, for --by-length.")] = None,
    by_length: Annotated[bool, flag(
        "--by-length", help="Corpus BLEU per source-length bucket (whitespace tokens).")]
    = False,
    buckets: Annotated[str | None, typer.Option(
        "--buckets", metavar="EDGES", help="Inclusive upper bucket edges, comma-separated "
        "(default: 10,20,30,40,50).")] = None,
    plot: Annotated[Path | None, typer.Option(
        "--plot", metavar="FILE", help="Also plot BLEU by length to this .png, .svg or .pdf "
        "file (implies --by-length).")] = None,
    width: Annotated[int | None, typer.Option(
        "--width", "-w", metavar="N", help="Decimals printed in the tables (default: 1; --json "
        "prints full precision).")] = None,
    json_out: Annotated[bool, flag("--json", help="Print JSON instead of tables.")] = False,
    run: Annotated[Path | None, typer.Option(
        "--run", metavar="RUN_OR_CHECKPOINT", help="Score a run: translate the --split "
        "with the run's model (best.pt, or averaged.pt where train.average_last chose it) and "
        "decoding (tune-length's), or the checkpoint given (e.g. RUN_DIR/averaged.pt), and "
        "score it against the split's reference; a translation made earlier by the same "
        "checkpoint, source and decoding is reused. HYP files given too are compared with "
        "it.")] = None,
    split: Annotated[str | None, typer.Option(
        "--split", metavar="NAME", help="With --run: a validation or test split of the run, "
        "e.g. test2016.")] = None,
    decoding: DecodeFlags = NO_DECODING_FLAGS,
    device: Annotated[str | None, typer.Option(
        "--device", metavar="DEVICE", help="With --run: auto, cpu, cuda, cuda:N or mps "
        "(default: auto).")] = None,
    threads: Annotated[int | None, typer.Option(
        "--threads", metavar="N", parser=at_least(0), help="With --run: CPU threads, shared "
        "as by translate --threads (2: 2 batches of one thread at once), 0 for torch's count "
        "(default: 0).")] = None,
    _help: HelpOpt = False,
) -> None:
    """Score translations with sacreBLEU: BLEU, chrF and TER, significance, BLEU by length.

    HYP is a hypothesis file, one sentence per line (plain or .gz), or - for standard input;
    with several, the first is the baseline of the paired tests. Scores come with sacreBLEU's
    signatures.

    Example: mtkit score -r test.de base.de attn.de --paired-bs --src test.en --plot len.png

    A run's test split: mtkit score --run runs/en-de-multi30k --split test2016 --by-length
    """
    from mtkit import score as sc  # imported here, so that `mtkit --help` stays fast

    names = list(sc.parse_metrics(metrics))
    by_length = by_length or plot is not None
    refuse(ScoreRunFlags(run=run, split=split, refs=tuple(refs or ()), hyps=tuple(hyps or ()),
                         src=src, beam=decoding.get("beam_size"),
                         greedy="greedy" in decoding.switches, device=device,
                         threads=threads).problems())
    hyps, refs = list(hyps or []), list(refs or [])
    if run is not None and split is not None:  # the split's texts; translated further down
        from mtkit.score.split_translation import split_run, split_texts

        run_src, run_ref = split_texts(split_run(run)[0], split)
        refs, src = [run_ref], run_src if by_length else None
    request = ScoreFlags(
        metrics=tuple(names), paired_bs=paired_bs, paired_ar=paired_ar, paired_bs_n=paired_bs_n,
        paired_ar_n=paired_ar_n, seed=seed, src=src, by_length=by_length, buckets=buckets,
        chrf_plus=chrf_plus, chrf_word_order=chrf_word_order, tokenize=tokenize,
        lowercase=lowercase, ter_case_sensitive=ter_case_sensitive, width=width,
        json_out=json_out)
    refuse(request.problems())
    if plot is not None:
        sc.plot_format(plot)  # a bad extension fails before any scoring
        scored = {f"reference {i + 1}": p for i, p in enumerate(refs)} | {
            f"scored file {i + 1}": p for i, p in enumerate(hyps)}
        refuse(output_problems({"--plot": plot}, {"the --src file": src, **scored}))
    edges = sc.parse_buckets(buckets) if buckets is not None else sc.DEFAULT_BUCKETS
    if run is not None and split is not None:
        # the files given beside it are checked before the split is translated (minutes)
        given = [sc.read_text(p) for p in hyps if p != sc.STDIN]
        source = sc.read_text(src) if src is not None and src != sc.STDIN else None
        sc.check_line_counts([sc.read_text(refs[0])], given, source)
        hyps = [_translate_run_split(run, split, decoding, device=device,
                                     threads=threads).path, *hyps]
    report = sc.score_files(refs, hyps, metrics=request.metric_options(),
                            significance=request.significance(), src=src, buckets=edges)
    _say(report, plot, json_out=json_out)


def _say(report: ScoreReport, plot: Path | None, *, json_out: bool) -> None:
    """The report's warnings, its plot (to `plot`), and its tables or JSON."""
    import json  # imported here, with sacrebleu and rich, so that `mtkit --help` stays fast

    from rich.console import Console

    from mtkit import score as sc

    for warning in report.warnings:
        typer.echo(f"mtkit: warning: {warning}", err=True)
    if plot is not None:
        sc.plot_by_length(report, plot)
        typer.echo(f"mtkit: wrote {plot}", err=True)
    if json_out:
        typer.echo(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    else:
        report.render(Console())


def _translate_run_split(run: Path, split: str, decoding: DecodeFlags, *,
                         device: str | None, threads: int | None) -> SplitTranslation:
    """Translate (or reuse the translation of) a run's split for `score --run`."""
    from mtkit.api.splits import translate_split
    from mtkit.device import inference_device

    done = translate_split(run, split, device=inference_device(device or "auto"),
                           decode=decoding.given(), origins=DecodeFlags.FLAGS,
                           threads=threads or 0)
    if done.stats is None:
        typer.echo(f"mtkit: reusing {done.path} (same {done.checkpoint}, source and decoding)",
                   err=True)
    else:
        typer.echo(f"mtkit: translated {split} with {done.checkpoint} into {done.path}",
                   err=True)
        report_translation(done.stats)
    return done


def tune_length(
    run: Annotated[Path, typer.Argument(metavar="RUN", show_default=False,
                                        help="A trained run directory.")],
    split: Annotated[str, typer.Option(
        "--split", metavar="NAME", help="The split the length is chosen on: the validation "
        "split, or another of the run's that is not a test set you report.")] = "valid",
    alphas: Annotated[str, typer.Option(
        "--alphas", metavar="LIST", help="GNMT alphas swept, comma-separated, besides no "
        "penalty and the average per token.")] = "0.6,1.0,1.5,2.0",
    device: Annotated[str | None, typer.Option(
        "--device", metavar="DEVICE", help="auto, cpu, cuda, cuda:N or mps (default: auto).")]
    = None,
    threads: Annotated[int | None, typer.Option(
        "--threads", metavar="N", parser=at_least(0), help="CPU threads, shared as by "
        "translate --threads; 0 for torch's count (default: 0).")] = None,
    _help: HelpOpt = False,
) -> None:
    """Choose the run's length penalty on its validation split and make it the run's default.

    Decodes the split with the run's model and beam under no length penalty, the average per
    token and GNMT at each alpha, prints BLEU, chrF and the brevity penalty of each, and
    writes the best by BLEU into RUN/model.json (the run's current setting wins a tie), which
    translate, score --run, align and the Python API then use for the run's model. Training
    the run again forgets it.

    Example: mtkit tune-length runs/en-de-multi30k
    """
    from mtkit.api.splits import sweep
    from mtkit.device import inference_device

    try:
        values = [float(a) for a in alphas.split(",") if a.strip()]
    except ValueError:
        refuse([f"--alphas {alphas}: expected comma-separated numbers such as 0.6,1.0,1.5"])
    def starting(settings: list) -> None:
        typer.echo(f"mtkit: decoding {split} of {run} with {len(settings)} length penalties",
                   err=True)

    def said(p) -> None:
        typer.echo(f"  {p.setting.label():<16} BLEU {p.bleu:6.2f}  chrF {p.chrf:6.2f}  "
                   f"BP {p.brevity_penalty:.3f}  hyp/ref length {p.length_ratio:.3f}", err=True)

    res = sweep(run, split=split, alphas=values, device=inference_device(device or "auto"),
                threads=threads or 0, starting=starting, progress=said)
    c, was = res.chosen, res.current
    change = ("kept" if c.setting == was.setting else
              f"was {was.setting.label()}, BLEU {was.bleu:.2f}")
    typer.echo(f"mtkit: {res.checkpoint.name} decodes with length penalty {c.setting.label()} "
               f"(BLEU {c.bleu:.2f} on {split}; {change}); written to {res.choice_path}, "
               "which translate, score --run and align use", err=True)
