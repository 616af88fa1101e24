"""The `mtkit` command line: parse arguments, call one library function, and turn user errors
into one line on stderr with exit code 2. No ML logic lives here."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from mtkit import __version__
from mtkit.errors import MtkitError

# How the help reads. Markdown: a source line break inside a paragraph is a space, in the
# command list too (typer's "rich" mode keeps it there, and breaks sentences). Every command
# declares `-h/--help` itself (HelpOpt), because typer's own shows `<bool>` beside it.
app = typer.Typer(
    name="mtkit",
    help="Neural machine translation: prep data, train RNN or Transformer models, translate, "
    "score and look at attention.",
    no_args_is_help=True,
    add_completion=False,
    add_help_option=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)

_DEBUG = {"on": False}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mtkit {__version__}")
        raise typer.Exit()


def _show_help(ctx: typer.Context, value: bool) -> None:
    if value:
        typer.echo(ctx.get_help(), color=ctx.color)
        raise typer.Exit()


def _flag(*decls: str, help: str, **kwargs: Any) -> Any:
    """A switch (a bool option). typer 0.29 shows a type (`<bool>`) beside an option unless it
    has a metavar, as if the switch took a value; an empty metavar shows nothing."""
    return typer.Option(*decls, metavar="", help=help, **kwargs)


def _at_least(low: int) -> Callable[[Any], int]:
    """A parser of whole numbers >= `low`, used instead of typer's `min=`, which would show
    `[x>=N]` beside the metavar."""

    def parse(value: Any) -> int:
        try:
            number = int(value)
        except ValueError:
            number = None
        if number is None or number < low:
            raise typer.BadParameter(f"expected a whole number >= {low}, got {value!r}")
        return number

    return parse


HelpOpt = Annotated[bool, _flag("-h", "--help", help="Show this message and exit.",
                                callback=_show_help, is_eager=True, expose_value=False)]


@app.callback()
def _root(
    debug: Annotated[bool, _flag("--debug", help="Show full tracebacks on errors.")] = False,
    version: Annotated[bool, _flag("--version", callback=_version, is_eager=True,
                                   help="Print the version and exit.")] = False,
    _help: HelpOpt = False,
) -> None:
    _DEBUG["on"] = debug or os.environ.get("MTKIT_DEBUG") == "1"


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Map MtkitError (and a few OS errors a user causes) to one stderr line and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MtkitError as e:
            if _DEBUG["on"]:
                raise
            typer.echo(f"mtkit: error: {e}", err=True)
            raise typer.Exit(2) from None
        except BrokenPipeError:
            # `mtkit translate ... | head` closes our stdout early: not an error.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise typer.Exit(0) from None
        except OSError as e:
            # A file the user named that the system refuses (permissions, a folder in the
            # way); writes are reported by fileio.WriteError, this is the last resort.
            if _DEBUG["on"] or e.filename is None:
                raise
            typer.echo(f"mtkit: error: {e.filename}: {e.strerror or e}", err=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            typer.echo("mtkit: interrupted", err=True)
            raise typer.Exit(130) from None

    return wrapper


# Positional arguments are described in their command's help text: typer 0.29 shows a type
# (`<path>`, `<list[Path]>`) beside every argument it lists, metavar or not, so none is listed.
RecipeArg = Annotated[Path, typer.Argument(metavar="RECIPE", hidden=True, show_default=False)]
SetOpt = Annotated[list[str] | None, typer.Option(
    "--set", metavar="KEY=VALUE", help="Override a recipe field, e.g. --set train.lr=3e-4; "
    "repeatable.")]
RunDirOpt = Annotated[Path | None, typer.Option(
    "--run-dir", metavar="DIR", help="Run directory (default: runs/NAME/ in the current "
    "folder, NAME being the recipe's name).")]
MirrorOpt = Annotated[Path | None, typer.Option(
    "--mirror", metavar="DIR", help="Take data files by file name from this folder instead "
    "of the network (default: $MTKIT_DATA_MIRROR).")]
# translate's and align's device and threads (score --run has its own: only with --run)
InferenceDeviceOpt = Annotated[str, typer.Option(
    "--device", metavar="DEVICE", show_default=False,
    help="auto, cpu, cuda, cuda:N or mps (default: auto).")]
InferenceThreadsOpt = Annotated[int, typer.Option(
    "--threads", metavar="N", parser=_at_least(0), show_default=False,
    help="CPU threads, 0 for torch's default (default: 0).")]


def run_dir_for(recipe_name: str, run_dir: Path | None) -> Path:
    return run_dir if run_dir is not None else Path("runs") / recipe_name


# Commands are added below, each once it works.


class _DownloadBars:
    """A rich progress bar per downloaded file, on stderr; started by the first download."""

    def __init__(self, console: Any) -> None:
        from rich.progress import DownloadColumn, Progress, TransferSpeedColumn

        self._bar = Progress(*Progress.get_default_columns(), DownloadColumn(),
                             TransferSpeedColumn(), console=console)
        self._console = console
        self._tasks: dict[str, Any] = {}
        self._verified: dict[str, int] = {}

    def __call__(self, name: str, done: int, total: int | None) -> None:
        if not self._tasks:
            self._bar.start()
        if name not in self._tasks:
            self._tasks[name] = self._bar.add_task(f"download {name}", total=total)
        self._bar.update(self._tasks[name], completed=done, total=total)

    def verified(self, name: str, size: int) -> None:
        self._verified[name] = size

    def close(self) -> None:
        if self._tasks:
            self._bar.stop()
            if not self._console.is_terminal:  # no bar was drawn: say what was fetched
                for name, size in self._verified.items():
                    self._console.print(f"downloaded {name} ({size} bytes)")


@app.command(add_help_option=False)
@user_errors
def prep(
    recipe: RecipeArg,
    overrides: SetOpt = None,
    run_dir: RunDirOpt = None,
    mirror: MirrorOpt = None,
    force: Annotated[bool, _flag("--force", help="Prepare again even if up to date.")] = False,
    _help: HelpOpt = False,
) -> None:
    """Prepare a recipe's data: fetch, clean, train sentencepiece, binarize, report batching.

    RECIPE is a recipe YAML file, e.g. recipes/en-de.yaml. Writes data/ and recipe.yaml into
    the run directory (--run-dir); does nothing when they are up to date.

    Example: MTKIT_DATA_MIRROR=../shared/data/multi30k mtkit prep recipes/en-de.yaml
    """
    from rich.console import Console

    from mtkit.config import load_recipe
    from mtkit.data.prep import prepare

    rec = load_recipe(recipe, overrides or [])
    console = Console(stderr=True)
    bars = _DownloadBars(console)
    try:
        prepare(rec, run_dir_for(rec.name, run_dir), mirror=mirror, console=console,
                on_download=bars, force=force)
    finally:
        bars.close()


@app.command(add_help_option=False)
@user_errors
def train(
    recipe: RecipeArg,
    overrides: SetOpt = None,
    run_dir: RunDirOpt = None,
    mirror: MirrorOpt = None,
    resume: Annotated[bool, _flag(
        "--resume", help="Continue the run in the run directory from its last.pt (same "
        "recipe).")] = False,
    device: Annotated[str | None, typer.Option(
        "--device", metavar="DEVICE", help="auto (CUDA, then MPS, then CPU), cpu, cuda, "
        "cuda:N or mps; sets train.device (default: the recipe's).")] = None,
    threads: Annotated[int | None, typer.Option(
        "--threads", metavar="N", parser=_at_least(0), help="CPU threads, 0 for torch's "
        "default; sets train.threads (default: the recipe's).")] = None,
    _help: HelpOpt = False,
) -> None:
    """Train a model: prepare the data if needed, then train, validate and checkpoint.

    RECIPE is a recipe YAML file, e.g. recipes/en-de.yaml. Writes into the run directory
    (--run-dir): recipe.yaml, data/, the checkpoints, metrics.jsonl and train.log.

    Example: mtkit train recipes/en-de.yaml --set train.max_time=10m

    On several GPUs: torchrun --nproc_per_node=4 -m mtkit train recipes/en-de.yaml
    """
    import shlex

    from rich.console import Console

    from mtkit.config import load_recipe
    from mtkit.train.session import train as run_training

    flags = {"--device": device, "--threads": threads}  # the recipe fields they set
    sets = list(overrides or []) + [f"train.{flag[2:]}={value}"
                                    for flag, value in flags.items() if value is not None]
    rec = load_recipe(recipe, sets)
    result = run_training(rec, run_dir_for(rec.name, run_dir), resume=resume, mirror=mirror,
                          console=Console(stderr=True))
    if result.reason == "interrupted":
        again = shlex.join(["mtkit", "train", str(recipe),
                            *(a for s in overrides or [] for a in ("--set", s)),
                            *(["--run-dir", str(run_dir)] if run_dir else []),
                            *(a for flag, value in flags.items() if value is not None
                              for a in (flag, str(value))), "--resume"])
        typer.echo(f"mtkit: training interrupted at update {result.update:,}; checkpoint saved "
                   f"to {result.checkpoint}. Resume with:\n  {again}", err=True)
        raise typer.Exit(130)


@app.command(add_help_option=False)
@user_errors
def average(
    inputs: Annotated[list[Path], typer.Argument(
        metavar="RUN_OR_CHECKPOINT", hidden=True, show_default=False)],
    last: Annotated[int | None, typer.Option(
        "--last", "-n", metavar="N", parser=_at_least(2), help="Average the newest N "
        "numbered checkpoints (checkpoint_UPDATE.pt) of the run directory, N >= 2 "
        "(default: every one kept).")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", metavar="FILE", help="Where to write the average (default: "
        "averaged.pt in the run directory, or beside the first file).")] = None,
    _help: HelpOpt = False,
) -> None:
    """Average the weights of several checkpoints (Vaswani et al. 2017) into one checkpoint.

    RUN_OR_CHECKPOINT is a run directory (its numbered checkpoints are averaged) or two or
    more checkpoint files. The average is a checkpoint that translate, score and align accept.

    Example: mtkit average runs/en-de-multi30k --last 3
    """
    from mtkit.run import AVERAGED
    from mtkit.train.checkpoint import save_average, select_for_average

    paths = select_for_average(inputs, last)
    out = output or (inputs[0] if inputs[0].is_dir() else inputs[0].parent) / AVERAGED
    if any(out.resolve() == p.resolve() for p in paths):
        raise MtkitError(f"--output {out} is one of the checkpoints being averaged")
    save_average(paths, out)
    typer.echo(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) "
               f"into {out}", err=True)


def _score_flag_problems(*, metrics: list[str], paired: bool, paired_ar: bool,
                         paired_bs_n: int | None, paired_ar_n: int | None, seed: int | None,
                         src: Path | None, by_length: bool, buckets: str | None,
                         chrf_plus: bool, chrf_word_order: int | None, tokenize: str | None,
                         lowercase: bool, ter_case_sensitive: bool, width: int | None,
                         json_out: bool) -> list[str]:
    """Flags that `mtkit score` would otherwise accept and ignore."""
    checks = [
        (width is not None and json_out, "--width sets the decimals of the tables; --json "
         "prints full precision"),
        (paired_bs_n is not None and not paired, "--paired-bs-n needs --paired-bs or --paired-ar"),
        (paired_ar_n is not None and not paired_ar, "--paired-ar-n needs --paired-ar"),
        (seed is not None and not paired, "--seed needs --paired-bs or --paired-ar"),
        (by_length and src is None, "--by-length and --plot need --src FILE"),
        (src is not None and not by_length, "--src is used only by --by-length or --plot"),
        (buckets is not None and not by_length, "--buckets needs --by-length or --plot"),
        (chrf_plus and chrf_word_order not in (None, 2),
         "--chrf-plus is --chrf-word-order 2; give one of them"),
        ((chrf_plus or chrf_word_order is not None) and "chrf" not in metrics,
         "--chrf-plus/--chrf-word-order need chrf in --metrics"),
        (ter_case_sensitive and "ter" not in metrics,
         "--ter-case-sensitive needs ter in --metrics"),
        (tokenize is not None and "bleu" not in metrics and not by_length,
         "--tokenize applies to BLEU; add bleu to --metrics or use --by-length"),
        (lowercase and not {"bleu", "chrf"} & set(metrics) and not by_length,
         "--lowercase applies to BLEU and chrF (TER: --ter-case-sensitive)"),
    ]
    return [message for bad, message in checks if bad]


@app.command(add_help_option=False)
@user_errors
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
    lowercase: Annotated[bool, _flag(
        "--lowercase", help="Lowercase before BLEU and chrF.")] = False,
    chrf_plus: Annotated[bool, _flag(
        "--chrf-plus", help="chrF++ (word bigrams too): --chrf-word-order 2.")] = False,
    chrf_word_order: Annotated[int | None, typer.Option(
        "--chrf-word-order", metavar="N", help="Word n-gram order of chrF (default: 0).")]
    = None,
    ter_case_sensitive: Annotated[bool, _flag(
        "--ter-case-sensitive", help="Case-sensitive TER (sacrebleu ignores case).")] = False,
    paired_bs: Annotated[bool, _flag(
        "--paired-bs", help="Paired bootstrap resampling test of each system against the "
        "first.")] = False,
    paired_ar: Annotated[bool, _flag(
        "--paired-ar", help="Paired approximate randomization test of each system against the "
        "first.")] = False,
    paired_bs_n: Annotated[int | None, typer.Option(
        "--paired-bs-n", metavar="N", parser=_at_least(1), help="Bootstrap resamples, also "
        "for the confidence intervals of --paired-ar (default: 1000).")] = None,
    paired_ar_n: Annotated[int | None, typer.Option(
        "--paired-ar-n", metavar="N", parser=_at_least(1), help="Approximate randomization "
        "trials (default: 10000).")] = None,
    seed: Annotated[int | None, typer.Option(
        "--seed", metavar="N", parser=_at_least(1), help="Seed of the paired tests (default: "
        "12345, sacrebleu's).")] = None,
    src: Annotated[Path | None, typer.Option(
        "--src", metavar="FILE", help="Source file, for --by-length.")] = None,
    by_length: Annotated[bool, _flag(
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
    json_out: Annotated[bool, _flag("--json", help="Print JSON instead of tables.")] = False,
    run: Annotated[Path | None, typer.Option(
        "--run", metavar="RUN_DIR", help="Score a run: translate the --split with its best "
        "checkpoint and score it against the split's reference; a translation made earlier "
        "by the same checkpoint, source and decoding is reused. HYP files given too are "
        "compared with it.")] = None,
    split: Annotated[str | None, typer.Option(
        "--split", metavar="NAME", help="With --run: a validation or test split of the run, "
        "e.g. test2016.")] = None,
    beam: Annotated[int | None, typer.Option(
        "--beam", "-b", metavar="N", help="With --run: beam size (default: the recipe's "
        "decode.beam_size).")] = None,
    greedy: Annotated[bool, _flag("--greedy", help="With --run: greedy search.")] = False,
    device: Annotated[str | None, typer.Option(
        "--device", metavar="DEVICE", help="With --run: auto, cpu, cuda, cuda:N or mps "
        "(default: auto).")] = None,
    threads: Annotated[int | None, typer.Option(
        "--threads", metavar="N", parser=_at_least(0), help="With --run: CPU threads, 0 for "
        "torch's default (default: 0).")] = None,
    _help: HelpOpt = False,
) -> None:
    """Score translations with sacreBLEU: BLEU, chrF and TER, significance, BLEU by length.

    HYP is a hypothesis file, one sentence per line (plain or .gz), or - for standard input;
    with several, the first is the baseline of the paired tests. Scores come with sacreBLEU's
    signatures.

    Example: mtkit score -r test.de base.de attn.de --paired-bs --src test.en --plot len.png

    A run's test split: mtkit score --run runs/en-de-multi30k --split test2016 --by-length
    """
    import json  # imported here, with sacrebleu and rich, so that `mtkit --help` stays fast

    from rich.console import Console

    from mtkit import score as sc

    names = list(sc.parse_metrics(metrics))
    by_length = by_length or plot is not None
    run_problems = _score_run_problems(run=run, split=split, refs=refs, hyps=hyps, beam=beam,
                                       greedy=greedy, device=device, threads=threads)
    if run_problems:
        raise MtkitError("; ".join(run_problems))
    hyps, refs = list(hyps or []), list(refs or [])
    if run is not None and split is not None:  # the split's texts; translated further down
        from mtkit.translate import split_texts

        run_src, run_ref = split_texts(run, split)
        refs, src = [run_ref], run_src if by_length and src is None else src
    problems = _score_flag_problems(
        metrics=names, paired=paired_bs or paired_ar, paired_ar=paired_ar, paired_bs_n=paired_bs_n,
        paired_ar_n=paired_ar_n, seed=seed, src=src, by_length=by_length, buckets=buckets,
        chrf_plus=chrf_plus, chrf_word_order=chrf_word_order, tokenize=tokenize,
        lowercase=lowercase, ter_case_sensitive=ter_case_sensitive, width=width,
        json_out=json_out)
    if problems:
        raise MtkitError("; ".join(problems))
    metric_opts = sc.MetricOptions(
        metrics=tuple(names), tokenize=tokenize, lowercase=lowercase,
        chrf_word_order=2 if chrf_plus else (chrf_word_order or 0),
        ter_case_sensitive=ter_case_sensitive, width=1 if width is None else width)
    significance = None
    if paired_bs or paired_ar:
        d = sc.SignificanceOptions()
        significance = sc.SignificanceOptions(
            tests=tuple(t for t, on in (("bs", paired_bs), ("ar", paired_ar)) if on),
            bs_samples=d.bs_samples if paired_bs_n is None else paired_bs_n,
            ar_trials=d.ar_trials if paired_ar_n is None else paired_ar_n,
            seed=d.seed if seed is None else seed)
    if plot is not None:
        sc.plot_format(plot)  # a bad extension fails before any scoring
    edges = sc.parse_buckets(buckets) if buckets is not None else sc.DEFAULT_BUCKETS
    if run is not None and split is not None:
        hyps = [_translate_run_split(run, split, beam=beam, greedy=greedy, device=device,
                                     threads=threads).path, *hyps]
    report = sc.score_files(refs, hyps, metrics=metric_opts, significance=significance,
                            src=src, buckets=edges)
    for warning in report.warnings:
        typer.echo(f"mtkit: warning: {warning}", err=True)
    if plot is not None:
        sc.plot_by_length(report, plot)
        typer.echo(f"mtkit: wrote {plot}", err=True)
    if json_out:
        typer.echo(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    else:
        report.render(Console())


def _score_run_problems(*, run: Path | None, split: str | None, refs: list[Path] | None,
                        hyps: list[Path] | None, beam: int | None, greedy: bool,
                        device: str | None, threads: int | None) -> list[str]:
    """`mtkit score` flags that belong to --run, or that --run makes wrong."""
    given = {"--split": split is not None, "--beam": beam is not None, "--greedy": greedy,
             "--device": device is not None, "--threads": threads is not None}
    run_only = [flag for flag, on in given.items() if on]
    checks = [
        (run is None and bool(run_only), f"{', '.join(run_only)}: only with --run RUN_DIR"),
        (run is not None and split is None, "--run needs --split NAME (e.g. test2016)"),
        (run is not None and bool(refs), "--ref: with --run the reference is the split's own "
         "(RUN_DIR/data/SPLIT.tgt.txt)"),
        (greedy and beam is not None, "--greedy and --beam exclude each other"),
        (run is None and not refs, "missing option --ref/-r FILE (or --run RUN_DIR --split NAME)"),
        (run is None and not hyps, "missing hypothesis file HYP (or --run RUN_DIR --split NAME)"),
    ]
    return [message for bad, message in checks if bad]


def _translate_run_split(run: Path, split: str, *, beam: int | None, greedy: bool,
                         device: str | None, threads: int | None) -> Any:
    """Translate (or reuse the translation of) a run's split for `score --run`."""
    import torch

    from mtkit import translate as tr
    from mtkit.device import inference_device

    if threads:
        torch.set_num_threads(threads)
    method = "greedy" if greedy else ("beam" if beam else None)
    done = tr.translate_split(
        run, split, device=inference_device(device or "auto"),
        decode=lambda base: _flag_decode_config(base, method=method, beam_size=beam))
    if done.stats is None:
        typer.echo(f"mtkit: reusing {done.path} (same {done.checkpoint}, source and decoding)",
                   err=True)
    else:
        typer.echo(f"mtkit: translated {split} with {done.checkpoint} into {done.path}",
                   err=True)
        _report_translation(done.stats)
    return done


