"""`mtkit translate` (files or stdin, with mtkit's decoder or an export's engine) and
`mtkit export`."""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mtkit.cli.documents import (
    InputFormatOpt,
    PlacementOpt,
    document_format,
    document_problems,
    translate_file,
)
from mtkit.cli.options import (
    NO_DECODING_FLAGS,
    DecodeFlags,
    HelpOpt,
    InferenceDeviceOpt,
    TranslateThreadsOpt,
    decoding_flags,
    flag,
    flag_of,
    model_files,
    output_problems,
    refuse,
)
from mtkit.errors import DataError, choice
from mtkit.process.startup import collector_paused

if TYPE_CHECKING:
    from mtkit.translation.lines import TranslateStats


@dataclass(frozen=True)
class TranslateFlags:
    """The flags of `mtkit translate` beside the decoding ones, as a request."""

    models: int
    greedy: bool
    sample: bool
    beam: int | None
    fmt: str
    align: bool
    align_method: str | None
    readout: str | None
    ensemble_mode: str | None
    terms: bool = False
    terms_method: str | None = None

    def problems(self) -> list[str]:
        """Flags that contradict each other or would be ignored, and bad choices."""
        from mtkit.translation.formats import FORMATS
        from mtkit.translation.lines import aligner_problems
        from mtkit.translation.terms import TERMS_METHODS

        checks = [
            (self.greedy and self.sample, "--greedy and --sample exclude each other"),
            (self.beam is not None and (self.greedy or self.sample), "--beam is for beam "
             f"search; it excludes {'--greedy' if self.greedy else '--sample'}"),
            (self.fmt not in FORMATS,
             f"--format: invalid choice {self.fmt!r}; expected {' or '.join(FORMATS)}"),
            (self.align_method is not None and not self.align, "--align-method needs --align"),
            (self.readout is not None and not self.align, "--readout needs --align"),
            (self.ensemble_mode is not None and self.models < 2,
             "--ensemble-mode: needs two or more models"),
            (self.terms_method is not None and not self.terms, "--terms-method needs --terms"),
            (self.terms_method not in (None, *TERMS_METHODS), f"--terms-method: invalid "
             f"choice {self.terms_method!r}; expected {' or '.join(TERMS_METHODS)}"),
        ]
        choices = aligner_problems(self.align_method, self.readout)
        if self.ensemble_mode is not None:  # the models' owner imports torch: only when named
            from mtkit.models.ensemble import Ensemble

            choices += Ensemble.mode_problems(self.ensemble_mode)
        return [message for bad, message in checks if bad] + [p.text(flag_of) for p in choices]


@decoding_flags(("search", "output", "sampling", "batching"), more={
    "nbest": "; text gives Moses n-best lines, 'ID ||| HYPOTHESIS ||| F0= SCORE ||| SCORE' "
    "(and ' ||| LINKS' with --align)",
    "seed": ": the same samples for the same input and --batch-tokens"})
