"""Word documents: paragraphs translated whole, run formatting on the aligned words, tables,
headers, pictures left alone; a file that is no .docx is one line."""

from __future__ import annotations

import io

import pytest

from mtkit.documents.blocks import translate_blocks
from mtkit.errors import DataError
from tests.unit.documents.fake import monotone, reverse

docx = pytest.importorskip("docx")

from mtkit.documents.docx import DocxDocument  # noqa: E402


def _made() -> bytes:
    doc = docx.Document()
    doc.sections[0].header.paragraphs[0].text = "page header"
    p = doc.add_paragraph("The ")
    p.add_run("big").bold = True
    p.add_run(" dog runs. It ")
    p.add_run("barks").italic = True
    p.add_run(" loudly.")
    doc.add_paragraph("")
    table = doc.add_table(rows=2, cols=2)
    table.cell(0, 0).text = "cell one"
    table.cell(0, 1).text = "cell two"
    merged = table.cell(1, 0).merge(table.cell(1, 1))
    merged.text = "merged cell"
    table.cell(0, 0).add_table(rows=1, cols=1).cell(0, 0).text = "nested cell"
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


def _translated(data: bytes, translate) -> docx.document.Document:
    doc = DocxDocument(data)
    return docx.Document(io.BytesIO(doc.render(translate_blocks(doc.blocks(), translate))))


def test_paragraphs_tables_and_headers_are_translated_with_their_runs():
    out = _translated(_made(), monotone)
    p = out.paragraphs[0]
    assert p.text == "THE BIG DOG RUNS. IT BARKS LOUDLY."
    assert [(r.text, r.bold, r.italic) for r in p.runs] == [
        ("THE ", None, None), ("BIG", True, None), (" DOG RUNS. IT ", None, None),
        ("BARKS", None, True), (" LOUDLY.", None, None)]
    cells = out.tables[0]
    assert cells.cell(0, 1).text == "CELL TWO" and cells.cell(1, 0).text == "MERGED CELL"
    assert cells.cell(0, 0).tables[0].cell(0, 0).text == "NESTED CELL"
    assert out.sections[0].header.paragraphs[0].text == "PAGE HEADER"


def test_every_run_keeps_its_formatting_and_the_words_stay_in_translation_order():
    out = _translated(_made(), reverse)
    p = out.paragraphs[0]
    assert p.text.split() == "RUNS. DOG BIG THE LOUDLY. BARKS IT".split()
    assert [(r.bold, r.italic) for r in p.runs] == [(None, None), (True, None), (None, None),
                                                    (None, True), (None, None)]


def test_not_a_docx_is_one_line():
    with pytest.raises(DataError, match="not a .docx document"):
        DocxDocument(b"plain text")
