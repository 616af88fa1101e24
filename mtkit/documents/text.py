"""Plain text as paragraphs: each line (`lines`) or each run of lines between blank lines
(`paragraphs`) is a block, split into sentences and rejoined with its own spacing; blank
lines, and the line breaks between paragraphs, are kept."""

from __future__ import annotations

import re

from mtkit.documents.inline import Item, Text

_BLANK_RUN = re.compile(r"((?:\r?\n)[ \t]*(?:\r?\n)(?:[ \t]*\r?\n)*)")


class TextDocument:
    """Plain text's paragraphs (`blocks`) and the text with them translated (`render`)."""

    def __init__(self, text: str, *, paragraphs: bool) -> None:
        # pieces alternate: text, separator, text, ... (a separator is kept as it is)
        if paragraphs:
            self._pieces = _BLANK_RUN.split(text)
        else:
            self._pieces = re.split(r"(\r?\n)", text)
        self._text = list(range(0, len(self._pieces), 2))

    def blocks(self) -> list[list[Item]]:
        return [[Text(self._pieces[k])] for k in self._text]

    def render(self, translated: list[list[Item]]) -> str:
        pieces = list(self._pieces)
        for k, items in zip(self._text, translated, strict=True):
            pieces[k] = "".join(it.text for it in items if isinstance(it, Text))
        return "".join(pieces)