def translate(
    models: Annotated[list[Path], typer.Argument(
        metavar="RUN_OR_CHECKPOINT", hidden=True, show_default=False)],
    input: Annotated[Path | None, typer.Option(
        "-i", "--input", metavar="FILE", help="Input file, - for standard input (default: "
        "standard input).")] = None,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", metavar="FILE", help="Output file, written whole or not at all; - "
        "for standard output (default: standard output).")] = None,
    decoding: DecodeFlags = NO_DECODING_FLAGS,
    device: InferenceDeviceOpt = "auto",
    threads: TranslateThreadsOpt = 0,
    precision: Annotated[str | None, typer.Option(
        "--precision", metavar="PRECISION", show_default=False,
        help="mtkit's own decoder: fp32; int8, on a CPU: the linear layers and the output "
        "projection with 8-bit weights (about twice as fast, BLEU within a few tenths: README "
        "'Speed and quality'); bf16 (autocast); or auto: bf16 on a GPU that has it, else fp32 "
        "(default: fp32; an export: its own type).")] = None,
    shortlist: Annotated[bool, flag(
        "--shortlist", help="Score only the target pieces the run's vocabulary shortlist "
        "names for each batch's sources (counted from its training data on first use and "
        "saved as RUN/shortlist.npz): faster for a large vocabulary; the output may change "
        "(README 'Speed and quality').")] = False,
    fmt: Annotated[str, typer.Option(
        "--format", metavar="FORMAT", show_default=False, help="text, or jsonl: one object per "
        "line with id, source, hypothesis, score (log-probability over the length penalty), "
        "tokens, and nbest with --nbest N, alignment with --align (default: text).")]
    = "text",
    align: Annotated[bool, flag(
        "--align", help="Add Pharaoh word alignments (text: 'hyp ||| links').")] = False,
    align_method: Annotated[str | None, typer.Option(
        "--align-method", metavar="METHOD", help="Link extraction: argmax-tgt, argmax-src, "
        "intersection, union or grow-diag-final (default: argmax-tgt).")] = None,
    readout: Annotated[str | None, typer.Option(
        "--readout", metavar="READOUT", help="Which step's attention aligns target word y_t: "
        "current, the step that predicts y_t; or shift, the step that reads y_t as its input "
        "(Chen et al. 2020); both come from the search itself, no second pass. See `mtkit "
        "align --help` for which suits which model (default: current; for a run trained with "
        "guided alignment, the read-out it supervised).")] = None,
    ensemble_mode: Annotated[str | None, typer.Option(
        "--ensemble-mode", metavar="MODE", help="With several models: logprob, the average of "
        "the log-probabilities, renormalised; or prob, the average of the probabilities "
        "(default: logprob).")] = None,
    prefix: Annotated[Path | None, typer.Option(
        "--prefix", metavar="FILE", help="Target prefixes, one per input line (an empty line "
        "for none): each translation starts with its line's prefix, which is forced and "
        "scored like the rest, and the model continues it (default: none).")] = None,
    terms: Annotated[Path | None, typer.Option(
        "--terms", metavar="FILE", help="Glossary: lines of source term TAB target term "
        "(whole words, matched without case or surrounding punctuation; # starts a comment). "
        "Every translation of a line holding a source term uses its target term; lines "
        "without one decode as without --terms (default: none).")] = None,
    tag: Annotated[str | None, typer.Option(
        "--tag", metavar="TAG", help="For a model trained with language tags (data.*.tag): "
        "the direction, as the tag put before each source line, e.g. '<2de>' (default: the "
        "recipe's data.tag).")] = None,
    terms_method: Annotated[str | None, typer.Option(
        "--terms-method", metavar="METHOD", help="How a missing term is placed where the "
        "model's attention aligns its source: prefix, the translation up to there and the "
        "term are forced and the rest translated again; or align, the aligned words are "
        "replaced (one search, no rewording) (default: prefix).")] = None,
    input_format: InputFormatOpt = None,
    placement: PlacementOpt = None,
    _help: HelpOpt = False,
) -> None:
    """Translate lines of a file or of stdin, one output line per input line; or a document
    (HTML, Markdown, SRT, WebVTT, PO, XLIFF, docx, paragraphs) into the same format.

    RUN_OR_CHECKPOINT is a run directory (its best.pt, else last.pt) or a checkpoint file; several
    make an ensemble. A directory written by mtkit export is decoded with CTranslate2.

    Example: mtkit translate runs/en-de-multi30k -i test.en -o hyp.de --beam 5

    Streams: cat big.en | mtkit translate runs/en-de-multi30k --greedy | head

    Documents: mtkit translate runs/en-de-multi30k -i page.html -o page.de.html
    """
    from mtkit.fileio import is_terminal
    from mtkit.translation import lines as tr
    from mtkit.translation.formats import OutputFormat

    input, output = (None if str(p) == "-" else p for p in (input, output))
    refuse(TranslateFlags(
        models=len(models), greedy="greedy" in decoding.switches,
        sample="sample" in decoding.switches, beam=decoding.get("beam_size"), fmt=fmt, align=align,
        align_method=align_method, readout=readout, ensemble_mode=ensemble_mode,
        terms=terms is not None, terms_method=terms_method).problems())
    _check_files(models, input, output, prefix, terms)
    document = document_format(input, input_format)
    refuse(document_problems(fmt=fmt, align=align, prefix=prefix,
                             nbest=decoding.get("nbest"), placement=placement,
                             is_document=document is not None))
    from mtkit.api.model import open_model

    # translate each line as it is typed
    interactive = sys.stdin.isatty() if input is None else is_terminal(input)
    with collector_paused():
        loaded = open_model(list(models), device=device, threads=threads,
                            ensemble_mode=ensemble_mode or "logprob", decode=decoding.given(),
                            precision=precision, shortlist=shortlist,
                            origins=decoding.FLAGS, streaming=interactive,
                            chunk_lines=1 if interactive else tr.CHUNK_LINES)
    refuse(_model_problems(loaded, decoding, fmt=fmt, align=align))
    cfg = loaded.defaults
    found = None if terms is None else _glossary(loaded, terms, terms_method or "prefix")
    if document is not None:
        translate_file(loaded, input, output, document, placement=placement, tag=tag,
                       terms=found)
        return
    align_fn = loaded.aligner(align_method, readout) if align else None
    worker = loaded.translator(cfg, align_fn=align_fn, terms=found, tag=tag,
                               fmt=choice("fmt", fmt, OutputFormat))
    for note in worker.notes:
        typer.echo(f"mtkit: note: {note}", err=True)
    report_translation(_run_translation(worker, input, output, prefix))


