"""Gettext catalogues (PO and POT), read and written by polib: every untranslated message
filled and flagged fuzzy (a translator's review is still owed), the rest left as they were.

In a message, printf and brace placeholders (`%s`, `%(name)s`, `%1$d`, `{count}`), line
breaks and HTML tags are markup: kept verbatim and placed by the alignment. A message with a
plural form gets its singular's translation in msgstr[0] and its plural's in every other form
(as many as the catalogue's Plural-Forms header says, two where it says nothing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from mtkit.documents.inline import Item, Tag, Text
from mtkit.errors import ConfigError, DataError

_MARKUP = re.compile(r"%(?:\(\w+\)|\d+\$)?[-+ #0]*\d*(?:\.\d+)?[sdifuxXoeEgGcr%]"
                     r"|\{[\w.\[\]]*(?:![rsa])?(?::[^{}]*)?\}|</?[A-Za-z][^<>]*>|\n")
_NPLURALS = re.compile(r"nplurals\s*=\s*(\d+)")


def _polib():
    try:
        import polib
    except ImportError:
        raise ConfigError("PO catalogues need polib: pip install 'mtkit[documents]'") from None
    return polib


@dataclass
class _Unit:
    entry: Any  # a polib.POEntry
    plural: bool  # the block is its msgid_plural


class PoDocument:
    """A PO catalogue's untranslated messages (`blocks`: a message's singular, then its
    plural), and the catalogue with them filled (`render`)."""

    def __init__(self, text: str) -> None:
        polib = _polib()
        try:
            self.po = polib.pofile(text)
        except (OSError, ValueError) as e:
            raise DataError(f"not a PO catalogue: {e}") from None
        self._units: list[_Unit] = []
        for entry in self.po:
            if entry.obsolete or entry.translated() or not entry.msgid:
                continue
            self._units.append(_Unit(entry, False))
            if entry.msgid_plural:
                self._units.append(_Unit(entry, True))

    @property
    def nplurals(self) -> int:
        m = _NPLURALS.search(self.po.metadata.get("Plural-Forms", ""))
        return int(m.group(1)) if m else 2

    def blocks(self) -> list[list[Item]]:
        return [_items(u.entry.msgid_plural if u.plural else u.entry.msgid)
                for u in self._units]

    def render(self, translated: list[list[Item]]) -> str:
        for unit, items in zip(self._units, translated, strict=True):
            text = "".join(it.text if isinstance(it, Text) else it.raw for it in items)
            entry = unit.entry
            if entry.msgid_plural:
                forms = range(1, self.nplurals) if unit.plural else range(1)
                for k in forms:
                    entry.msgstr_plural[k] = text
            else:
                entry.msgstr = text
            if "fuzzy" not in entry.flags:
                entry.flags.append("fuzzy")
        return str(self.po)


def _items(message: str) -> list[Item]:
    items: list[Item] = []
    at = 0
    for m in _MARKUP.finditer(message):
        if m.start() > at:
            items.append(Text(message[at:m.start()]))
        raw = m.group()
        if raw.startswith("</"):
            items.append(Tag("close", raw, raw[2:-1].strip().lower()))
        elif raw.startswith("<") and not raw.endswith("/>"):
            items.append(Tag("open", raw, re.split(r"[\s>]", raw[1:])[0].lower()))
        else:
            items.append(Tag("void", raw, "placeholder", space=raw == "\n"))
        at = m.end()
    if at < len(message):
        items.append(Text(message[at:]))
    return items
