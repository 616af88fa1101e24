"""Markdown documents, read by markdown-it-py (CommonMark, with tables): each paragraph,
heading and table cell is a block; emphasis, links and inline HTML are markup in its
sentences; inline code, autolinks and images are kept verbatim where the alignment puts them;
an HTML block is translated as HTML (`mtkit.documents.html`: its block elements' text and
text attributes); code blocks and every line outside a block's text are written back byte
for byte. Front matter (a first line `---` or `+++` up to the same line again, or `...`
after `---`) is kept as it is: it is data for a site generator (layout, dates, slugs, tags),
which of its keys a reader sees depends on the generator, and YAML or TOML values would need
their own quoting; CommonMark alone would read it as a rule and a heading to translate.

markdown-it gives each block's source lines and its inline source (`content`) but no
position inside it, so the inline source is walked alongside the parser's tokens: each
token's text is found where the parser read it (escapes and entities undone), which gives
every piece of markup its exact source. A block whose walk does not agree with its source
is kept untranslated and counted (`MarkdownDocument.kept`), never guessed at.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from mtkit.documents.html import HtmlDocument
from mtkit.documents.inline import Item, Tag, Text
from mtkit.errors import ConfigError

_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_HTML_OPEN = re.compile(r"<([A-Za-z][A-Za-z0-9-]*)(?:\s[^>]*)?>$")
_HTML_CLOSE = re.compile(r"</([A-Za-z][A-Za-z0-9-]*)\s*>$")
_ESCAPE = re.compile(r"([\\`*_\[\]<])")
_LINE_START = re.compile(r"^(?:[#>+-]|\d+(?=[.)]))")


def _parser():
    try:
        from markdown_it import MarkdownIt
    except ImportError:
        raise ConfigError("Markdown documents need markdown-it-py: pip install "
                          "'mtkit[documents]'") from None
    return MarkdownIt("commonmark").enable("table")


def _front_matter(lines: list[str]) -> int:
    """How many lines the front matter at the top takes (0: none): `---` (YAML) up to `---`
    or `...`, or `+++` (TOML) up to `+++`, each alone on its line."""
    if not lines or lines[0].rstrip() not in ("---", "+++"):
        return 0
    ends = ("---", "...") if lines[0].rstrip() == "---" else ("+++",)
    for n in range(1, len(lines)):
        if lines[n].rstrip() in ends:
            return n + 1
    return 0  # never closed: no front matter (a rule, as CommonMark reads it)


class _Mismatch(Exception):
    """The inline source does not read as the parser's tokens say."""


@dataclass
class _Block:
    items: list[Item]
    places: list[tuple[int, int, int]]  # each content line's (source line, start, end)