def _decode_config(base: Any, source: str, **options: Any) -> Any:
    """The recipe's decode section with the command-line options that were given on top,
    validated like a recipe section."""
    from mtkit.config import DecodeConfig, recipe_to_dict, section_from_dict

    raw = recipe_to_dict(base)
    raw.update({k: v for k, v in options.items() if v is not None})
    return section_from_dict(DecodeConfig, raw, source=source, prefix="decode")


_FLAGS = {"beam_size": "--beam", "nbest": "--nbest", "length_penalty": "--length-penalty",
          "alpha": "--alpha", "max_len_a": "--max-len-a", "max_len_b": "--max-len-b",
          "min_len": "--min-len", "temperature": "--temperature", "top_k": "--top-k",
          "top_p": "--top-p", "seed": "--seed", "batch_tokens": "--batch-tokens"}


def _flag_decode_config(base: Any, **options: Any) -> Any:
    """`_decode_config` with problems named by the command-line flag that caused them.
    --greedy without --nbest means one hypothesis, whatever the recipe's decode.nbest."""
    from mtkit.errors import ConfigError

    if options.get("method") == "greedy" and options.get("nbest") is None:
        options["nbest"] = 1
    try:
        return _decode_config(base, "command line", **options)
    except ConfigError as e:
        msg = str(e)
        for key, flag in _FLAGS.items():
            if options.get(key) is not None:
                msg = msg.replace(f"command line: decode.{key}:", f"{flag} (decode.{key}):")
        raise ConfigError(msg) from None


