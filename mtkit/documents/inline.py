"""Inline markup as a format reader gives it and as a writer takes it back: a block is a
sequence of `Text` (plain text, entities and escapes already undone) and `Tag` (markup kept
verbatim: an opening or closing tag, or a `void` one that holds no text: a self-closing tag,
a span that must not be translated such as `<code>...</code>`, a subtitle cue's boundary).

`take_out` turns a block into its plain text and a tree of the markup over it, counted in the
plain text's whitespace words (the words mtkit's word alignment links): what `place` puts
back around the translation's words.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

TagKind = Literal["open", "close", "void"]


@dataclass(frozen=True)
class Text:
    """Plain text of a block (for a reader) or of its translation (for a writer)."""

    text: str


@dataclass(frozen=True)
class Tag:
    """Markup kept byte for byte (`raw`). `name` pairs an opening tag with its closing one;
    `data` is the reader's own (a docx run, a cue number) and travels with the tag; `space`:
    a void tag that separates words as a space does (a line break)."""

    kind: TagKind
    raw: str
    name: str = ""
    data: Any = field(default=None, compare=False)
    space: bool = False


Item = Text | Tag

# The name of a void tag that divides a block into the writer's units (subtitle cues): placed
# like any void tag, but never before the one ahead of it.
BREAK = "break"

_WORD = re.compile(r"\S+")


@dataclass
class Node:
    """A markup span over source words [start, end) (a pair of tags, or the whole block at
    the root), or a void tag at the gap before source word `start` (start == end). `glue`:
    for a void, which neighbour it touched in the source: 'left' (no space before it),
    'right' (space before, none after), 'none' (spaces on both sides: it stands as a word)
    or 'both' (it is a space itself: a line break).
    `children` in source order."""

    open: Tag | None
    close: Tag | None
    start: int
    end: int
    children: list[Node] = field(default_factory=list)
    glue: Literal["left", "right", "none", "both"] = "left"

    @property
    def void(self) -> bool:
        return self.close is None and self.open is not None and self.open.kind == "void"


@dataclass
class Source:
    """A block with its markup taken out: the plain text, its whitespace words' character
    spans, and the markup tree (`root` spans every word)."""

    plain: str
    words: list[tuple[int, int]]
    root: Node
    virtual: frozenset[int] = frozenset()  # offsets of the spaces void tags stand for
    marked: tuple[int, int] | None = None  # the offsets of the first and the last tag

    @property
    def lead(self) -> str:
        """The whitespace before the first word and the first tag (all of a blank block)."""
        end = self.words[0][0] if self.words else len(self.plain)
        return self._real(0, min(end, self.marked[0]) if self.marked else end)

    @property
    def trail(self) -> str:
        """The whitespace after the last word and the last tag."""
        if not self.words:
            return ""
        start = self.words[-1][1]
        return self._real(max(start, self.marked[1]) if self.marked else start,
                          len(self.plain))

    def _real(self, a: int, b: int) -> str:
        return "".join(c for k, c in enumerate(self.plain[a:b], a) if k not in self.virtual)


def plain_text(items: Sequence[Item]) -> str:
    return "".join(it.text for it in items if isinstance(it, Text))


def balanced(items: Sequence[Item]) -> list[Item]:
    """`items` with every closing tag that closes nothing open, and every opening tag never
    closed, turned into a void tag at its place (kept, not paired): what malformed markup
    becomes. Tags close in nesting order; a closing tag of an element opened further out
    closes the ones inside it first only if they are closed later anyway, else they turn
    void."""
    out: list[Item] = list(items)
    stack: list[tuple[int, Tag]] = []  # the open tags: their places and themselves
    for n, it in enumerate(out):
        if not isinstance(it, Tag) or it.kind == "void":
            continue
        if it.kind == "open":
            stack.append((n, it))
            continue
        if it.name not in [tag.name for _, tag in stack]:
            out[n] = _voided(it)
            continue
        while stack[-1][1].name != it.name:
            k, tag = stack.pop()
            out[k] = _voided(tag)
        stack.pop()
    for k, tag in stack:
        out[k] = _voided(tag)
    return out


def _voided(tag: Tag) -> Tag:
    return Tag("void", tag.raw, tag.name, tag.data, tag.space)


def take_out(items: Sequence[Item]) -> Source:
    """The plain text of a block and its markup tree (`balanced` first: a tag is never
    lost). A span that touches part of a word covers the whole word; a span over no word
    becomes zero-width at its place."""
    items = balanced(items)
    plain: list[str] = []
    at = 0
    marks: list[tuple[Tag, int]] = []  # each tag and the plain offset it sits at
    virtual = set()
    for it in items:
        if isinstance(it, Text):
            plain.append(it.text)
            at += len(it.text)
        else:
            marks.append((it, at))
            if it.kind == "void" and it.space:
                plain.append(" ")
                virtual.add(at)
                at += 1
    text = "".join(plain)
    words = [m.span() for m in _WORD.finditer(text)]
    starts, ends = [a for a, _ in words], [e for _, e in words]
    root = Node(None, None, 0, len(words))
    stack = [root]
    for tag, offset in marks:
        if tag.kind == "open":
            node = Node(tag, None, _first_word(ends, offset), 0)
            stack[-1].children.append(node)
            stack.append(node)
        elif tag.kind == "close":
            node = stack.pop()
            node.close = tag
            node.end = max(node.start, _gap(starts, offset))
            if node.end == node.start:  # no word inside: a zero-width pair at its gap
                node.start = node.end = _gap(starts, offset)
        else:
            gap = _gap(starts, offset)
            glue = "both" if tag.space else _glue(text, offset)
            stack[-1].children.append(Node(tag, None, gap, gap, glue=glue))
    marked = (marks[0][1], marks[-1][1]) if marks else None
    return Source(text, words, root, frozenset(virtual), marked)


def _first_word(ends: list[int], offset: int) -> int:
    """The first word ending after `offset` (the one an opening tag there starts)."""
    return bisect_right(ends, offset)


def _gap(starts: list[int], offset: int) -> int:
    """How many words start before `offset`: one past the last word a closing tag there
    ends, and the gap a void tag there sits in (a tag inside a word goes after that word)."""
    return bisect_left(starts, offset)


def _glue(text: str, offset: int) -> Literal["left", "right", "none"]:
    """Which neighbour a void tag at `offset` touches: see `Node.glue` (the block's start
    and end count as spaces)."""
    if offset > 0 and not text[offset - 1].isspace():
        return "left"
    if offset < len(text) and not text[offset].isspace():
        return "right"
    return "none"
