"""`mtkit translate -i page.html -o page.de.html`: a whole document translated
(`mtkit.documents`), its format told by `--input-format` or by the input's extension."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from mtkit.api.model import TranslationModel
    from mtkit.documents.formats import DocumentFormat
    from mtkit.translation.terms import Glossary

InputFormatOpt = Annotated[str | None, typer.Option(
    "--input-format", metavar="FORMAT", help="Translate the input as a document: lines (each "
    "line a paragraph, split into sentences and rejoined), paragraphs (blocks between blank "
    "lines), html, markdown, srt, vtt, po, xliff or docx; markup is kept and placed by the "
    "word alignment (default: told by the input's extension, .html .htm .xhtml .md .markdown "
    ".srt .vtt .po .pot .xlf .xliff .docx; any other: one sentence per line).")]
PlacementOpt = Annotated[str | None, typer.Option(
    "--placement", metavar="METHOD", help="For a document: where markup goes in the "
    "translation: align, around the target words aligned to the source words it enclosed; or "
    "position, at the same relative place (the fallback align uses where there is no link) "
    "(default: align).")]


def document_format(input: Path | None, chosen: str | None) -> DocumentFormat | None:
    """The document format the input is translated as, or None for one sentence per line."""
    from mtkit.documents.formats import EXTENSIONS, format_for

    if chosen is None and (input is None or input.suffix.lower() not in EXTENSIONS):
        return None
    return format_for(input, chosen)


def document_problems(*, fmt: str, align: bool, prefix: Path | None, nbest: int | None,
                      placement: str | None, is_document: bool) -> list[str]:
    """Flags a document translation cannot honour (or that need one)."""
    from mtkit.documents.place import PLACEMENTS

    if not is_document:
        return ["--placement is for a document (--input-format)"] if placement else []
    checks = [
        (fmt != "text", "--format jsonl: a document is written in its own format"),
        (align, "--align: a document's markup is placed by the alignment; its links are not "
         "written"),
        (prefix is not None, "--prefix: a document's lines are not its sentences"),
        (nbest is not None and nbest > 1, "--nbest: a document gets its best translation"),
        (placement not in (None, *PLACEMENTS), f"--placement: invalid choice {placement!r}; "
         f"expected {' or '.join(PLACEMENTS)}"),
    ]
    return [message for bad, message in checks if bad]


def translate_file(model: TranslationModel, input: Path | None, output: Path | None,
                   fmt: DocumentFormat, *, placement: str | None, tag: str | None,
                   terms: Glossary | None) -> None:
    """Translate the document `input` (else stdin) into `output` (else stdout), written
    whole or not at all, its sentences following the glossary `terms`; its problems as
    warnings and a summary on stderr."""
    from mtkit.documents.formats import translate_document
    from mtkit.errors import DataError
    from mtkit.fileio import WriteError, atomic_write

    start = time.perf_counter()
    name = "standard input" if input is None else str(input)
    data = input.read_bytes() if input is not None else sys.stdin.buffer.read()
    try:
        result = translate_document(model, data, fmt, placement=placement or "align", tag=tag,
                                    terms=terms)
    except DataError as e:
        raise DataError(f"{name}: {e}") from None
    if output is None:
        if sys.stdout is None:
            raise WriteError("standard output is closed; give -o FILE or redirect it")
        sys.stdout.flush()
        sys.stdout.buffer.write(result.data)
        sys.stdout.buffer.flush()
    else:
        with atomic_write(output, "wb", encoding=None) as out:
            out.write(result.data)
    for problem in result.problems:
        typer.echo(f"mtkit: warning: {problem}", err=True)
    typer.echo(f"mtkit: translated {result.sentences} sentences of {name} ({fmt}) in "
               f"{time.perf_counter() - start:.1f} s", err=True)