def _translate_flag_problems(*, greedy: bool, sample: bool, beam: int | None, fmt: str,
                             align: bool, align_method: str | None) -> list[str]:
    """Flags of `mtkit translate` that contradict each other or would be ignored."""
    from mtkit.align import METHODS
    from mtkit.translate import FORMATS

    methods = [m for m in METHODS if m != "threshold"]
    checks = [
        (greedy and sample, "--greedy and --sample exclude each other"),
        (beam is not None and (greedy or sample),
         f"--beam is for beam search; it excludes {'--greedy' if greedy else '--sample'}"),
        (fmt not in FORMATS, f"--format: invalid choice {fmt!r}; expected text or jsonl"),
        (align_method is not None and not align, "--align-method needs --align"),
        (align_method not in (None, *methods), f"--align-method: invalid choice "
         f"{align_method!r}; expected one of {', '.join(methods)}"),
    ]
    return [message for bad, message in checks if bad]


def _decode_flag_problems(cfg: Any, *, sampling: dict[str, Any],
                          alpha: float | None) -> list[str]:
    """Options that the resolved decoding (recipe + flags) would ignore. (--nbest with greedy
    is refused by DecodeConfig's own validation.)"""
    given = [flag for flag, value in sampling.items() if value is not None]
    checks = [
        (bool(given) and cfg.method != "sample",
         f"{', '.join(given)}: sampling options need --sample (decode.method is {cfg.method})"),
        (alpha is not None and cfg.length_penalty != "gnmt",
         f"--alpha is the GNMT penalty's exponent; the length penalty is {cfg.length_penalty}"),
    ]
    return [message for bad, message in checks if bad]


