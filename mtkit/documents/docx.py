"""Word documents (.docx), through python-docx: every paragraph of the body, of its tables
(nested ones too) and of the sections' own headers and footers is a block, translated whole.

Each word of a paragraph of several runs is a tag pair of its run (`RUN`), placed by the
alignment like an HTML tag pair (`mtkit.documents.place`): the run's formatting goes to the
target words aligned to its words, in the translation's order, so runs are reordered (and a
run whose words the translation splits apart is copied, formatting and all) where the
translation moves its words; a target word aligned to none joins the run before it. Word by
word rather than run by run: a run's words may land apart (a verb moved to the end), and one
range over them would take in the words between. That needs the paragraph's text runs side
by side under the paragraph; where they are not (a run inside a hyperlink, a picture between
two text runs) the runs keep their order and take the target words aligned to them in turn
(`BREAK` tags between runs, as between subtitle cues). A run holding a picture or another
object is left as it is; so is everything that is not text.
"""

from __future__ import annotations

import copy
import io
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from mtkit.documents.inline import BREAK, Item, Tag, Text
from mtkit.errors import ConfigError, DataError

RUN = "run"  # the tag pair around each word of a run that can move
_SPACES = re.compile(r"(\s+)")


@dataclass
class _Paragraph:
    paragraph: Any
    runs: list[Any]  # its text runs
    movable: bool  # the runs can be reordered (`_movable`)


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
        self._paragraphs: list[_Paragraph] = []
        for paragraph in _paragraphs(self.doc):
            runs = [r for r in _runs(paragraph) if _text_only(r)]
            if any(r.text.strip() for r in runs):
                self._paragraphs.append(_Paragraph(paragraph, runs, _movable(paragraph, runs)))

    def blocks(self) -> list[list[Item]]:
        out = []
        for p in self._paragraphs:
            items: list[Item] = []
            for n, run in enumerate(p.runs):
                if p.movable and len(p.runs) > 1:
                    items += _run_words(run.text, n)
                elif p.movable:
                    items.append(Text(run.text))
                else:
                    items += [Tag("void", "", BREAK, data=n)] if n else []
                    items.append(Text(run.text))
            out.append(items)
        return out

    def render(self, translated: list[list[Item]]) -> bytes:
        for p, items in zip(self._paragraphs, translated, strict=True):
            if p.movable:
                _reordered(p, _pieces(items, [r.text for r in p.runs]))
            else:
                _in_order(p.runs, items)
        out = io.BytesIO()
        self.doc.save(out)
        return out.getvalue()


def _run_words(text: str, n: int) -> list[Item]:
    """Run n's text, each word a `RUN` tag pair (data: n), the spaces between them plain."""
    items: list[Item] = []
    for part in _SPACES.split(text):
        if not part:
            continue
        if part.isspace():
            items.append(Text(part))
        else:
            items += [Tag("open", "", RUN, data=n), Text(part), Tag("close", "", RUN, data=n)]
    return items


def _pieces(items: list[Item], sources: list[str]) -> list[tuple[int, str]]:
    """A translated paragraph as (run, text) pieces in the translation's order: the words
    inside each placed run's tags, the text outside them joined to the piece before (before
    the first: to the first), and neighbouring pieces of one run merged; the spaces between
    two pieces go to the later one where the earlier one's run (its source text `sources`)
    did not end in a space (a bold word stays bold without the space after it). A paragraph
    of one run (no tags) is one piece of run 0."""
    pieces: list[list[Any]] = []
    lead = ""
    for it in items:
        if isinstance(it, Tag) and it.kind == "open":
            if pieces and pieces[-1][0] == it.data:
                continue
            pieces.append([it.data, "" if pieces else lead])
        elif isinstance(it, Text) and pieces:
            pieces[-1][1] += it.text
        elif isinstance(it, Text):
            lead += it.text
    if not pieces:
        return [(0, lead)]
    pieces = [p for p in pieces if p[1]]
    for before, after in itertools.pairwise(pieces):
        space = before[1][len(before[1].rstrip()):]
        if space and before[1].strip() and not sources[before[0]][-1:].isspace():
            before[1], after[1] = before[1].rstrip(), space + after[1]
    return [(n, text) for n, text in pieces]


def _reordered(p: _Paragraph, pieces: list[tuple[int, str]]) -> None:
    """The paragraph's text runs replaced by `pieces`: each a copy of its run (formatting
    and all) holding its text, in order, where the first text run stood."""
    from docx.text.run import Run

    if [n for n, _ in pieces] == list(range(len(p.runs))):  # the same runs, in order
        for run, (_, text) in zip(p.runs, pieces, strict=True):
            if run.text != text:
                run.text = text
        return
    first = p.runs[0]._r
    for n, text in pieces:
        element = copy.deepcopy(p.runs[n]._r)
        first.addprevious(element)
        Run(element, p.paragraph).text = text
    for run in p.runs:
        run._r.getparent().remove(run._r)


def _in_order(runs: list[Any], items: list[Item]) -> None:
    """The runs in their order, each with the target words between its `BREAK`s."""
    texts = [""]
    for it in items:
        if isinstance(it, Tag) and it.name == BREAK:
            texts.append("")
        elif isinstance(it, Text):
            texts[-1] += it.text
    for run, text in zip(runs, texts, strict=True):
        if run.text != text:
            run.text = text


def _movable(paragraph: Any, runs: list[Any]) -> bool:
    """Whether the text runs can be reordered: all children of the paragraph itself, with
    no other run (a picture, an object) between the first and the last."""
    p = paragraph._p
    if not runs or any(r._r.getparent() is not p for r in runs):
        return False
    all_runs = [child for child in p if child.tag == runs[0]._r.tag]
    at = [all_runs.index(r._r) for r in runs]
    return at == list(range(at[0], at[0] + len(runs)))


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
