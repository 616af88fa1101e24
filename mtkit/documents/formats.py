"""The document formats, chosen by name or by a file's extension, and a whole document
translated by a loaded model (`translate_document`): what `mtkit translate -i FILE`, the API's
`TranslationModel.translate_document` and the server's /translate_file share."""

from __future__ import annotations

import codecs
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

from mtkit.documents.blocks import Splitting, Translate, translate_blocks
from mtkit.documents.inline import Item
from mtkit.documents.place import Placement
from mtkit.errors import ConfigError, DataError, choice

if TYPE_CHECKING:
    from mtkit.api.model import Extras, TranslationModel
    from mtkit.translation.terms import Glossary

# (sentences, options, extras, terms=, tag=) -> their translations: `TranslationModel.decode`'s
# shape
Decode = Callable[..., list[Any]]

# The word links markup is placed by: each source word's most attended target word
# (argmax-src; where a span has none, the relative-position fallback), read from the mean of
# the decoder layers' cross-attention in a teacher-forced pass over the finished translation
# (a model without layers to choose from, an export or an ensemble: the search's own). On the
# 150 tags of bench/documents.py they placed 88.7% (87.8/89.5 on the halves) where the top
# layer's intersection links placed 82.7% (bench/RESULTS.md, "Placement, the attempts").
LINKS = "argmax-src"
DocumentFormat = Literal["lines", "paragraphs", "html", "markdown", "srt", "vtt", "po",
                         "xliff", "docx"]
DOCUMENT_FORMATS: tuple[DocumentFormat, ...] = get_args(DocumentFormat)
EXTENSIONS: dict[str, DocumentFormat] = {
    ".html": "html", ".htm": "html", ".xhtml": "html",
    ".md": "markdown", ".markdown": "markdown", ".srt": "srt", ".vtt": "vtt", ".po": "po",
    ".pot": "po", ".xlf": "xliff", ".xliff": "xliff", ".docx": "docx"}
MEDIA_TYPES: dict[DocumentFormat, str] = {
    "lines": "text/plain", "paragraphs": "text/plain", "html": "text/html",
    "markdown": "text/markdown", "srt": "application/x-subrip", "vtt": "text/vtt",
    "po": "text/x-gettext-translation", "xliff": "application/xliff+xml",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document"}


class Document(Protocol):
    """What every format's reader is: its blocks, and itself with them translated."""

    def blocks(self) -> list[list[Item]]: ...

    def render(self, translated: list[list[Item]]) -> Any: ...


@dataclass(frozen=True)
class DocumentResult:
    """A translated document: its bytes, how many sentences were translated, and what was
    kept untranslated or found wrong (one line each; the rest is translated)."""

    data: bytes
    sentences: int
    problems: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The document as text (every format but docx)."""
        return self.data.decode("utf-8")


def format_for(path: str | Path | None, chosen: str | None) -> DocumentFormat:
    """The format `chosen` (one of DOCUMENT_FORMATS), else the one `path`'s extension names;
    a ConfigError naming the choices otherwise."""
    if chosen is not None:
        return choice("input_format", chosen, DocumentFormat)
    suffix = Path(path).suffix.lower() if path is not None else ""
    if suffix not in EXTENSIONS:
        known = ", ".join(sorted(EXTENSIONS))
        raise ConfigError.about("input_format", f"cannot tell the format of {path} by its "
                                f"extension ({known}); choose one of "
                                f"{', '.join(DOCUMENT_FORMATS)}")
    return EXTENSIONS[suffix]


def open_document(data: bytes, fmt: DocumentFormat) -> Document:
    """The reader of `data` as `fmt`."""
    if fmt == "docx":
        from mtkit.documents.docx import DocxDocument

        return DocxDocument(data)
    if fmt == "xliff":
        from mtkit.documents.xliff import XliffDocument

        return XliffDocument(data)
    text = _decoded(data)
    if fmt in ("lines", "paragraphs"):
        from mtkit.documents.text import TextDocument

        return TextDocument(text, paragraphs=fmt == "paragraphs")
    if fmt == "html":
        from mtkit.documents.html import HtmlDocument

        return HtmlDocument(text)
    if fmt == "markdown":
        from mtkit.documents.markdown import MarkdownDocument

        return MarkdownDocument(text)
    if fmt in ("srt", "vtt"):
        from mtkit.documents.subtitles import SubtitleDocument

        return SubtitleDocument(text, vtt=fmt == "vtt")
    from mtkit.documents.po import PoDocument

    return PoDocument(text)


def _decoded(data: bytes) -> str:
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"not UTF-8 text (byte {e.start}); documents are read as UTF-8"
                        ) from None


def translate_document(model: TranslationModel, data: bytes, fmt: DocumentFormat, *,
                       placement: Placement = "align", tag: str | None = None,
                       options: Mapping[str, Any] | None = None,
                       terms: Glossary | None = None,
                       decode: Decode | None = None) -> DocumentResult:
    """`data` (a document in `fmt`) translated by `model`: its sentences decoded with
    `options` (DecodeConfig fields) in the usual batches, its markup placed by `placement`
    (the word alignment, or relative position; a model without attention has only the
    latter). `terms`: a glossary (`TranslationModel.glossary`) every sentence's translation
    follows, as a line's would; the markup is then placed by the links of the translation
    with its terms in. `decode`: what decodes the checked sentences (default `model.decode`; the
    server's batcher)."""
    placement = choice("placement", placement, Placement)
    doc = open_document(data, fmt)
    cfg = model.options(dict(options or {}))
    translator = model.translator(cfg)
    limit, encode = translator.max_src_len, translator.tok.encode_src
    extras = link_extras(model, placement)
    aligned = extras.align
    checked_tag = model.checked_tag(tag)
    count = 0

    def translate(lines: list[str]) -> list[tuple[str, list[tuple[int, int]]]]:
        nonlocal count
        count += len(lines)
        out = (decode or model.decode)(lines, cfg, extras, terms=terms, tag=checked_tag)
        return [(t.text, parse_links(t.candidates[0].alignment or "")) for t in out]

    blocks = doc.blocks()
    translated = translate_blocks(
        blocks, translate, placement="align" if aligned else "position",
        splitting=Splitting(too_long=lambda s: len(encode(s)) > limit))
    rendered = doc.render(translated)
    data_out = rendered if isinstance(rendered, bytes) else rendered.encode("utf-8")
    problems = list(getattr(doc, "problems", []))
    if kept := getattr(doc, "kept", 0):
        problems.append(f"{kept} block(s) whose source could not be followed kept as they were")
    return DocumentResult(data_out, count, problems)


def link_extras(model: TranslationModel, placement: Placement) -> Extras:
    """What a document's sentences are decoded with beside their text: the word links markup
    is placed by (`LINKS`), where `placement` is align and the model has attention."""
    aligned = placement == "align" and model.info.has_attention
    align_layer = None
    if aligned and model.info.layers is not None:  # layers to average (see LINKS)
        from mtkit.models.base import LAYER_MEAN

        align_layer = LAYER_MEAN
    return model.extras(align=aligned, align_method=LINKS if aligned else None,
                        align_layer=align_layer)


def parse_links(text: str) -> list[tuple[int, int]]:
    """Pharaoh 'i-j' links as (source i, target j) pairs."""
    links = []
    for pair in text.split():
        i, _, j = pair.partition("-")
        links.append((int(i), int(j)))
    return links


__all__ = ["DOCUMENT_FORMATS", "DocumentFormat", "DocumentResult", "Translate",
           "format_for", "open_document", "translate_document"]