@app.command(add_help_option=False)
@user_errors
def translate(
    models: Annotated[list[Path], typer.Argument(
        metavar="RUN_OR_CHECKPOINT", hidden=True, show_default=False)],
    input: Annotated[Path | None, typer.Option(
        "-i", "--input", metavar="FILE", help="Input file (default: standard input).")] = None,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", metavar="FILE", help="Output file, written whole or not at all "
        "(default: standard output).")] = None,
    beam: Annotated[int | None, typer.Option(
        "-b", "--beam", metavar="N", help="Beam size (default: the recipe's "
        "decode.beam_size).")] = None,
    nbest: Annotated[int | None, typer.Option(
        "--nbest", metavar="N", help="Hypotheses per sentence; text gives Moses n-best lines "
        "(default: the recipe's decode.nbest).")] = None,
    greedy: Annotated[bool, _flag("--greedy", help="Greedy search.")] = False,
    sample: Annotated[bool, _flag("--sample", help="Sample instead of searching.")] = False,
    length_penalty: Annotated[str | None, typer.Option(
        "--length-penalty", metavar="PENALTY", help="gnmt (Wu et al. 2016), average "
        "(÷ length) or none (default: the recipe's decode.length_penalty).")] = None,
    alpha: Annotated[float | None, typer.Option(
        "--alpha", metavar="A", help="Exponent of the gnmt length penalty (default: the "
        "recipe's decode.alpha).")] = None,
    max_len_a: Annotated[float | None, typer.Option(
        "--max-len-a", metavar="A", help="Output limit A·source length + B: A (default: the "
        "recipe's decode.max_len_a).")] = None,
    max_len_b: Annotated[int | None, typer.Option(
        "--max-len-b", metavar="B", help="Output limit A·source length + B: B (default: the "
        "recipe's decode.max_len_b).")] = None,
    min_len: Annotated[int | None, typer.Option(
        "--min-len", metavar="N", help="Tokens before the end of sentence (default: the "
        "recipe's decode.min_len).")] = None,
    temperature: Annotated[float | None, typer.Option(
        "--temperature", metavar="T", help="Sampling temperature (default: the recipe's "
        "decode.temperature).")] = None,
    top_k: Annotated[int | None, typer.Option(
        "--top-k", metavar="K", help="Sample from the K best tokens (default: the recipe's "
        "decode.top_k).")] = None,
    top_p: Annotated[float | None, typer.Option(
        "--top-p", metavar="P", help="Nucleus sampling mass (default: the recipe's "
        "decode.top_p).")] = None,
    seed: Annotated[int | None, typer.Option(
        "--seed", metavar="N", help="Sampling seed (default: the recipe's decode.seed).")]
    = None,
    batch_tokens: Annotated[int | None, typer.Option(
        "--batch-tokens", metavar="N", help="Padded source tokens per batch (default: the "
        "recipe's decode.batch_tokens).")] = None,
    device: InferenceDeviceOpt = "auto",
    threads: InferenceThreadsOpt = 0,
    fmt: Annotated[str, typer.Option(
        "--format", metavar="FORMAT", show_default=False, help="text, or jsonl: one object per "
        "line with source, hypothesis, score, tokens, nbest and alignment (default: text).")]
    = "text",
    align: Annotated[bool, _flag(
        "--align", help="Add Pharaoh word alignments (text: 'hyp ||| links').")] = False,
    align_method: Annotated[str | None, typer.Option(
        "--align-method", metavar="METHOD", help="Link extraction: argmax-tgt, argmax-src, "
        "intersection, union or grow-diag-final (default: argmax-tgt).")] = None,
    ensemble_mode: Annotated[str | None, typer.Option(
        "--ensemble-mode", metavar="MODE", help="With several models: logprob, the average of "
        "the log-probabilities, renormalised; or prob, the average of the probabilities "
        "(default: logprob).")] = None,
    _help: HelpOpt = False,
) -> None:
    """Translate lines of a file or of stdin, one output line per input line.

    RUN_OR_CHECKPOINT is a run directory (its best.pt is used) or a checkpoint file; several
    make an ensemble. A directory written by mtkit export is decoded with CTranslate2.

    Example: mtkit translate runs/en-de-multi30k -i test.en -o test.de --beam 5

    Streams: cat big.en | mtkit translate runs/en-de-multi30k --greedy | head
    """
    import torch

    from mtkit import translate as tr
    from mtkit.align import DEFAULT_METHOD
    from mtkit.device import inference_device
    from mtkit.errors import ConfigError, DataError

    problems = _translate_flag_problems(greedy=greedy, sample=sample, beam=beam, fmt=fmt,
                                        align=align, align_method=align_method)
    if ensemble_mode is not None and len(models) < 2:
        problems.append("--ensemble-mode: needs two or more models")
    if ensemble_mode not in (None, "logprob", "prob"):
        problems.append(f"--ensemble-mode: invalid choice {ensemble_mode!r}; expected logprob "
                        "or prob")
    if problems:
        raise ConfigError("; ".join(problems))
    if input is not None and not input.is_file():
        raise DataError(f"{input}: input file not found")
    if input is not None and output is not None and output.exists() and (
            os.path.samefile(input, output)):
        raise ConfigError(f"-o {output}: is the input file {input}; writing the translation "
                          "there would replace the source; give another output file")
    exported = _exported(models)
    if exported is not None:
        model, recipe = None, exported.recipe
    else:
        if threads > 0:
            torch.set_num_threads(threads)
        dev = inference_device(device)
        model, recipe, tok = tr.load_translator(list(models), dev,
                                                mode=ensemble_mode or "logprob")
    method = "greedy" if greedy else "sample" if sample else ("beam" if beam else None)
    sampling = {"--temperature": temperature, "--top-k": top_k, "--top-p": top_p, "--seed": seed}
    cfg = _flag_decode_config(recipe.decode, method=method, beam_size=beam, nbest=nbest,
                              length_penalty=length_penalty, alpha=alpha, max_len_a=max_len_a,
                              max_len_b=max_len_b, min_len=min_len, temperature=temperature,
                              top_k=top_k, top_p=top_p, seed=seed, batch_tokens=batch_tokens)
    problems = _decode_flag_problems(cfg, sampling=sampling, alpha=alpha)
    if align and model is not None and not model.has_attention:
        problems.append("--align: this model has no attention (model.rnn.attention: none), "
                        "so it gives no alignment")
    if problems:
        raise ConfigError("; ".join(problems))
    interactive = input is None and sys.stdin.isatty()  # translate each line as it is typed
    align_fn = tr.pharaoh_aligner(align_method or DEFAULT_METHOD) if align else None
    chunk_lines = 1 if interactive else tr.CHUNK_LINES
    if exported is not None:
        from mtkit.export.ct2_translate import CT2Translator

        worker = CT2Translator(exported, cfg, device=device, threads=threads,
                               fmt=fmt, align_fn=align_fn,  # type: ignore[arg-type]
                               chunk_lines=chunk_lines)
    else:
        worker = tr.StreamTranslator(
            model, tok, cfg, device=dev, max_src_len=recipe.data.max_len,
            fmt=fmt,  # type: ignore[arg-type]
            align_fn=align_fn, chunk_lines=chunk_lines)
    _report_translation(_run_translation(worker, input, output))