def _model_problems(loaded: Any, decoding: DecodeFlags, *, fmt: str, align: bool) -> list[str]:
    """What the loaded model, with the decoding it resolved, cannot honour of the flags."""
    cfg = loaded.defaults
    problems = decoding.ignored(cfg, unseen_score="text output does not show; add --format "
                                "jsonl, or leave it out" if fmt == "text" and cfg.nbest == 1
                                else None)
    if align and not loaded.info.has_attention:
        problems.append("--align: this model has no attention (model.rnn.attention: none), "
                        "so it gives no alignment")
    return problems


def export(
    source: Annotated[Path, typer.Argument(
        metavar="RUN_OR_CHECKPOINT", hidden=True, show_default=False)],
    output: Annotated[Path, typer.Option(
        "-o", "--output", metavar="DIR", show_default=False,
        help="Directory to write: new, empty, or a previous export.")],
    engine: Annotated[str, typer.Option(
        "--engine", metavar="ENGINE", show_default=False,
        help="The inference engine the export is for: ctranslate2, or hf (a Hugging Face "
        "transformers folder) (default: ctranslate2).")] = "ctranslate2",
    quantize: Annotated[str, typer.Option(
        "--quantize", metavar="TYPE", show_default=False, help="Weights: float32 (exact), "
        "int8, int8_float32, int16, float16 or bfloat16 (default: float32).")] = "float32",
    _help: HelpOpt = False,
) -> None:
    """Export a trained Transformer for CTranslate2 (mtkit translate DIR decodes it) or, with
    --engine hf, as a Hugging Face folder that transformers' from_pretrained loads.

    CTranslate2: the folder holds the sentencepiece model(s) and a README (pip install
    mtkit[ctranslate2]). hf: safetensors weights, config, tokenizer and a model card.

    RUN_OR_CHECKPOINT is a run directory (its best.pt, else last.pt) or a checkpoint file.

    Example: mtkit export runs/en-de-multi30k -o exports/en-de --quantize int8
    """
    from mtkit.export.ct2_export import check_request, export_ctranslate2
    from mtkit.export.hf_export import export_hf

    check_request(engine, quantize)
    if engine == "hf":
        report = export_hf(source, output)
    else:
        report = export_ctranslate2(source, output, quantization=quantize)
    if report.note:
        typer.echo(f"mtkit: note: {report.note}", err=True)
    what = "Hugging Face" if engine == "hf" else "CTranslate2"
    typer.echo(f"mtkit: exported {report.checkpoint} to {report.out} ({what}, "
               f"{report.quantization})", err=True)


def _check_files(models: list[Path], input: Path | None, output: Path | None,
                 prefix: Path | None, terms: Path | None) -> None:
    """The input files are there, standard input is open, and the output replaces no input
    nor the model's files (None: standard input or output)."""
    from mtkit.api.model import exported_model
    from mtkit.fileio import missing_input, stdin_raw

    if input is not None and (problem := missing_input(input, "input")):
        raise DataError(f"-i {problem}")
    if prefix is not None and (problem := missing_input(prefix, "prefix")):
        raise DataError(f"--prefix {problem}")
    if terms is not None and (problem := missing_input(terms, "terms")):
        raise DataError(f"--terms {problem}")
    exported = exported_model(list(models))
    if input is None:
        stdin_raw()  # closed: said now, before loading
    # The file on standard input (`< f`), too: `-o f` replaced it before it was read.
    source = {"the input file": input} if input else {"standard input,": Path("/dev/stdin")}
    if prefix is not None:
        source["the prefix file"] = prefix
    refuse(output_problems({"-o": output}, {**source, **model_files(models, exported)}))


def _glossary(loaded: Any, path: Path, method: str) -> Any:
    """The --terms file as the model's glossary; a problem named by the flag and file."""
    from mtkit.fileio import InvalidUtf8, read_lines
    from mtkit.translation.terms import parse_tsv

    name = f"--terms {path}"
    report = InvalidUtf8(str(path))
    lines = read_lines(path, report)
    # refused, not warned of: a term with U+FFFD in it would be forced into the translations
    for count, first, what in ((report.lines, report.first, "invalid UTF-8"),
                               (report.nul_lines, report.nul_first, "a NUL byte")):
        if count:
            more = f" ({count} lines in all)" if count > 1 else ""
            raise DataError(f"{name}: line {first}: {what}{more}; a glossary is UTF-8 text")
    return loaded.glossary(parse_tsv(lines, name), method, name=name)


