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


def test_runs_follow_their_aligned_words_into_the_translation_order():
    """Reversed: the bold and italic words keep their formatting where they land, the plain
    run split around them is copied, and the words read in the translation's order."""
    out = _translated(_made(), reverse)
    p = out.paragraphs[0]
    assert p.text.split() == "RUNS. DOG BIG THE LOUDLY. BARKS IT".split()
    assert [(r.text.strip(), r.bold, r.italic) for r in p.runs] == [
        ("RUNS. DOG", None, None), ("BIG", True, None), ("THE", None, None),
        ("LOUDLY.", None, None), ("BARKS", None, True), ("IT", None, None)]


def test_runs_beside_a_hyperlink_keep_their_order():
    """A paragraph whose runs are not all its own children (one inside a hyperlink) keeps
    its runs in order, each with the target words aligned to it in turn."""
    from docx.oxml.ns import qn
    from docx.oxml.parser import OxmlElement

    doc = docx.Document()
    p = doc.add_paragraph("Go ")
    link = OxmlElement("w:hyperlink")
    link.set(qn("r:id"), "rId99")
    p._p.append(link)
    run = p.add_run("home")
    run.bold = True
    link.append(run._r)
    p.add_run(" now.")
    data = io.BytesIO()
    doc.save(data)
    out = _translated(data.getvalue(), reverse).paragraphs[0]
    assert [(type(part).__name__, part.text) for part in out.iter_inner_content()] == [
        ("Run", "NOW. "), ("Hyperlink", "HOME"), ("Run", " GO")]
    assert out.hyperlinks[0].runs[0].bold


def test_not_a_docx_is_one_line():
    with pytest.raises(DataError, match="not a .docx document"):
        DocxDocument(b"plain text")