def _exported(models: list[Path]) -> Any:
    """The export among `models` (read back), or None; an export translates alone."""
    from mtkit.errors import ConfigError
    from mtkit.export.ct2_dir import is_export

    found = [m for m in models if is_export(m)]
    if found and len(models) > 1:
        raise ConfigError(f"{found[0]}: an exported model translates alone, not in an ensemble")
    if not found:
        return None
    from mtkit.export.ct2_translate import open_export

    return open_export(found[0])


@app.command(add_help_option=False)
@user_errors
def export(
    source: Annotated[Path, typer.Argument(
        metavar="RUN_OR_CHECKPOINT", hidden=True, show_default=False)],
    output: Annotated[Path, typer.Option(
        "-o", "--output", metavar="DIR", show_default=False,
        help="Directory to write: new, empty, or a previous export.")],
    fmt: Annotated[str, typer.Option(
        "--format", metavar="FORMAT", show_default=False,
        help="ctranslate2 (default: ctranslate2).")] = "ctranslate2",
    quantize: Annotated[str, typer.Option(
        "--quantize", metavar="TYPE", show_default=False, help="Weights: float32 (exact), "
        "int8, int8_float32, int16, float16 or bfloat16 (default: float32).")] = "float32",
    _help: HelpOpt = False,
) -> None:
    """Export a trained Transformer for CTranslate2, with its sentencepiece model(s) and a
    README; mtkit translate DIR then decodes with it (pip install mtkit[ctranslate2]).

    RUN_OR_CHECKPOINT is a run directory (its best.pt is used) or a checkpoint file.

    Example: mtkit export runs/en-de-multi30k -o exports/en-de --quantize int8
    """
    from mtkit.export.run import check_request, export_ctranslate2

    check_request(fmt, quantize)
    report = export_ctranslate2(source, output, quantization=quantize)
    if report.note:
        typer.echo(f"mtkit: note: {report.note}", err=True)
    typer.echo(f"mtkit: exported {report.checkpoint} to {report.out} (CTranslate2, "
               f"{report.quantization})", err=True)


