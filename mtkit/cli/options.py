"""What the commands share: typer's option declarations that read the same in every `--help`,
and the typed requests that flags become. A request is a frozen dataclass validated once, like
a recipe section, its problems named by the flag that caused them; a command raises them all
at once with `refuse`. No ML logic lives here."""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, get_origin, get_type_hints

import typer

from mtkit.config.sections import DecodeConfig, OptionKind, SearchMethod
from mtkit.errors import ConfigError, MtkitError
from mtkit.fileio import writable


def flag(*decls: str, help: str, **kwargs: Any) -> Any:
    """A switch (a bool option). typer 0.29 shows a type (`<bool>`) beside an option unless it
    has a metavar, as if the switch took a value; an empty metavar shows nothing."""
    return typer.Option(*decls, metavar="", help=help, **kwargs)


def at_least(low: int) -> Callable[[Any], int]:
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


def within(values: range) -> Callable[[Any], int]:
    """A parser of whole numbers in `values` (a range of step 1), as `at_least`."""

    def parse(value: Any) -> int:
        try:
            number = int(value)
        except ValueError:
            number = None
        if number is None or number not in values:
            raise typer.BadParameter(f"expected a whole number from {values.start} to "
                                     f"{values.stop - 1}, got {value!r}")
        return number

    return parse


def _show_help(ctx: typer.Context, value: bool) -> None:
    if value:
        typer.echo(ctx.get_help(), color=ctx.color)
        raise typer.Exit()


# Library fields (`mtkit.errors.Problem.option`) whose flag is not `--` + the field with
# dashes; every other field is its flag so written (`heatmap_format` is --heatmap-format).
_FLAGS = {"show": "--print", "heatmap_dir": "--heatmap", "method": "--align-method",
          "kind": "--self-attention", "quantization": "--quantize",
          "src": "-s", "tgt": "-t", "beam_size": "--beam"}
_SHORT = {"--beam": "-b"}  # the flags that have a short form too


def flag_of(field: str) -> str:
    """How a command line names a library option (`MtkitError.problems`' fields); a recipe
    key (`train.device`) or a flag the caller passed is its own name."""
    if "." in field or field.startswith("-"):
        return field
    return _FLAGS.get(field, "--" + field.replace("_", "-"))


def message_of(error: MtkitError) -> str:
    """A user error's message as the command line says it: options by their flags."""
    return error.text(flag_of)


def refuse(problems: list[str]) -> None:
    """Raise every problem of a request at once, as one user error."""
    if problems:
        raise ConfigError("; ".join(problems))


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one existing plain file (links followed): /dev/stdin and
    /dev/stdout are one terminal, but writing one replaces nothing of the other."""
    try:
        return os.path.isfile(a) and os.path.samefile(a, b)
    except OSError:
        return False


def model_files(models: list[Path], exported: Any = None) -> dict[str, Path]:
    """The files the models are read from, which an output must not replace: a checkpoint,
    and its run's recipe and data/ folder (the tokenizer); an export's every file."""
    from mtkit.run import RECIPE, data_dir, resolve_checkpoint

    if exported is not None:
        return {f"the export's {p.name}": p
                for p in sorted(exported.path.iterdir()) if p.is_file()}
    files: dict[str, Path] = {}
    for m in (m for m in models if m.exists()):
        ckpt = resolve_checkpoint(m)
        run = ckpt.parent
        files["the checkpoint" if m.is_file() else f"the checkpoint of {m}"] = ckpt
        # the run's other checkpoints too (-o best.pt, translating with checkpoint_250.pt)
        others = [p for p in sorted(run.glob("*.pt")) if p not in files.values()]
        for p in [run / RECIPE, *others, *sorted(data_dir(run).glob("*"))]:
            files.setdefault(f"the run's {p.relative_to(run)}", p)
    return files


def output_problems(outputs: Mapping[str, Path | None], inputs: Mapping[str, Path | None]
                    ) -> list[str]:
    """What is wrong with the output files a user names (flag -> file; None or - for none):
    a folder that is not there (`folder_problems`), an input replaced (`overwrite_problems`),
    a name ending in .gz: gzip inputs are read decompressed, but outputs are plain text
    (`-o out.de.gz` was text that gzip -d refused)."""
    gz = [f"{f} {p}: mtkit writes plain text, not gzip; name the file without .gz, or pipe "
          f"the output through gzip" for f, p in outputs.items()
          if p is not None and p.suffix.lower() == ".gz" and not p.is_dir()]
    return folder_problems(outputs) + overwrite_problems(outputs, inputs) + gz


def overwrite_problems(outputs: Mapping[str, Path | None], inputs: Mapping[str, Path | None]
                       ) -> list[str]:
    """Outputs (flag -> file; None or - for none, or stdout) that would replace an input
    (description -> file), or that name the same file as another output."""
    outs = [(f, p) for f, p in outputs.items() if p is not None and str(p) != "-"]
    problems = []
    for f, out in outs:  # the first input it is (a file may be linked under two names)
        what, inp = next(((w, i) for w, i in inputs.items()
                          if i is not None and same_file(out, i)), (None, None))
        if what is not None:
            problems.append(f"{f} {out}: is {what} {inp}; writing there would replace it; "
                            "give another file")
    problems += [f"{f} and {g} name the same file {p}; give each its own"
                 for i, (f, p) in enumerate(outs) for g, q in outs[i + 1:]
                 if os.path.realpath(p) == os.path.realpath(q)]
    return problems


def folder_problems(outputs: Mapping[str, Path | None]) -> list[str]:
    """Output files (flag -> file; None or - for none) whose folder does not exist: a file a
    user names goes into a folder that is there, as with the shell's `>` (a mistyped folder
    was made silently, `--plot /nonexist/p.png` made /nonexist)."""
    problems = []
    for f, p in outputs.items():
        if p is not None and p.is_dir():
            problems.append(f"{f} {p}: is a folder; expected a file name")
        if p is None or str(p) == "-":
            continue
        q = Path(os.path.realpath(p)) if p.is_symlink() else p  # where a link writes
        if q.is_file() and not writable(q):  # said before a model loads
            problems.append(f"{f} {p}: cannot write (Permission denied)")
        if q.parent.is_dir():
            continue
        # the nearest ancestor there: a file in the way cannot be made a folder by the user
        there = next((a for a in (q.parent, *q.parent.parents) if a.exists()), None)
        problems.append(f"{f} {p}: a parent of it is a file, not a folder"
                        if there is not None and not there.is_dir()
                        else f"{f} {p}: folder {q.parent} does not exist; create it first")
    return problems


# Every command declares `-h/--help` itself, because typer's own shows `<bool>` beside it.
HelpOpt = Annotated[bool, flag("-h", "--help", help="Show this message and exit.",
                               callback=_show_help, is_eager=True, expose_value=False)]

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
    "--threads", metavar="N", parser=at_least(0), show_default=False,
    help="CPU threads, 0 for torch's default (default: 0).")]
TranslateThreadsOpt = Annotated[int, typer.Option(
    "--threads", metavar="N", parser=at_least(0), show_default=False,
    help="CPU threads. On a CPU, beam and greedy search share them among batches decoded at "
    "once (2 threads: 2 batches of one thread; 16: 4 of 4); sampling and line-by-line input "
    "from a terminal decode one batch on N threads (default: 0, the engine's count: torch's "
    "(the physical cores), or for an export the CPUs mtkit may use).")]


def search_method(*, greedy: bool = False, sample: bool = False,
                  beam: int | None = None) -> SearchMethod | None:
    """The decoding method that flags ask for, or None for the recipe's."""
    return "greedy" if greedy else "sample" if sample else ("beam" if beam else None)


