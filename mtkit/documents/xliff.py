"""XLIFF 1.2 and 2.x catalogues, through lxml (python-docx's own XML library): every unit
without a translation gets a target, marked as a machine translation to review; units with
one, and units marked translate="no", are left as they were.

Inline codes are kept and placed by the alignment: elements holding translatable text
(`<g>` and `<mrk>` in 1.2, `<pc>` and `<mrk>` in 2.x) are tag pairs around the aligned
words; the others (`<x/>`, `<ph>`, `<bpt>`, `<ept>`, `<it>`, `<bx/>`, `<ex/>`; `<ph/>`,
`<sc/>`, `<ec/>`, `<cp/>`) are copied whole where the alignment puts them. 1.2 targets get
state="needs-review-translation" with state-qualifier="leveraged-mt"; 2.x segments get
state="translated" with subState="mtkit:machine-translation".
"""

from __future__ import annotations

import copy
from typing import Any

from mtkit.documents.inline import Item, Tag, Text
from mtkit.errors import ConfigError, DataError

PAIRED = frozenset({"g", "mrk", "pc"})
_UNTRANSLATED_STATES = frozenset({"new", "needs-translation", "initial"})


def _etree():
    try:
        from lxml import etree
    except ImportError:
        raise ConfigError("XLIFF catalogues need lxml: pip install 'mtkit[documents]'"
                          ) from None
    return etree


def _local(el: Any) -> str:
    return el.tag.rsplit("}", 1)[-1] if isinstance(el.tag, str) else ""


class XliffDocument:
    """An XLIFF catalogue's untranslated sources (`blocks`) and the catalogue with their
    targets written (`render`, bytes)."""

    def __init__(self, data: bytes) -> None:
        etree = _etree()
        try:
            self.tree = etree.fromstring(data, etree.XMLParser(resolve_entities=False))
        except etree.XMLSyntaxError as e:
            raise DataError(f"not an XLIFF catalogue: {e}") from None
        if _local(self.tree) != "xliff":
            raise DataError(f"not an XLIFF catalogue: the root element is <{_local(self.tree)}>")
        self.ns = self.tree.tag[1:].split("}")[0] if self.tree.tag.startswith("{") else ""
        self.v2 = (self.tree.get("version") or "").startswith("2")
        self._sources: list[Any] = []  # each untranslated unit's <source>
        for unit in self.tree.iter(self._q("segment" if self.v2 else "trans-unit")):
            owner = unit.getparent() if self.v2 else unit
            if (owner.get("translate") or "yes") == "no":
                continue
            source, target = unit.find(self._q("source")), unit.find(self._q("target"))
            if source is None or not "".join(source.itertext()).strip():
                continue
            if target is None or not "".join(target.itertext()).strip() or (
                    (target.get("state") or unit.get("state") or "") in _UNTRANSLATED_STATES):
                self._sources.append(source)

    def _q(self, name: str) -> str:
        return f"{{{self.ns}}}{name}" if self.ns else name

    def blocks(self) -> list[list[Item]]:
        return [_items(source) for source in self._sources]

    def render(self, translated: list[list[Item]]) -> bytes:
        etree = _etree()
        for source, items in zip(self._sources, translated, strict=True):
            unit = source.getparent()
            target = unit.find(self._q("target"))
            if target is None:
                target = etree.Element(self._q("target"))
                source.addnext(target)
                target.tail, source.tail = source.tail, source.tail
            _fill(target, items)
            if self.v2:
                unit.set("state", "translated")
                unit.set("subState", "mtkit:machine-translation")
            else:
                target.set("state", "needs-review-translation")
                target.set("state-qualifier", "leveraged-mt")
        return etree.tostring(self.tree.getroottree(), xml_declaration=True, encoding="UTF-8")


def _items(el: Any) -> list[Item]:
    """A <source>'s content: its text, paired inline elements as tag pairs, the others void."""
    items: list[Item] = [Text(el.text)] if el.text else []
    for child in el:
        name = _local(child)
        if name in PAIRED and (child.get("mtype") or "") != "protected":
            items.append(Tag("open", f"<{name}>", name, data=child))
            items.extend(_items(child))
            items.append(Tag("close", f"</{name}>", name))
        elif name:
            items.append(Tag("void", f"<{name}/>", name, data=child))
        if child.tail:
            items.append(Text(child.tail))
    return items


def _fill(target: Any, items: list[Item]) -> None:
    """`target`'s content made from translated items: pairs as shallow copies of their
    source elements, void ones copied whole."""
    for child in list(target):
        target.remove(child)
    target.text = None
    stack = [target]
    last: Any = None  # the element whose tail the next text goes to (None: stack top's text)
    for it in items:
        top = stack[-1]
        if isinstance(it, Text):
            if last is None:
                top.text = (top.text or "") + it.text
            else:
                last.tail = (last.tail or "") + it.text
        elif it.kind == "close":
            last = stack.pop()
        else:
            el = copy.deepcopy(it.data) if it.kind == "void" else it.data.makeelement(
                it.data.tag, it.data.attrib)
            el.tail = None
            if it.kind == "open":
                el.text = None
            top.append(el)
            if it.kind == "open":
                stack.append(el)
                last = None
            else:
                last = el