def _run_translation(worker: Any, input: Path | None, output: Path | None) -> Any:
    """Run `worker` from `input` (else stdin) to `output` (else stdout), with a progress bar on
    stderr when it is a terminal that translations are not printed to."""
    from contextlib import ExitStack

    from rich.console import Console

    from mtkit.fileio import InvalidUtf8, atomic_write, decode_lines, open_binary

    err = Console(stderr=True)
    invalid = InvalidUtf8("<stdin>" if input is None else str(input))
    with ExitStack() as stack:
        if output is None:
            sys.stdout.reconfigure(encoding="utf-8")
        raw = stack.enter_context(open_binary(input)) if input else sys.stdin.buffer
        out = stack.enter_context(atomic_write(output)) if output else sys.stdout
        shared = sys.stdout.isatty() and output is None or sys.stdin.isatty() and input is None
        on_batch = _progress(stack, err) if err.is_terminal and not shared else None
        stats = worker.run(decode_lines(raw, invalid), out, on_batch=on_batch)
    if invalid.lines:
        typer.echo(f"mtkit: warning: {invalid.warning()}", err=True)
    return stats


def _progress(stack: Any, console: Any) -> Any:
    """A transient sentence counter on `console`, closed with `stack`; returns its advance."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    bar = stack.enter_context(Progress(
        SpinnerColumn(), TextColumn("translating"), TextColumn("{task.completed} sentences"),
        TimeElapsedColumn(), console=console, transient=True))
    task = bar.add_task("translate", total=None)
    return lambda n: bar.advance(task, n)


def _report_translation(stats: Any) -> None:
    """The truncation warning (once, with the count) and the stats line, on stderr."""
    if stats.truncated:
        typer.echo(f"mtkit: warning: {stats.truncation()}", err=True)
    typer.echo(f"mtkit: {stats.summary()}", err=True)


def _align_flag_problems(*, forced: bool, search: dict[str, Any], greedy: bool,
                         self_attention: str | None, fmt: str | None,
                         heatmap: Path | None, one_based: bool, gold: Path | None,
                         method: str | None, threshold: float | None, show: bool,
                         links: bool, stdout_links: bool) -> list[str]:
    """Flags that `mtkit align` would otherwise accept and ignore, and bad choices."""
    from mtkit.align import METHODS
    from mtkit.align.viz import FORMATS

    given = [name for name, value in search.items() if value not in (None, False)]
    checks = [
        (forced and bool(given), f"{', '.join(given)}: search options apply only without -t "
         "(with -t the given targets are aligned, nothing is searched)"),
        (greedy and search.get("--beam") is not None, "--greedy and --beam exclude each other"),
        (self_attention not in (None, "encoder", "decoder"),
         f"--self-attention: invalid choice {self_attention!r}; expected encoder or decoder"),
        (fmt is not None and heatmap is None, "--heatmap-format applies to --heatmap DIR"),
        (fmt not in (None, *FORMATS), f"--heatmap-format: invalid choice {fmt!r}; expected "
         f"one of {', '.join(FORMATS)}"),
        (method not in (None, *METHODS), f"--align-method: invalid choice {method!r}; "
         f"expected one of {', '.join(METHODS)}"),
        (one_based and gold is None, "--one-based applies to --gold FILE"),
        (gold is not None and not forced, "--gold needs -t: gold links refer to given target "
         "sentences, not to translations"),
        ((method is not None or threshold is not None) and not links,
         "--align-method and --threshold apply to links: add --pharaoh, --json or --gold"),
        (threshold is not None and method != "threshold",
         "--threshold needs --align-method threshold"),
        (show and stdout_links, "--print and --pharaoh - both write to stdout; give a file"),
    ]
    return [message for bad, message in checks if bad]


def _head(value: str | None) -> int | str | None:
    if value is None or value == "mean":
        return value
    if value.isdigit():
        return int(value)
    from mtkit.errors import ConfigError

    raise ConfigError(f"--head: expected a head number (0, 1, ...) or mean, got {value!r}")


@app.command(add_help_option=False)
@user_errors
def align(
    model: Annotated[Path, typer.Argument(
        metavar="RUN_OR_CHECKPOINT", hidden=True, show_default=False)],
    src: Annotated[Path, typer.Option(
        "-s", "--src", metavar="FILE", help="Source sentences, one per line.",
        show_default=False)],
    tgt: Annotated[Path | None, typer.Option(
        "-t", "--tgt", metavar="FILE", help="Target sentences, one per line, aligned by forced "
        "decoding; without -t the source is translated first and aligned with the "
        "translation.")] = None,
    show: Annotated[bool, _flag(
        "--print", help="Print each matrix as a shaded table (target rows, source columns).")]
    = False,
    heatmap: Annotated[Path | None, typer.Option(
        "--heatmap", metavar="DIR", help="Write one heatmap per pair into this folder "
        "(align-0000.png, ...).")] = None,
    fmt: Annotated[str | None, typer.Option(
        "--heatmap-format", metavar="FORMAT", help="Heatmap image format: png, svg or pdf "
        "(default: png).")] = None,
    pharaoh: Annotated[Path | None, typer.Option(
        "--pharaoh", metavar="FILE", help="Write Pharaoh links 'i-j' (0-based source i, "
        "target j), one line per pair, to this file (- for standard output).")] = None,
    json_out: Annotated[Path | None, typer.Option(
        "--json", metavar="FILE", help="Write matrices, tokens, links (and gold scores) as "
        "JSON.")] = None,
    level: Annotated[str, typer.Option(
        "--level", metavar="LEVEL", show_default=False, help="word (pieces merged, EOS "
        "dropped) or subword (pieces); applies to every output (default: word).")] = "word",
    method: Annotated[str | None, typer.Option(
        "--align-method", metavar="METHOD", help="Link extraction: argmax-tgt, argmax-src, "
        "intersection, union, grow-diag-final or threshold (default: argmax-tgt).")] = None,
    threshold: Annotated[float | None, typer.Option(
        "--threshold", metavar="W", help="Least attention weight of a link, for "
        "--align-method threshold (default: 0.5).")] = None,
    layer: Annotated[int | None, typer.Option(
        "--layer", metavar="N", help="Transformer layer, negative from the top (default: -1, "
        "the top layer: it aligned best on synthetic reversal and permutation tasks).")]
    = None,
    head: Annotated[str | None, typer.Option(
        "--head", metavar="HEAD", help="Transformer head number, or mean (default: mean).")]
    = None,
    self_attention: Annotated[str | None, typer.Option(
        "--self-attention", metavar="SIDE", help="encoder or decoder: show that "
        "self-attention instead of the cross-attention.")] = None,
    gold: Annotated[Path | None, typer.Option(
        "--gold", metavar="FILE", help="Gold links of the -t pairs (sure i-j, possible i?j "
        "or ipj), one line per pair: print AER, precision and recall.")] = None,
    one_based: Annotated[bool, _flag("--one-based", help="Gold links count from 1.")] = False,
    beam: Annotated[int | None, typer.Option(
        "-b", "--beam", metavar="N", help="Without -t: beam size (default: the recipe's "
        "decode.beam_size).")] = None,
    greedy: Annotated[bool, _flag("--greedy", help="Without -t: greedy search.")] = False,
    length_penalty: Annotated[str | None, typer.Option(
        "--length-penalty", metavar="PENALTY", help="Without -t: gnmt, average or none "
        "(default: the recipe's decode.length_penalty).")] = None,
    alpha: Annotated[float | None, typer.Option(
        "--alpha", metavar="A", help="Without -t: exponent of the gnmt length penalty "
        "(default: the recipe's decode.alpha).")] = None,
    max_len_a: Annotated[float | None, typer.Option(
        "--max-len-a", metavar="A", help="Without -t: output limit A·source length + B: A "
        "(default: the recipe's decode.max_len_a).")] = None,
    max_len_b: Annotated[int | None, typer.Option(
        "--max-len-b", metavar="B", help="Without -t: output limit A·source length + B: B "
        "(default: the recipe's decode.max_len_b).")] = None,
    min_len: Annotated[int | None, typer.Option(
        "--min-len", metavar="N", help="Without -t: tokens before the end of sentence "
        "(default: the recipe's decode.min_len).")] = None,
    batch_tokens: Annotated[int | None, typer.Option(
        "--batch-tokens", metavar="N", help="Padded tokens per batch (default: the recipe's "
        "decode.batch_tokens).")] = None,
    device: InferenceDeviceOpt = "auto",
    threads: InferenceThreadsOpt = 0,
    _help: HelpOpt = False,
) -> None:
    """Show and extract word alignments from a model's attention.

    RUN_OR_CHECKPOINT is a run directory (its best.pt is used) or a checkpoint file. Outputs:
    terminal tables, heatmaps, Pharaoh links, JSON, and AER against gold links.

    Example: mtkit align runs/en-de-multi30k -s test.en -t test.de --pharaoh test.align
    --gold gold.txt

    Without -t: mtkit align runs/en-de-multi30k -s test.en --beam 5 --print --heatmap maps/
    """
    import torch
    from rich.console import Console

    from mtkit.align import DEFAULT_METHOD
    from mtkit.align import run as ar
    from mtkit.device import inference_device
    from mtkit.run import load_model

    search = {"--beam": beam, "--greedy": greedy, "--length-penalty": length_penalty,
              "--alpha": alpha, "--max-len-a": max_len_a, "--max-len-b": max_len_b,
              "--min-len": min_len}
    problems = _align_flag_problems(
        forced=tgt is not None, search=search, greedy=greedy, self_attention=self_attention,
        fmt=fmt, heatmap=heatmap,
        one_based=one_based, gold=gold, method=method, threshold=threshold, show=show,
        links=pharaoh is not None or json_out is not None or gold is not None,
        stdout_links=str(pharaoh) == "-")
    if problems:
        raise MtkitError("; ".join(problems))
    outputs = ar.AlignOutputs(
        show=show, heatmap_dir=heatmap, heatmap_format=fmt or "png", pharaoh=pharaoh,
        json=json_out, gold=gold, one_based=one_based, level=level,  # type: ignore[arg-type]
        method=method or DEFAULT_METHOD, threshold=threshold)
    outputs.check()
    ar.check_inputs(src, tgt, gold)
    if threads > 0:
        torch.set_num_threads(threads)
    dev = inference_device(device)
    net, recipe, tok = load_model(model, dev)
    choice = net.choose_attention(self_attention or "cross", layer, _head(head))
    cfg = _decode_config(recipe.decode, "command line",
                         method="greedy" if greedy else ("beam" if beam else None),
                         beam_size=beam, nbest=1, length_penalty=length_penalty, alpha=alpha,
                         max_len_a=max_len_a, max_len_b=max_len_b, min_len=min_len,
                         batch_tokens=batch_tokens)
    report = ar.align_files(net, tok, src, tgt, attention=choice, outputs=outputs, decode=cfg,
                            device=dev, console=Console(highlight=False), stdout=sys.stdout)
    for invalid in report.invalid_utf8:
        typer.echo(f"mtkit: warning: {invalid.warning()}", err=True)
    if report.scores is not None:  # on stderr when stdout carries the links
        typer.echo(ar.format_scores(report.scores), err=str(pharaoh) == "-")
    typer.echo(f"mtkit: {report.summary()}", err=True)


def main() -> None:
    """The console script: like `app()`, but a usage error (unknown option, bad or missing
    argument) is one line on stderr, exit code 2, as every other user error."""
    try:  # typer >= 0.20 raises its vendored click's exceptions; older typer, click's own
        from typer._click.exceptions import ClickException, UsageError
    except ImportError:
        from click.exceptions import ClickException, UsageError

    try:
        rc = app(standalone_mode=False)
    except UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # bare `mtkit`: the help is already shown
            sys.exit(e.exit_code)
        where = e.ctx.command_path if e.ctx is not None else "mtkit"
        typer.echo(f"mtkit: error: {e.format_message()} (see `{where} --help`)", err=True)
        sys.exit(2)
    except ClickException as e:
        typer.echo(f"mtkit: error: {e.format_message()}", err=True)
        sys.exit(e.exit_code)
    except typer.Abort:
        sys.exit(130)
    sys.exit(rc if isinstance(rc, int) else 0)