def _run_translation(worker: Any, input: Path | None, output: Path | None,
                     prefix: Path | None = None) -> Any:
    """Run `worker` from `input` (else stdin) to `output` (else stdout), each line with its
    line of `prefix` if given, with a progress bar on stderr when it is a terminal that
    translations are not printed to."""
    from contextlib import ExitStack

    from mtkit import fileio as fio
    from mtkit.process.startup import drop_stdout
    from mtkit.translation.lines import PrefixError

    invalid = fio.InvalidUtf8("<stdin>" if input is None else str(input))
    invalid_prefix = fio.InvalidUtf8(str(prefix))
    if output is None and sys.stdout is None:  # `>&-`
        raise fio.WriteError("standard output is closed; give -o FILE or redirect it")
    with ExitStack() as stack:
        if output is None:
            sys.stdout.reconfigure(encoding="utf-8")
        raw = stack.enter_context(fio.open_binary(input)) if input else fio.stdin_binary()
        prefixes = None if prefix is None else fio.decode_lines(
            stack.enter_context(fio.open_binary(prefix)), invalid_prefix, refuse_binary=True)
        out = stack.enter_context(fio.atomic_write(output)) if output else sys.stdout
        try:
            stats = worker.run(fio.decode_lines(raw, invalid, refuse_binary=True), out,
                               on_batch=_progress(stack, input, output), prefixes=prefixes)
        except fio.NotText as e:
            from mtkit.documents.formats import DOCUMENT_FORMATS

            formats = ", ".join(f for f in DOCUMENT_FORMATS if f != "lines")
            raise DataError(f"{e}; mtkit translates UTF-8 text, and documents chosen by their "
                            f"extension or --input-format ({formats})") from None
        except PrefixError as e:
            raise DataError(f"--prefix {prefix}: {e.reason}") from None
        except OSError as e:  # a full disk under `> file` (no other error means a write)
            if output is not None or e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                raise
            drop_stdout()  # what is still buffered cannot go either
            raise fio.write_error("standard output", e) from None
    for report in (invalid, invalid_prefix):
        if report.found:
            typer.echo(f"mtkit: warning: {report.warning()}", err=True)
    return stats


def _progress(stack: Any, input: Path | None, output: Path | None
              ) -> Callable[[int], None] | None:
    """A progress bar's advance when stderr is a terminal that neither the translations nor
    the typed input share (None otherwise)."""
    from mtkit.fileio import count_lines, is_terminal, names_stdout

    to_stdout = output is None or names_stdout(output)
    typed = sys.stdin.isatty() if input is None else is_terminal(input)
    shared = to_stdout and sys.stdout is not None and sys.stdout.isatty() or typed
    # rich (0.1 s to import) only for the bar: not when stderr goes to a file or a pipe
    if sys.stderr.isatty() and not shared:
        return _progress_bar(stack, count_lines(input or "/dev/stdin"))
    return None


def _progress_bar(stack: Any, total: int | None) -> Any:
    """A transient progress display on stderr, closed with `stack`; returns its advance. With
    the input's line count (`total`: a file), a bar with sentences/s and the ETA; without (a
    pipe), a sentence counter."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    counter = [SpinnerColumn(), TextColumn("translating"),
               TextColumn("{task.completed} sentences"), TimeElapsedColumn()]
    bar_columns = [TextColumn("translating"), BarColumn(),
                   TextColumn("{task.completed:,}/{task.total:,} sentences"),
                   TextColumn("{task.fields[rate]} sentences/s"), TextColumn("ETA"),
                   TimeRemainingColumn()]
    bar = stack.enter_context(Progress(*(counter if total is None else bar_columns),
                                       console=Console(stderr=True), transient=True))
    task = bar.add_task("translate", total=total, rate="-")

    def advance(n: int) -> None:
        bar.advance(task, n)
        done = bar.tasks[0]
        bar.update(task, rate=f"{done.completed / max(done.elapsed or 0.0, 1e-9):,.1f}")

    return advance


def report_translation(stats: TranslateStats) -> None:
    """The truncation warning (once, with the count) and the stats line, on stderr."""
    if stats.truncated:
        typer.echo(f"mtkit: warning: {stats.truncation()}", err=True)
    if stats.capped:
        typer.echo(f"mtkit: warning: {stats.capping(flag_of)}", err=True)
    typer.echo(f"mtkit: {stats.summary()}", err=True)