# The decoding options, flags and switches alike, are derived from DecodeConfig's fields
# (`_decoding` in mtkit/config/sections.py: kind, help, metavar, flag); `decoding_flags` puts
# those of a command's kinds into its signature. The method is chosen by switches (--greedy,
# --sample; beam search by --beam N), shown after the beam's own flags.
_FIELDS = {f.name: f for f in fields(DecodeConfig) if f.name != "method"}
_HINTS = get_type_hints(DecodeConfig)
_SWITCHES: dict[str, tuple[OptionKind, str]] = dict(fields(DecodeConfig)[0].metadata["switches"])
_BEAM_FIRST = ("beam_size", "nbest")


def _flag_decls(name: str) -> tuple[str, ...]:
    flag = flag_of(name)
    return (_SHORT[flag], flag) if flag in _SHORT else (flag,)


def _decoding_order(kinds: tuple[OptionKind, ...]) -> list[str]:
    """The decoding options of `kinds`, fields and switches, as a command lists them."""
    names = [n for n, f in _FIELDS.items() if f.metadata["kind"] in kinds]
    switches = [m for m, (kind, _) in _SWITCHES.items() if kind in kinds]
    lead = [n for n in names if n in _BEAM_FIRST]
    return lead + switches + [n for n in names if n not in lead]


