"""HTML (and XHTML) documents: the text of each block element is a block, its inline elements'
tags are markup in its sentences, and everything else is written back byte for byte.

The document is read by the standard library's tolerant `html.parser` (malformed markup is
read as browsers would, never refused); each event keeps the exact source text it came from,
so the output is the input with only the translated text changed. Left untouched:
`<script>`, `<style>`, `<pre>`, `<textarea>`, `<svg>`, `<math>`, and any element marked
`translate="no"` or `class="notranslate"`; inside a sentence, `<code>`, `<kbd>`, `<samp>`,
`<var>`, such marked inline elements and bare URLs are kept verbatim where the alignment puts
them. The text a reader sees in attributes (`TEXT_ATTRIBUTES`: alt, title, placeholder,
aria-label) is translated, each value a block of its own, and written back in its tag with
its quoting; every other attribute (href, src, class, ...) is never changed.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from html.parser import HTMLParser

from mtkit.documents.inline import Item, Tag, Text

INLINE = frozenset(
    "a abbr b bdi bdo big cite data del dfn em font i ins label mark nobr q rp rt ruby s "
    "small span strike strong sub sup time tt u".split())
VOID = frozenset("br img wbr input area".split())
PROTECTED_INLINE = frozenset("code kbd samp var".split())
OPAQUE = frozenset("script style pre textarea svg math template noscript iframe".split())
# Attributes whose value is text for people (an image's description, a tooltip, a field's
# hint, a screen reader's label); others are addresses, names and data for programs.
TEXT_ATTRIBUTES = frozenset(("alt", "title", "placeholder", "aria-label"))
_TAG_NAME = re.compile(r"<[^\s/>]+")
_ATTR = re.compile(r"""[\s/]+([^\s"'>/=]+)(?:\s*=\s*("[^"]*"|'[^']*'|[^\s"'=<>`]+))?""")
URL = re.compile(r"\b(?:https?://|ftp://|www\.)[^\s<>\"']+[^\s<>\"'.,;:!?)\]]")


@dataclass(frozen=True)
class _Event:
    kind: str  # start, startend, end, data, other
    at: int  # offset in the document
    tag: str = ""
    attrs: tuple[tuple[str, str | None], ...] = ()


class _Events(HTMLParser):
    """Every parser event with the offset it starts at; an event's source text runs to the
    next one's start."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        # the parser counts lines by "\n" alone (not str.splitlines' other breaks)
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.events: list[_Event] = []
        self.feed(text)
        self.close()

    def _add(self, kind: str, tag: str = "", attrs=()) -> None:
        line, col = self.getpos()
        self.events.append(_Event(kind, self._line_starts[line - 1] + col, tag,
                                  tuple(attrs)))

    def handle_starttag(self, tag, attrs):
        self._add("start", tag, attrs)

    def handle_startendtag(self, tag, attrs):
        self._add("startend", tag, attrs)

    def handle_endtag(self, tag):
        self._add("end", tag)

    def handle_data(self, data):
        self._add("data")

    def handle_comment(self, data):
        self._add("other")

    def handle_decl(self, decl):
        self._add("other")

    def unknown_decl(self, data):
        self._add("other")

    def handle_pi(self, data):
        self._add("other")


def _marked_no(ev: _Event) -> bool:
    attrs = dict(ev.attrs)
    return (attrs.get("translate") or "").lower() == "no" or "notranslate" in (
        attrs.get("class") or "").split()


class HtmlDocument:
    """An HTML document's blocks (`blocks`) and the document with them translated
    (`render`)."""

    def __init__(self, text: str) -> None:
        self.text = text
        events = _Events(text).events
        self._raw = [text[ev.at:(events[n + 1].at if n + 1 < len(events) else len(text))]
                     for n, ev in enumerate(events)]
        # a piece before the first event (nothing, for a parser that starts at 0)
        self._head = text[:events[0].at] if events else text
        self._events = events
        self._segments: list[tuple[int, int, list[Item]]] = []
        self._attributes: list[tuple[str, str, str]] = []  # (a tag's source, name, value)
        self._segment()

    def blocks(self) -> list[list[Item]]:
        return ([items for _, _, items in self._segments]
                + [[Text(value)] for _, _, value in self._attributes])

    def render(self, translated: list[list[Item]]) -> str:
        segments, attributes = (translated[:len(self._segments)],
                                translated[len(self._segments):])
        # a tag's source -> with its text attributes translated (one tag source, one text)
        tags: dict[str, str] = {}
        for (raw, name, _), items in zip(self._attributes, attributes, strict=True):
            value = "".join(it.text for it in items if isinstance(it, Text))
            tags[raw] = _with_attribute(tags.get(raw, raw), name, value)

        def tag(raw: str) -> str:
            return tags.get(raw, raw)

        out = [self._head]
        at = 0
        for (start, end, _), items in zip(self._segments, segments, strict=True):
            out.extend(map(tag, self._raw[at:start]))
            out.extend(html.escape(it.text, quote=False) if isinstance(it, Text) else tag(it.raw)
                       for it in items)
            at = end
        out.extend(map(tag, self._raw[at:]))
        return "".join(out)

    def _segment(self) -> None:
        """Runs of text and inline markup between block boundaries become segments."""
        events, n = self._events, 0
        run: list[Item] = []
        run_start = 0
        while n < len(events):
            ev = events[n]
            end = self._skip(n)
            if end is not None and not self._inline(ev):  # an untouched element
                self._close_run(run_start, n, run)
                run, run_start, n = [], end, end
                continue
            if end is not None:  # a protected inline element: one void tag
                run.append(Tag("void", "".join(self._raw[n:end]), ev.tag))
                n = end
                continue
            self._text_attributes(n)
            item = self._item(n)
            if item is None:  # a block boundary
                self._close_run(run_start, n, run)
                run, run_start = [], n + 1
            else:
                run.extend(item)
            n += 1
        self._close_run(run_start, n, run)

    def _close_run(self, start: int, end: int, run: list[Item]) -> None:
        if any(isinstance(it, Text) and it.text.strip() for it in run):
            self._segments.append((start, end, run))

    def _text_attributes(self, n: int) -> None:
        """Event n's text attributes with a value, to translate (once per distinct tag)."""
        ev, raw = self._events[n], self._raw[n]
        if ev.kind not in ("start", "startend"):
            return
        seen = {(r, name) for r, name, _ in self._attributes}
        for name, value in ev.attrs:
            if (name in TEXT_ATTRIBUTES and value and value.strip()
                    and (raw, name) not in seen and _attribute(raw, name)):
                self._attributes.append((raw, name, value))

    @staticmethod
    def _inline(ev: _Event) -> bool:
        return ev.tag in INLINE or ev.tag in PROTECTED_INLINE or ev.tag in VOID

    def _skip(self, n: int) -> int | None:
        """For an element kept whole (opaque, protected, marked), the event after its end;
        else None."""
        ev = self._events[n]
        if ev.kind != "start" or not (ev.tag in OPAQUE or ev.tag in PROTECTED_INLINE
                                      or _marked_no(ev)):
            return None
        if ev.tag in VOID:
            return n + 1
        depth = 0
        for k in range(n, len(self._events)):
            other = self._events[k]
            if other.tag == ev.tag and other.kind in ("start", "end"):
                depth += 1 if other.kind == "start" else -1
                if depth == 0:
                    return k + 1
        return len(self._events)  # never closed: kept to the end

    def _item(self, n: int) -> list[Item] | None:
        """The items of event n inside a run, or None where it ends the run."""
        ev, raw = self._events[n], self._raw[n]
        if ev.kind == "data":
            return _text_items(raw)
        if ev.kind == "other":
            return [Tag("void", raw)]
        if not self._inline(ev):
            return None
        if ev.kind == "startend" or ev.tag in VOID:
            return [Tag("void", raw, ev.tag, space=ev.tag == "br")]
        return [Tag("open" if ev.kind == "start" else "close", raw, ev.tag)]


def _attribute(raw: str, name: str) -> tuple[int, int] | None:
    """Where attribute `name`'s value stands in a tag's source, its quotes included, read
    attribute by attribute from the tag's name on (so that text inside another value is
    never taken for it); the first one, as browsers read a repeated attribute."""
    at = _TAG_NAME.match(raw)
    pos = at.end() if at else len(raw)
    while m := _ATTR.match(raw, pos):
        if m.group(1).lower() == name and m.group(2) is not None:
            return m.span(2)
        pos = m.end()
    return None


def _with_attribute(raw: str, name: str, value: str) -> str:
    """A tag's source with attribute `name`'s value replaced, in its own quotes (double
    where it had none), escaped."""
    span = _attribute(raw, name)
    assert span is not None  # checked when the attribute was taken
    a, b = span
    quote = raw[a] if raw[a] in "\"'" else '"'
    escaped = html.escape(value, quote=False).replace(quote, "&#34;" if quote == '"' else "&#39;")
    return raw[:a] + quote + escaped + quote + raw[b:]


def _text_items(raw: str) -> list[Item]:
    """Text from its source (entities undone), bare URLs kept verbatim as void tags."""
    items: list[Item] = []
    at = 0
    for m in URL.finditer(raw):
        if m.start() > at:
            items.append(Text(html.unescape(raw[at:m.start()])))
        items.append(Tag("void", m.group(), "url"))
        at = m.end()
    if at < len(raw):
        items.append(Text(html.unescape(raw[at:])))
    return items
