"""`mtkit align`: show a model's attention and extract word alignments from it."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, cast

import typer

from mtkit.cli.options import (
    NO_DECODING_FLAGS,
    DecodeFlags,
    HelpOpt,
    InferenceDeviceOpt,
    InferenceThreadsOpt,
    decoding_flags,
    flag,
    flag_of,
    message_of,
    model_files,
    output_problems,
    refuse,
)
from mtkit.errors import ConfigError, MtkitError, choice
from mtkit.process.startup import collector_paused


@dataclass(frozen=True)
class AlignFlags:
    """The flags of `mtkit align` beside the decoding ones, as a request."""

    forced: bool  # -t given: align the given targets, search nothing
    search: tuple[str, ...]  # the search flags given (--beam, --greedy, ...)
    greedy: bool
    beam: int | None
    self_attention: str | None
    heatmap_format: str | None
    heatmap: Path | None
    one_based: bool
    gold: Path | None
    method: str | None
    threshold: float | None
    show: bool
    width: int  # of the terminal --print writes to
    links: bool  # some output of links: --pharaoh, --json or --gold
    pharaoh: bool  # --pharaoh FILE or -
    stdout_links: bool  # --pharaoh -
    stdout_json: bool  # --json -
    level: str
    readout: str | None
    reverse: bool  # --reverse RUN given
    symmetrize: str | None

    def _stdout_flags(self) -> str:
        """The flags given that write to stdout, as 'A and B' or 'A, B and C'."""
        given = [f for f, on in (("--print", self.show), ("--pharaoh -", self.stdout_links),
                                 ("--json -", self.stdout_json)) if on]
        return " and ".join([", ".join(given[:-1]), given[-1]] if len(given) > 2 else given)

    def problems(self) -> list[str]:
        """Flags that `mtkit align` would otherwise accept and ignore, and choices its model
        could not honour, before the model is loaded; the choices of outputs are checked by
        their owner (`AlignOutputs.check`)."""
        from mtkit.align import DEFAULT_READOUT
        from mtkit.align.files import reading_problems
        from mtkit.align.viz import MIN_WIDTH
        from mtkit.models.base import kind_problems

        fmt, method = self.heatmap_format, self.method
        checks = [
            (self.forced and bool(self.search), f"{', '.join(self.search)}: search options "
             "apply only without -t (with -t the given targets are aligned, nothing is "
             "searched)"),
            (self.greedy and self.beam is not None, "--greedy and --beam exclude each other"),
            (fmt is not None and self.heatmap is None,
             "--heatmap-format applies to --heatmap DIR"),
            (self.one_based and self.gold is None, "--one-based applies to --gold FILE"),
            (self.gold is not None and not self.forced, "--gold needs -t: gold links refer to "
             "given target sentences, not to translations"),
            ((method is not None or self.threshold is not None) and not self.links,
             "--align-method and --threshold apply to links: add --pharaoh, --json or --gold"),
            (self.show and self.width < MIN_WIDTH, f"--print: the terminal is {self.width} "
             f"columns wide; its tables need {MIN_WIDTH} (widen it, or set COLUMNS)"),
            (self.show + self.stdout_links + self.stdout_json > 1,
             f"{self._stdout_flags()} each write to stdout: give all but one a file"),
            (self.self_attention is not None and (self.pharaoh or self.gold is not None),
             "--self-attention relates a sentence's words to each other, not source to target: "
             "--pharaoh and --gold need cross-attention (--json keeps its matrices)"),
            (self.self_attention is not None and (method is not None
                                                  or self.threshold is not None),
             "--align-method and --threshold make source-target links, which --self-attention "
             "does not give (--json keeps its matrices)"),
            (self.symmetrize is not None and not self.reverse,
             "--symmetrize combines the links of two models: add --reverse RUN"),
        ]
        reading = reading_problems(
            kind="cross" if self.self_attention is None else self.self_attention,
            readout=self.readout or DEFAULT_READOUT, reverse=self.reverse,
            symmetrize=self.symmetrize or "grow-diag-final", needs_links=self.links,
            level=self.level)
        if self.self_attention is not None:
            reading += kind_problems(self.self_attention, self_only=True)
        return [message for bad, message in checks if bad] + [p.text(flag_of) for p in reading]


def _head(value: str | None) -> int | str | None:
    if value is None or value == "mean":
        return value
    if value.isdigit():
        return int(value)
    raise ConfigError(f"--head: expected a head number (0, 1, ...) or mean, got {value!r}")


def _reverse_model(path: Path, forward: Any, device: Any, *, layer: int | None,
                   head: int | str | None, readout: str | None, symmetrize: str) -> Any:
    """The --reverse model as an `mtkit.align.reverse.Reverse`: loaded, its direction checked
    against the forward recipe's data section, the same --layer/--head/--readout chosen on it
    (those not given: its own defaults, e.g. what its guided alignment supervised)."""
    from mtkit.align.links import Symmetrization
    from mtkit.align.readout import default_readout
    from mtkit.align.reverse import Reverse, check_direction
    from mtkit.api import open_model
    from mtkit.config.guided import Readout
    from mtkit.run import resolve_checkpoint

    resolve_checkpoint(path)  # an export is no checkpoint: said as before
    opened = open_model([path], device=str(device), streaming=True)
    net, recipe, tok = opened.network, opened.recipe, opened.tokenizer
    warning = check_direction(forward, recipe.data, name=str(path))
    if warning is not None:
        typer.echo(f"mtkit: warning: {warning}", err=True)
    try:
        attention = net.choose_attention("cross", layer, head)
    except MtkitError as e:
        raise ConfigError(f"--reverse {path}: {message_of(e)}") from None
    return Reverse(net, tok, attention, choice("readout", readout or default_readout(recipe),
                                               Readout),
                   choice("symmetrize", symmetrize, Symmetrization), resolve_checkpoint(path))


@decoding_flags(("search", "batching"), scope="Without -t: ")
def align(
    model: Annotated[Path, typer.Argument(
        metavar="RUN_OR_CHECKPOINT", hidden=True, show_default=False)],
    src: Annotated[Path, typer.Option(
        "-s", "--src", metavar="FILE", help="Source sentences, one per line (- for standard "
        "input).",
        show_default=False)],
    tgt: Annotated[Path | None, typer.Option(
        "-t", "--tgt", metavar="FILE", help="Target sentences, one per line (- for standard "
        "input), aligned by forced decoding; without -t the source is translated first and "
        "aligned with the translation.")] = None,
    show: Annotated[bool, flag(
        "--print", help="Print each matrix as a shaded table (target rows, source columns).")]
    = False,
    heatmap: Annotated[Path | None, typer.Option(
        "--heatmap", metavar="DIR", help="Write one heatmap per pair into this folder "
        "(align-0000.png, ...): a new or empty one, or one of an earlier --heatmap, whose "
        "images this run replaces.")] = None,
    fmt: Annotated[str | None, typer.Option(
        "--heatmap-format", metavar="FORMAT", help="Heatmap image format: png, svg or pdf "
        "(default: png).")] = None,
    pharaoh: Annotated[Path | None, typer.Option(
        "--pharaoh", metavar="FILE", help="Write Pharaoh links 'i-j' (0-based source i, "
        "target j), one line per pair, to this file (- for standard output).")] = None,
    json_out: Annotated[Path | None, typer.Option(
        "--json", metavar="FILE", help="Write matrices, tokens, links (and gold scores) as "
        "JSON, with the settings that made them (checkpoint, attention, read-out, method); - "
        "for standard output.")] = None,
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
        "--layer", metavar="N", help="Transformer layer, negative from the top (default: the "
        "recipe's model.transformer.align_layer, which translate --align reads and guided "
        "alignment trains; -1, the top layer, unless set: it aligned best on synthetic "
        "reversal and permutation tasks).")]
    = None,
    head: Annotated[str | None, typer.Option(
        "--head", metavar="HEAD", help="Transformer head number, or mean (default: the "
        "recipe's model.transformer.align_head; mean unless set).")]
    = None,
    self_attention: Annotated[str | None, typer.Option(
        "--self-attention", metavar="SIDE", help="encoder or decoder: show that "
        "self-attention instead of the cross-attention.")] = None,
    readout: Annotated[str | None, typer.Option(
        "--readout", metavar="READOUT", help="Which decoding step's cross-attention aligns "
        "target word y_t: current, the step that predicts y_t; or shift, the step that reads "
        "y_t as its input (Chen et al. 2020); see above for each model (default: current; for a "
        "run trained with guided alignment, the read-out it supervised).")]
    = None,
    view: Annotated[str | None, typer.Option(
        "--view", metavar="VIEW", help="Which cross-attention weights: chosen, those each "
        "step used (a hard-attention model's: its one source position, one-hot); prior, the "
        "distribution a hard-attention model picks that position from; posterior, that "
        "distribution given the target word each step produced (a hard-attention RNN with "
        "placement luong, no input feeding) (default: chosen).")] = None,
    reverse: Annotated[Path | None, typer.Option(
        "--reverse", metavar="RUN", help="A run or checkpoint of the other direction (target "
        "-> source): it aligns every pair too, with the --readout, --layer, --head and "
        "--align-method, and the links written and scored combine both directions (default: "
        "none, one direction).")] = None,
    symmetrize: Annotated[str | None, typer.Option(
        "--symmetrize", metavar="HOW", help="With --reverse: grow-diag-final (Koehn et al. "
        "2003), intersection (precise) or union (default: grow-diag-final).")] = None,
    gold: Annotated[Path | None, typer.Option(
        "--gold", metavar="FILE", help="Gold links of the -t pairs (sure i-j, possible i?j "
        "or ipj), one line per pair: print AER, precision and recall.")] = None,
    one_based: Annotated[bool, flag("--one-based", help="Gold links count from 1.")] = False,
    decoding: DecodeFlags = NO_DECODING_FLAGS,
    device: InferenceDeviceOpt = "auto",
    threads: InferenceThreadsOpt = 0,
    _help: HelpOpt = False,
) -> None:
    """Show and extract word alignments from a model's attention.

    RUN_OR_CHECKPOINT is a run directory (its best.pt, else last.pt) or a checkpoint file. Outputs:
    terminal tables, heatmaps, Pharaoh links, JSON, and AER against gold links.

    Read-outs (--readout): the decoder step whose input is y_t predicts y_t+1. current aligns
    y_t with the step before (the one that predicts it), shift with the step itself (Chen et
    al. 2020).

    Transformer, and RNN with Luong placement: the shift step has seen y_t (causal
    self-attention includes the position; Luong attends after the recurrence read y_t). Chen
    et al. find shift aligns better in Transformers trained on real language pairs.

    RNN with Bahdanau placement (any score function): attention is scored from the previous
    state, before y_t is read, so the shift row has not seen y_t and aligns the next word:
    use current, the paper's own alignment.

    Measured: tiny models of every kind on synthetic tasks, and the CPU demo's Multi30k model
    against eflomal's links (AER 0.45 vs 0.87), align best with current (bench/RESULTS.md).

    Example: mtkit align runs/en-de-multi30k -s test.en -t test.de --pharaoh test.align
    --gold gold.txt

    Without -t: mtkit align runs/en-de-multi30k -s test.en --beam 5 --print --heatmap maps/
    """
    with collector_paused():  # see mtkit/process/startup.py
        from rich.console import Console

        from mtkit.align import DEFAULT_METHOD, DEFAULT_READOUT, default_readout
        from mtkit.align import files as ar
        from mtkit.run import resolve_checkpoint

    console = Console(highlight=False)
    refuse(AlignFlags(
        forced=tgt is not None, search=decoding.named(("search",)),
        greedy="greedy" in decoding.switches, beam=decoding.get("beam_size"),
        self_attention=self_attention, heatmap_format=fmt,
        heatmap=heatmap, one_based=one_based, gold=gold, method=method, threshold=threshold,
        show=show, width=console.width,
        links=pharaoh is not None or json_out is not None or gold is not None,
        pharaoh=pharaoh is not None, stdout_links=str(pharaoh) == "-",
        stdout_json=str(json_out) == "-", level=level, readout=readout,
        reverse=reverse is not None, symmetrize=symmetrize).problems())
    outputs = ar.AlignOutputs(
        show=show, heatmap_dir=heatmap, heatmap_format=fmt or "png", pharaoh=pharaoh,
        json=json_out, gold=gold, one_based=one_based, level=cast("ar.Level", level),
        method=method or DEFAULT_METHOD, threshold=threshold)
    outputs.check()  # a wrong --level too: hence the cast
    _check_files(model, reverse, src, tgt, gold, heatmap, pharaoh, json_out)
    dev, net, recipe, tok = _load(model, device, threads)
    choice = net.choose_attention(self_attention or "cross", layer, _head(head))
    if view is not None:
        choice = net.choose_view(choice, view)
    backward = None if reverse is None else _reverse_model(
        reverse, recipe.data, dev, layer=layer, head=_head(head), readout=readout,
        symmetrize=symmetrize or "grow-diag-final")
    cfg = decoding.with_values(nbest=1).over(recipe.decode)
    refuse(decoding.ignored(cfg, unseen_score="align does not show"))
    readout = readout or (default_readout(recipe) if choice.kind == "cross" else DEFAULT_READOUT)
    report = ar.align_files(net, tok, src, tgt, attention=choice, outputs=outputs, decode=cfg,
                            device=dev, readout=readout, reverse=backward,
                            max_len=recipe.data.max_len, console=console, stdout=sys.stdout,
                            checkpoint=resolve_checkpoint(model))
    _say(report, links_to_stdout="-" in (str(pharaoh), str(json_out)))


def _load(model: Path, device: str, threads: int) -> tuple[Any, Any, Any, Any]:
    """The device, and the model, recipe and tokenizer of `model` loaded on it, opened as
    every command opens a model (`mtkit.api.open_model`; streaming: the forced passes run one
    batch at a time on every thread)."""
    with collector_paused():
        import torch

        from mtkit.api import open_model
        from mtkit.run import resolve_checkpoint

        resolve_checkpoint(model)  # an export is no checkpoint: said as before
        opened = open_model([model], device=device, threads=threads, streaming=True)
    return torch.device(opened.info.device), opened.network, opened.recipe, opened.tokenizer


def _check_files(model: Path, reverse: Path | None, src: Path, tgt: Path | None,
                 gold: Path | None, heatmap: Path | None, pharaoh: Path | None,
                 json_out: Path | None) -> None:
    """The inputs are there and readable, and no output replaces an input or the model."""
    from mtkit.align import files as ar
    from mtkit.align.heatmap_folder import holds

    ar.check_inputs(src, tgt, gold)
    refuse([f"{flag} {path}: inside the --heatmap folder, whose images a run replaces; move "
            "it out of there" for flag, path in (("-s", src), ("-t", tgt), ("--gold", gold))
            if heatmap is not None and path is not None and holds(heatmap, path)])
    refuse(output_problems({"--pharaoh": pharaoh, "--json": json_out}, {
        "the -s file": src, "the -t file": tgt, "the --gold file": gold,
        **model_files([model]), **{f"the --reverse {k[4:]}": p for k, p in model_files(
            [] if reverse is None else [reverse]).items()}}))


def _say(report: Any, *, links_to_stdout: bool) -> None:
    """The report's warnings, scores (on stderr when stdout carries the links) and summary."""
    from mtkit.align import files as ar

    for invalid in report.invalid_utf8:
        typer.echo(f"mtkit: warning: {invalid.warning()}", err=True)
    if report.unmapped:
        more = len(report.unmapped) - 1
        typer.echo(f"mtkit: warning: {report.unmapped[0]}"
                   + (f" and {more} more line{'s' * (more > 1)}" if more else "")
                   + ": the tokenizer does not keep the line's whitespace words apart, so its "
                   "links and labels count the words its pieces decode to", err=True)
    if report.missing_glyphs:
        shown = "".join(sorted(report.missing_glyphs)[:10])
        typer.echo(f"mtkit: warning: heatmaps: the font has no glyph for {shown!r}"
                   f"{' and more' if len(report.missing_glyphs) > 10 else ''}, drawn as boxes; "
                   "name a font that has them in a matplotlibrc (font.family)", err=True)
    if report.scores is not None:  # on stderr when stdout carries the links
        typer.echo(ar.format_scores(report.scores), err=links_to_stdout)
    typer.echo(f"mtkit: {report.summary()}", err=True)
