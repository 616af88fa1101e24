"""Word documents (.docx), through python-docx: every paragraph of the body, of its tables
(nested ones too) and of the sections' own headers and footers is a block, translated whole;
its runs (and the runs inside its hyperlinks) keep their formatting and take the target words
aligned to their own, in their order (`BREAK` tags between runs, as between subtitle cues).
A run holding a picture or another object is left as it is; so is everything that is not
text.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from mtkit.documents.inline import BREAK, Item, Tag, Text
from mtkit.errors import ConfigError, DataError


def _docx():
    try:
        import docx
    except ImportError:
        raise ConfigError("Word documents need python-docx: pip install "
                          "'mtkit[documents]'") from None
    return docx


class DocxDocument:
    """A .docx document's paragraphs (`blocks`) and the document with them translated
    (`render`, the .docx bytes)."""

    def __init__(self, data: bytes) -> None:
        docx = _docx()
        try:
            self.doc = docx.Document(io.BytesIO(data))
        except Exception as e:  # python-docx raises zip, XML and package errors alike
            raise DataError(f"not a .docx document ({type(e).__name__}: {e})") from None
        self._paragraphs: list[list[Any]] = []  # each paragraph's text runs
        for paragraph in _paragraphs(self.doc):
            runs = [r for r in _runs(paragraph) if _text_only(r)]
            if any(r.text.strip() for r in runs):
                self._paragraphs.append(runs)

    def blocks(self) -> list[list[Item]]:
        out = []
        for runs in self._paragraphs:
            items: list[Item] = []
            for n, run in enumerate(runs):
                if n:
                    items.append(Tag("void", "", BREAK, data=n))
                items.append(Text(run.text))
            out.append(items)
        return out

    def render(self, translated: list[list[Item]]) -> bytes:
        for runs, items in zip(self._paragraphs, translated, strict=True):
            texts = [""]
            for it in items:
                if isinstance(it, Tag) and it.name == BREAK:
                    texts.append("")
                elif isinstance(it, Text):
                    texts[-1] += it.text
            for run, text in zip(runs, texts, strict=True):
                if run.text != text:
                    run.text = text
        out = io.BytesIO()
        self.doc.save(out)
        return out.getvalue()


def _paragraphs(doc: Any) -> Iterator[Any]:
    """Every paragraph of the body, its tables and the sections' own headers and footers."""
    yield from _container(doc)
    for section in doc.sections:
        for part in (section.header, section.footer, section.first_page_header,
                     section.first_page_footer, section.even_page_header,
                     section.even_page_footer):
            if not part.is_linked_to_previous:
                yield from _container(part)


def _container(container: Any) -> Iterator[Any]:
    from docx.table import Table

    for block in container.iter_inner_content():
        if isinstance(block, Table):
            seen: list[Any] = []
            for row in block.rows:
                for cell in row.cells:
                    if cell not in seen:  # a merged cell comes once per grid column
                        seen.append(cell)
                        yield from _container(cell)
        else:
            yield block


def _runs(paragraph: Any) -> Iterator[Any]:
    from docx.text.hyperlink import Hyperlink

    for part in paragraph.iter_inner_content():
        if isinstance(part, Hyperlink):
            yield from part.runs
        else:
            yield part


def _text_only(run: Any) -> bool:
    return all(isinstance(x, str) for x in run.iter_inner_content())
