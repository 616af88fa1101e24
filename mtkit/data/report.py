"""What `mtkit prep` reports: the `PrepReport`, its fields in ``manifest.json`` (written with
the data, read back when a later prep finds the data up to date), and the tables it prints."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from mtkit.config import Recipe
from mtkit.data import clean
from mtkit.data.alignments import AlignStats
from mtkit.data.encode import SplitInfo
from mtkit.fileio import InvalidUtf8


@dataclass
class PrepReport:
    """What prep did (or found already done) and the numbers it reports."""

    data_dir: Path
    skipped: bool
    seconds: float
    splits: dict[str, SplitInfo]
    clean: clean.CleanStats
    invalid_utf8: list[InvalidUtf8]  # the inputs where invalid UTF-8 was replaced
    src_vocab_size: int
    tgt_vocab_size: int
    batch_tokens: int = 0
    train_batches: int = 0
    padding_efficiency: float = 0.0  # real / padded tokens of the training batches
    files: dict[str, int] = field(default_factory=dict)  # output file -> size in bytes
    # Seconds of each pass: read (and clean, and sample) every split, train sentencepiece,
    # encode and write every split. Empty in a manifest written before they were recorded.
    phases: dict[str, float] = field(default_factory=dict)
    # The training split's word alignments (data.train.align); None when it has none.
    alignments: AlignStats | None = None


# --------------------------------------------------------------------------- manifest


def report_fields(report: PrepReport) -> dict:
    """The report's part of the manifest (``alignments`` only when the split has them, so a
    manifest without alignments reads as it always did)."""
    fields = {"seconds": round(report.seconds, 3),
              "splits": {n: asdict(s) for n, s in report.splits.items()},
              "clean": {"read": report.clean.read, "dropped": report.clean.dropped},
              "invalid_utf8": [dataclasses.asdict(f) for f in report.invalid_utf8],
              "src_vocab_size": report.src_vocab_size,
              "tgt_vocab_size": report.tgt_vocab_size, "files": report.files,
              "phases": {k: round(v, 3) for k, v in report.phases.items()}}
    if report.alignments is not None:
        fields["alignments"] = asdict(report.alignments)
    return fields


def report_from_manifest(man: dict, ddir: Path) -> PrepReport:
    """The report of an earlier, complete preparation (this call skipped the work)."""
    links = man.get("alignments")
    return PrepReport(
        data_dir=ddir, skipped=True, seconds=man["seconds"],
        splits={n: SplitInfo(**s) for n, s in man["splits"].items()},
        clean=clean.CleanStats(read=man["clean"]["read"], dropped=man["clean"]["dropped"]),
        invalid_utf8=_invalid_from_manifest(man["invalid_utf8"]),
        src_vocab_size=man["src_vocab_size"], tgt_vocab_size=man["tgt_vocab_size"],
        files=man["files"], phases=man.get("phases", {}),
        alignments=None if links is None else AlignStats(**links))


def _invalid_from_manifest(value: list | dict) -> list[InvalidUtf8]:
    # Manifests written before the first line was recorded map file -> count.
    if isinstance(value, dict):
        return [InvalidUtf8(name, lines=n) for name, n in value.items()]
    return [InvalidUtf8(**f) for f in value]


# --------------------------------------------------------------------------- printing


def print_report(report: PrepReport, recipe: Recipe, console: Console) -> None:
    if report.skipped:
        console.print(f"prep: {report.data_dir} is up to date (same data section and inputs); "
                      "nothing to do. Use --force to prepare it again.")
    else:
        console.print(clean.clean_table(report.clean, recipe.data.clean))
        if report.alignments is not None:
            console.print(report.alignments.summary(), markup=False, highlight=False)
    for invalid in report.invalid_utf8:
        # one unwrapped line, as every command warns (rich wraps at 80 columns off a terminal)
        console.print(f"mtkit: warning: {invalid.warning()}", markup=False, highlight=False,
                      soft_wrap=True)
    console.print(_splits_table(report, recipe))
    vocab = (f"joint {report.src_vocab_size}" if recipe.data.spm.joint else
             f"source {report.src_vocab_size}, target {report.tgt_vocab_size}")
    console.print(f"sentencepiece {recipe.data.spm.model_type}: {vocab} pieces")
    if (tags := tags_line(report, recipe)) is not None:
        console.print(tags, markup=False, highlight=False)
    console.print(f"batching: {report.train_batches} training batches of <= "
                  f"{report.batch_tokens} tokens per side; padding efficiency "
                  f"{report.padding_efficiency:.3f} (real / padded tokens)")
    if not report.skipped:
        phases = ", ".join(f"{k} {v:.1f} s" for k, v in report.phases.items())
        console.print(f"prep: wrote {report.data_dir} in {report.seconds:.1f} s ({phases})")


def _splits_table(report: PrepReport, recipe: Recipe) -> Table:
    d = recipe.data
    table = Table(title=f"prepared splits ({d.src_lang} -> {d.tgt_lang})")
    for col in ("split", "pairs", f"{d.src_lang} tokens", f"{d.tgt_lang} tokens",
                f"over max_len {d.max_len} (src/tgt)"):
        table.add_column(col, justify="left" if col == "split" else "right")
    for name, s in report.splits.items():
        table.add_row(name, str(s.pairs), str(s.src_tokens), str(s.tgt_tokens),
                      f"{s.src_over_max_len}/{s.tgt_over_max_len}")
    return table


def tags_line(report: PrepReport, recipe: Recipe) -> str | None:
    """The language tags and their pairs per split, with whether each is one piece (and
    which) of the source vocabulary; None without tags."""
    tags = recipe.data.tags()
    if not tags:
        return None
    from mtkit.data.spm import Tokenizer

    tok = Tokenizer.load(report.data_dir)
    parts = []
    for tag in tags:
        ids = tok.tag_id(tag)
        piece = f"piece {ids}" if ids is not None else "NOT one piece"
        counts = ", ".join(f"{name} {s.tags[tag]}" for name, s in report.splits.items()
                           if tag in s.tags)
        parts.append(f"{tag} ({piece}; {counts or 'no pairs'})")
    default = recipe.data.tag or "none: translate needs --tag"
    return f"language tags: {'; '.join(parts)}; default {default}"
