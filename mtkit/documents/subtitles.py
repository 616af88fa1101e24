"""Subtitles, SRT and WebVTT: every cue's number, timing line and settings written back as
they were; the text of all cues read as one stream, so that a sentence spanning cues is
translated whole, and its translation shared out again among those cues at the target words
aligned to the cue boundaries (`BREAK` tags), each cue keeping its number of lines.

Both formats are read here (each is a few rules; no dependency): a block of lines whose
first or second line holds '-->' is a cue; in WebVTT the header and NOTE, STYLE and REGION
blocks are kept. Timings are never interpreted, so a broken one is kept as it is and named
in `problems`; a block that is no cue is kept untranslated and named too.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from mtkit.documents.inline import BREAK, Item, Tag, Text

_SRT_TIME = re.compile(r"^\s*\d{1,3}:\d{2}:\d{2}[,.]\d{1,3}\s*-->\s*\d{1,3}:\d{2}:\d{2}[,.]\d{1,3}")
_VTT_TIME = re.compile(r"^\s*(?:\d+:)?\d{2}:\d{2}\.\d{3}\s+-->\s+(?:\d+:)?\d{2}:\d{2}\.\d{3}")
_CUE_TAG = re.compile(r"<[^<>\n]*>|\{\\[^{}\n]*\}")  # <i>, </i>, <c.x>, <00:01.000>, {\an8}


@dataclass
class _Cue:
    timing: int  # the document line of its timing
    text_lines: range  # the document lines holding its text
    items: list[Item]


class SubtitleDocument:
    """An SRT (`vtt=False`) or WebVTT document: one block, every cue's text in order with a
    break between cues (`blocks`), and the document with it translated (`render`)."""

    def __init__(self, text: str, *, vtt: bool) -> None:
        self.vtt = vtt
        self.lines = text.splitlines(keepends=True)
        self.cues: list[_Cue] = []
        self.problems: list[str] = []
        self._read()

    def blocks(self) -> list[list[Item]]:
        if not self.cues:
            return []
        block: list[Item] = []
        for n, cue in enumerate(self.cues):
            if n:
                block.extend([Text(" "), Tag("void", "", BREAK, data=n), Text(" ")])
            block.extend(cue.items)
        return [block]

    def render(self, translated: list[list[Item]]) -> str:
        lines = list(self.lines)
        if not self.cues:
            return "".join(lines)
        per_cue: list[list[Item]] = [[]]
        for it in translated[0]:
            if isinstance(it, Tag) and it.name == BREAK:
                per_cue.append([])
            else:
                per_cue[-1].append(it)
        for cue, items in zip(self.cues, per_cue, strict=True):
            slots = list(cue.text_lines)
            ending = _ending(lines[slots[-1]] if slots else lines[cue.timing])
            new = [t for t in _wrapped(items, max(1, len(slots)), escape=self.vtt) if t]
            text = "".join(t + ending for t in new)
            if slots:  # the cue's text on its first line(s); the others emptied
                lines[slots[0]] = text
                for k in slots[1:]:
                    lines[k] = ""
            elif text:  # a cue that had no text and got some: after its timing
                lines[cue.timing] += text
        return "".join(lines)

    def _read(self) -> None:
        for start, end in _blocks(self.lines):
            first = self.lines[start].strip()
            if self.vtt and (start == 0 and first.startswith("WEBVTT")
                             or first.split(" ")[0] in ("NOTE", "STYLE", "REGION")):
                continue
            timing = next((k for k in (start, start + 1) if k < end
                           and "-->" in self.lines[k]), None)
            if timing is None:
                self.problems.append(f"line {start + 1}: no timing line ('-->'); kept as "
                                     "it was")
                continue
            if not (_VTT_TIME if self.vtt else _SRT_TIME).match(self.lines[timing]):
                self.problems.append(f"line {timing + 1}: timing "
                                     f"{self.lines[timing].strip()!r} is not well formed; "
                                     "kept as it was")
            text = [self.lines[k].rstrip("\r\n") for k in range(timing + 1, end)]
            self.cues.append(_Cue(timing, range(timing + 1, end), self._items(text)))

    def _items(self, lines: list[str]) -> list[Item]:
        items: list[Item] = []
        for n, line in enumerate(lines):
            if n:
                items.append(Text(" "))
            at = 0
            for m in _CUE_TAG.finditer(line):
                if m.start() > at:
                    items.append(Text(self._text(line[at:m.start()])))
                items.append(_tag(m.group()))
                at = m.end()
            if at < len(line):
                items.append(Text(self._text(line[at:])))
        return items

    def _text(self, raw: str) -> str:
        return html.unescape(raw) if self.vtt else raw


def _blocks(lines: list[str]) -> list[tuple[int, int]]:
    """The runs of non-blank lines, as [start, end) line numbers."""
    out, start = [], None
    for k, line in enumerate(lines):
        if line.strip():
            start = k if start is None else start
        elif start is not None:
            out.append((start, k))
            start = None
    if start is not None:
        out.append((start, len(lines)))
    return out


def _tag(raw: str) -> Tag:
    if raw.startswith("</"):
        return Tag("close", raw, raw[2:-1].split(".")[0].strip().lower())
    if raw.startswith("<") and raw[1:2].isalpha():
        return Tag("open", raw, re.split(r"[.\s>]", raw[1:])[0].lower())
    return Tag("void", raw)  # a timestamp or an ASS override: kept where it was


def _ending(line: str) -> str:
    return line[len(line.rstrip("\r\n")):] or "\n"


def _wrapped(items: list[Item], n_lines: int, *, escape: bool) -> list[str]:
    """A cue's translated text on `n_lines` lines of about equal length, broken at spaces
    of its text only (never inside a tag)."""
    pieces: list[str] = []
    breaks: list[int] = []  # offsets of spaces that may become line breaks
    at = 0
    for it in items:
        if isinstance(it, Text):
            text = html.escape(it.text, quote=False) if escape else it.text
            breaks.extend(at + m.start() for m in re.finditer(" ", text))
        else:
            text = it.raw
        pieces.append(text)
        at += len(text)
    line = "".join(pieces)
    stripped = line.strip()
    if n_lines == 1 or not stripped:
        return [stripped]
    lead = len(line) - len(line.lstrip())
    breaks = [b - lead for b in breaks if lead < b < lead + len(stripped)]
    cuts: list[int] = []
    for k in range(1, n_lines):
        target = len(stripped) * k / n_lines
        cands = [b for b in breaks if not cuts or b > cuts[-1]]
        if cands:
            cuts.append(min(cands, key=lambda b: abs(b - target)))
    edges = [0, *cuts, len(stripped)]
    return [stripped[a:b].strip() for a, b in zip(edges, edges[1:], strict=False)]