class DecodeFlags:
    """The decoding flags of translate, align and score --run, those given (not None): a
    request laid over the recipe's `decode` section (`over`), never a dict of options.
    Keywords are DecodeConfig fields (`method` among them); `switches` the method switches
    given (greedy, sample)."""

    FLAGS: ClassVar[dict[str, str]] = {name: _flag_decls(name)[-1] for name in _FIELDS}
    SAMPLING: ClassVar[tuple[str, ...]] = tuple(
        n for n, f in _FIELDS.items() if f.metadata["kind"] == "sampling")

    def __init__(self, *, switches: tuple[str, ...] = (), **given: Any) -> None:
        unknown = set(given) - set(_FIELDS) - {"method"}
        if unknown:
            raise TypeError(f"not decoding options: {', '.join(sorted(unknown))}")
        self._given = {k: v for k, v in given.items() if v is not None}
        self.switches = switches

    @classmethod
    def parsed(cls, values: Mapping[str, Any]) -> DecodeFlags:
        """The flags of a command line: `values` by parameter name (fields and switches)."""
        switches = tuple(m for m in _SWITCHES if values.get(m))
        method = search_method(greedy="greedy" in switches, sample="sample" in switches,
                               beam=values.get("beam_size"))
        return cls(switches=switches, method=method,
                   **{k: v for k, v in values.items() if k in _FIELDS})

    def with_values(self, **values: Any) -> DecodeFlags:
        """These flags with `values` (fields) set as if given."""
        return DecodeFlags(switches=self.switches, **{**self._given, **values})

    def get(self, name: str) -> Any:
        """The value given for field `name`, or None."""
        return self._given.get(name)

    def named(self, kinds: tuple[OptionKind, ...]) -> tuple[str, ...]:
        """The flags of `kinds` given, switches among them, in the order help lists them."""
        return tuple(self.FLAGS[n] if n in _FIELDS else "--" + n
                     for n in _decoding_order(kinds)
                     if (n in self.switches if n in _SWITCHES else n in self._given))

    def given(self) -> dict[str, Any]:
        """The flags given, as DecodeConfig fields."""
        return dict(self._given)

    def over(self, base: DecodeConfig) -> DecodeConfig:
        """The recipe's decode section with the given flags on top, validated like a recipe
        section (`mtkit.api.decode_options`); a problem is named by the flag that set it."""
        from mtkit.api import decode_options

        return decode_options(base, self.given(), origins=self.FLAGS, source="command line")

    def ignored(self, cfg: DecodeConfig, *, unseen_score: str | None = None) -> list[str]:
        """Flags that the resolved decoding `cfg` would ignore. (--nbest with greedy search is
        refused by DecodeConfig's own validation.) `unseen_score`: why the output shows no
        score, and what to do (None where it shows one); with it, a length penalty outside
        beam search, which only rescores the output, is reported as ignored too."""
        given = [self.FLAGS[name] for name in self.SAMPLING if name in self._given]
        alpha = self.get("alpha")
        off_gnmt = alpha is not None and cfg.length_penalty not in ("gnmt", "power")
        penalty = [flag for flag, v in (("--length-penalty", self.get("length_penalty")),
                                        ("--alpha", None if off_gnmt else alpha))
                   if v is not None]  # --alpha 0 is given too
        checks = [
            (bool(given) and cfg.method != "sample", f"{', '.join(given)}: sampling options "
             f"need --sample (decode.method is {cfg.method})"),
            (off_gnmt, "--alpha is the GNMT penalty's exponent, or power's; the length penalty is "
             f"{cfg.length_penalty}"),
            (bool(penalty) and unseen_score is not None and cfg.method != "beam",
             f"{', '.join(penalty)}: with {cfg.method} search the length penalty changes only "
             f"the score, which {unseen_score}"),
        ]
        return [message for bad, message in checks if bad]


# A command's `decoding` parameter's default, for its signature; `decoding_flags` replaces it.
NO_DECODING_FLAGS = DecodeFlags()


def _decoding_param(name: str, scope: str, more: str) -> inspect.Parameter:
    """The typer parameter of decoding option `name` (a field or a switch), its help behind
    `scope` ("Without -t: ") and followed by `more`."""
    if name in _SWITCHES:
        text, decls, metavar, tp, default = _SWITCHES[name][1], ("--" + name,), "", bool, False
    else:
        meta, decls = _FIELDS[name].metadata, _flag_decls(name)
        hint = _HINTS[name]
        tp = str if get_origin(hint) is Literal else hint  # DecodeConfig says a bad choice
        text = f"{meta['help']}{more} (default: the recipe's decode.{name})"
        metavar, default = meta["metavar"], None
    text += "."
    help = scope + text if scope else text[0].upper() + text[1:]
    info = flag(*decls, help=help) if not metavar else typer.Option(*decls, metavar=metavar,
                                                                     help=help)
    annotation = Annotated[bool, info] if tp is bool else Annotated[tp | None, info]
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=annotation)


def decoding_flags(kinds: tuple[OptionKind, ...], *, only: tuple[str, ...] | None = None,
                   scope: str = "", more: Mapping[str, str] | None = None
                   ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A command's decoding flags, derived from DecodeConfig: those of `kinds` (or `only`
    these among them), put into the command's signature where its `decoding: DecodeFlags`
    parameter is, which receives them parsed. `scope` goes before each help but batching's
    ("Without -t: "); `more` adds a command's words to an option's help."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        names = [n for n in _decoding_order(kinds) if only is None or n in only]
        generated = [_decoding_param(n, "" if n in _FIELDS and _FIELDS[n].metadata["kind"]
                                     == "batching" else scope, (more or {}).get(n, ""))
                     for n in names]
        own = inspect.signature(fn, eval_str=True).parameters
        params: list[inspect.Parameter] = []
        for p in own.values():
            if p.name == "decoding":
                params += generated
            else:
                params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
                              if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD else p)

        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            values = {n: kwargs.pop(n) for n in names}
            return fn(**kwargs, decoding=DecodeFlags.parsed(values))

        command.__dict__["__signature__"] = inspect.Signature(params)  # what typer reads
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return wrap