class MarkdownDocument:
    """A Markdown document's blocks (`blocks`) and the document with them translated
    (`render`). `kept`: blocks left as they were (their source could not be walked)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self._blocks: list[_Block] = []
        self._taken: dict[int, int] = {}  # a line's end of the last block found on it
        self._html: list[tuple[int, int, HtmlDocument]] = []  # HTML blocks: lines [a, b)
        self.kept = 0
        front = _front_matter(self.lines)
        # the front matter's lines read as blank ones: the line numbers stay the document's
        body = "\n" * front + "".join(self.lines[front:])
        for token in _parser().parse(body):
            if token.type == "inline" and token.map and token.content.strip():
                self._add(token)
            elif token.type == "html_block" and token.map:
                a, b = token.map
                self._html.append((a, b, HtmlDocument("".join(self.lines[a:b]))))

    def blocks(self) -> list[list[Item]]:
        return [b.items for b in self._blocks] + [
            items for _, _, doc in self._html for items in doc.blocks()]

    def render(self, translated: list[list[Item]]) -> str:
        lines = self._render_text(translated[:len(self._blocks)])
        rest = translated[len(self._blocks):]
        for a, b, doc in self._html:
            n = len(doc.blocks())
            lines[a:b] = [doc.render(rest[:n])] + [""] * (b - a - 1)
            rest = rest[n:]
        return "".join(lines)

    def _render_text(self, translated: list[list[Item]]) -> list[str]:
        lines = list(self.lines)
        edits: dict[int, list[tuple[int, int, str]]] = {}
        dropped: set[int] = set()
        for block, items in zip(self._blocks, translated, strict=True):
            first, *rest = block.places
            edits.setdefault(first[0], []).append((first[1], first[2], _markdown(items)))
            for line, a, b in rest:  # later lines' text moved to the first line
                edits.setdefault(line, []).append((a, b, ""))
                dropped.add(line)
        for line, changes in edits.items():
            text = lines[line]
            for a, b, new in sorted(changes, reverse=True):
                text = text[:a] + new + text[b:]
            if line in dropped and not text.strip(" \t>\r\n"):
                text = ""
            lines[line] = text
        return lines

    def _add(self, token) -> None:
        places = self._places(token.map[0], token.content.split("\n"))
        if places is None:
            self.kept += 1
            return
        prefixes = [self.lines[line][:a] for line, a, _ in places]
        try:
            items = _Walk(token.content, prefixes).items(token.children or [])
        except _Mismatch:
            self.kept += 1
            return
        self._blocks.append(_Block(items, places))

    def _places(self, first: int, content_lines: list[str]
                ) -> list[tuple[int, int, int]] | None:
        """Where each line of an inline source sits in the document; None where one is not
        found. Blocks sharing a line (a table row's cells) are found left to right."""
        places, line = [], first
        for part in content_lines:
            start = self._taken.get(line, 0)  # a cell after another on the same line
            while line < len(self.lines) and (col := self.lines[line].find(part, start)) < 0:
                line, start = line + 1, 0
            if line >= len(self.lines):
                return None
            places.append((line, col, col + len(part)))
            line += 1
        for ln, _, end in places:
            self._taken[ln] = end
        return places


class _Walk:
    """The tokens of one inline source, each with the source text it was read from."""

    def __init__(self, raw: str, prefixes: list[str]) -> None:
        self.raw, self.pos, self.prefixes, self.line = raw, 0, prefixes, 0

    def items(self, children) -> list[Item]:
        out: list[Item] = []
        n = 0
        while n < len(children):
            tok = children[n]
            if tok.type == "link_open" and tok.markup == "autolink":
                start = self.pos
                self._expect("<")
                end = self.raw.index(">", self.pos) + 1
                self.pos = end
                out.append(Tag("void", self.raw[start:end], "autolink"))
                n += 3  # the link's text and close are in that one piece
                continue
            out.extend(self._one(tok))
            n += 1
        if self.raw[self.pos:].strip():
            raise _Mismatch(self.raw[self.pos:])
        return out

    def _one(self, tok) -> list[Item]:
        kind = tok.type
        if kind == "text":
            self._text(tok.content)
            return [Text(tok.content)] if tok.content else []
        if kind == "softbreak":
            self._newline()
            return [Text(" ")]
        if kind == "hardbreak":
            start = self.pos
            self._newline()
            raw = self.raw[start:self.pos].rstrip(" ") + self.prefixes[self.line]
            return [Tag("void", raw, "br", space=True)]
        if kind in ("em_open", "strong_open", "em_close", "strong_close"):
            start = self.pos
            self._expect(tok.markup)
            name = kind.rsplit("_", 1)[0]
            return [Tag("open" if kind.endswith("open") else "close",
                        self.raw[start:self.pos], name)]
        if kind == "code_inline":
            return [Tag("void", self._code(tok.markup), "code")]
        if kind == "link_open":
            start = self.pos
            self._expect("[")
            return [Tag("open", self.raw[start:self.pos], "link")]
        if kind == "link_close":
            return [Tag("close", self._destination(), "link")]
        if kind == "image":
            start = self.pos
            self._expect("![")
            self.pos = _matching(self.raw, self.pos)
            self._destination()
            return [Tag("void", self.raw[start:self.pos], "image")]
        if kind == "html_inline":
            start = self.pos
            self._expect(tok.content)
            return [_html_tag(self.raw[start:self.pos])]
        raise _Mismatch(kind)

    def _expect(self, s: str) -> None:
        if not self.raw.startswith(s, self.pos):
            raise _Mismatch(s)
        self.pos += len(s)

    def _text(self, content: str) -> None:
        """Past the source of text `content`: characters as they are, backslash escapes,
        entities."""
        raw, k = self.raw, 0
        while k < len(content):
            c = content[k]
            if (m := _ENTITY.match(raw, self.pos)) and content.startswith(
                    value := html.unescape(m.group()), k):
                self.pos, k = m.end(), k + len(value)
            elif raw.startswith(c, self.pos):
                self.pos, k = self.pos + 1, k + 1
            elif raw.startswith("\\" + c, self.pos):
                self.pos, k = self.pos + 2, k + 1
            else:
                raise _Mismatch(content[k:])

    def _newline(self) -> None:
        while self.raw.startswith((" ", "\\"), self.pos):
            self.pos += 1
        self._expect("\n")
        self.line += 1

    def _code(self, ticks: str) -> str:
        start = self.pos
        self._expect(ticks)
        end = self.raw.find(ticks, self.pos)
        while end >= 0 and self.raw.startswith("`", end + len(ticks)):
            end = self.raw.find(ticks, end + len(ticks) + 1)
        if end < 0:
            raise _Mismatch(ticks)
        self.pos = end + len(ticks)
        return self.raw[start:self.pos]

    def _destination(self) -> str:
        """The source of a link's end: ']', with '(destination "title")' or '[label]'."""
        start = self.pos
        self._expect("]")
        if self.raw.startswith("(", self.pos):
            self.pos = _matching(self.raw, self.pos + 1, "(", ")")
        elif self.raw.startswith("[", self.pos):
            self.pos = self.raw.index("]", self.pos) + 1
        return self.raw[start:self.pos]


def _matching(raw: str, pos: int, open_: str = "[", close: str = "]") -> int:
    """The offset after the `close` that ends a bracket opened just before `pos` (escapes and
    nesting respected); for ']' it is not consumed, so the caller reads the destination."""
    depth = 1
    k = pos
    while k < len(raw):
        c = raw[k]
        if c == "\\":
            k += 2
            continue
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return k if close == "]" else k + 1
        k += 1
    raise _Mismatch(close)


def _html_tag(raw: str) -> Tag:
    if m := _HTML_OPEN.match(raw):
        return Tag("open", raw, m.group(1).lower())
    if m := _HTML_CLOSE.match(raw):
        return Tag("close", raw, m.group(1).lower())
    return Tag("void", raw, "html")


def _markdown(items: list[Item]) -> str:
    """A translated block as Markdown source: text escaped where it would read as markup,
    at the start of a line too ('# ', '- ', '1. ' would start a heading or a list)."""
    out: list[str] = []
    line_start = True
    for it in items:
        if isinstance(it, Tag):
            out.append(it.raw)
            line_start = line_start and not it.raw.strip() or "\n" in it.raw
            continue
        text = _ESCAPE.sub(r"\\\1", it.text)
        stripped = text.lstrip()
        if line_start and (m := _LINE_START.match(stripped)):
            k = len(text) - len(stripped) + (m.end() if m.group()[0].isdigit() else 0)
            text = text[:k] + "\\" + text[k:]
        out.append(text)
        line_start = line_start and not text.strip()
    return "".join(out)
