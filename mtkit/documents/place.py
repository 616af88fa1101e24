"""Markup put back into a translation: each tag pair around the target words aligned to the
source words it enclosed, as a translator would (the approach of Hanneman & Dinu 2020, "How
should markup tags be translated?", and of Bergamot's HTML mode).

For a span over source words [s, e), the target words linked to any of them give its target
range [min, max + 1). Where none is linked, or the range falls outside its parent's, the
fallback is the span's relative position: [round(s T / S), round(e T / S)), at least one word
wide (S, T: source and target word counts). Nesting is kept valid by construction: a child's
range is clipped to its parent's, siblings are ordered by their target start and trimmed
where they overlap, and a void tag (no text inside) goes after the target word linked to the
source word before it (or before the one linked to the word after it), moved to the nearest
edge of a sibling span it would cut.

`method="position"` places everything by the fallback, for comparison (bench/documents.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, get_args

from mtkit.documents.inline import BREAK, Item, Node, Source, Tag, Text

Placement = Literal["align", "position"]
PLACEMENTS: tuple[Placement, ...] = get_args(Placement)
Link = tuple[int, int]


@dataclass
class Placed:
    """A markup node at its target range [a, b) (a void tag: a == b, the gap before target
    word a), its children ordered and inside it."""

    node: Node
    a: int
    b: int
    children: list[Placed] = field(default_factory=list)


class _Links:
    """The links of one block, by source word."""

    def __init__(self, links: Iterable[Link], n_src: int, n_tgt: int) -> None:
        self.by_src: dict[int, list[int]] = {}
        for i, j in links:
            if 0 <= i < n_src and 0 <= j < n_tgt:
                self.by_src.setdefault(i, []).append(j)
        self.n_src, self.n_tgt = n_src, n_tgt

    def targets(self, s: int, e: int) -> list[int]:
        return [j for i in range(s, e) for j in self.by_src.get(i, ())]

    def first_source(self) -> dict[int, int]:
        """Each linked target word's first source word."""
        first: dict[int, int] = {}
        for i in sorted(self.by_src):
            for j in self.by_src[i]:
                first.setdefault(j, i)
        return first

    def relative(self, k: int) -> int:
        """Source gap k's relative position in the target."""
        return round(k * self.n_tgt / self.n_src) if self.n_src else 0


def place(source: Source, n_tgt: int, links: Iterable[Link], *,
          method: Placement = "align") -> Placed:
    """The markup tree of `source` placed over a translation of `n_tgt` words whose word
    links to it are `links` (block-level (source i, target j))."""
    table = _Links(links if method == "align" else (), len(source.words), n_tgt)
    root = Placed(source.root, 0, n_tgt)
    _place_children(root, table)
    return root


def _place_children(parent: Placed, links: _Links) -> None:
    spans = [_span(child, parent, links) for child in parent.node.children if not child.void]
    spans.sort(key=lambda p: (p.a, p.b))
    end = parent.a
    for p in spans:  # siblings in target order, none overlapping
        if p.a < end:
            p.a = min(end, parent.b)
            p.b = max(p.b, p.a)
        end = p.b
    voids = [_void(child, parent, spans, links) for child in parent.node.children
             if child.void]
    breaks = [v for v in voids if v.node.open is not None and v.node.open.name == BREAK]
    _in_order(breaks, parent, spans, links)
    order = {id(child): n for n, child in enumerate(parent.node.children)}
    parent.children = sorted([*spans, *voids], key=lambda p: (p.a, p.b > p.a,
                                                              order[id(p.node)]))
    for p in spans:
        _place_children(p, links)


def _in_order(breaks: list[Placed], parent: Placed, spans: list[Placed], links: _Links
              ) -> None:
    """Breaks (in source order) placed where the fewest target words fall on the wrong side
    of them (a word linked to the source before a break belongs before it), never before the
    break ahead, a unit that had words keeping one where the translation has words to spare;
    a break over unlinked words goes at its relative place within them."""
    if not breaks:
        return
    first = links.first_source()
    last = [-1]  # last[i]: the last target word linked to a source word before i
    for i in range(links.n_src):
        last.append(max([last[-1], *links.by_src.get(i, ())]))
    starts = [p.node.start for p in breaks] + [parent.node.end]
    # how many of the units after each break had words: each keeps one where it can
    later = [0] * len(breaks)
    for n in range(len(breaks) - 1, -1, -1):
        later[n] = (starts[n + 1] > starts[n]) + (later[n + 1] if n + 1 < len(breaks) else 0)
    prev_gap, prev_src = parent.a, parent.node.start
    for n, p in enumerate(breaks):
        b = p.node.start
        room = max(parent.b - later[n], prev_gap)
        lo = min(prev_gap + (1 if b > prev_src and prev_gap < room else 0), room)
        hi = min(room, max(last[b] + 1, lo))
        # cost(g) - cost(lo): +1 for each word before g linked after the break, -1 before it
        best, cost, gap = 0, 0, lo
        relative = min(max(links.relative(b), lo), hi)
        for j in range(lo, hi):
            src = first.get(j)
            cost += 0 if src is None else (1 if src >= b else -1)
            if cost < best or cost == best and abs(j + 1 - relative) < abs(gap - relative):
                best, gap = cost, j + 1
        for s in spans:  # never inside a span: past it
            if s.a < gap < s.b:
                gap = s.b
        p.a = p.b = gap
        prev_gap, prev_src = gap, b


def _span(node: Node, parent: Placed, links: _Links) -> Placed:
    """A tag pair's target range, inside its parent's."""
    lo, hi = parent.a, parent.b
    if node.start == node.end:  # zero-width pair: a gap, like a void tag
        gap = min(max(_gap(node, links), lo), hi)
        return Placed(node, gap, gap)
    hits = [j for j in links.targets(node.start, node.end) if lo <= j < hi]
    if hits:
        return Placed(node, min(hits), max(hits) + 1)
    a = min(max(links.relative(node.start), lo), hi)
    b = min(max(links.relative(node.end), a + 1), hi)
    if a == b and a > lo:  # at the parent's end: take its last word
        a -= 1
    return Placed(node, a, b)


def _gap(node: Node, links: _Links) -> int:
    """The target gap for something at source gap `node.start`: after the word linked to the
    source word before it, or before the one linked to the word after it, or relative."""
    before, after = links.targets(node.start - 1, node.start), links.targets(node.start,
                                                                             node.start + 1)
    if node.glue == "right" and after:
        return min(after)
    if before:
        return max(before) + 1
    if after:
        return min(after)
    return links.relative(node.start)


def _void(node: Node, parent: Placed, spans: list[Placed], links: _Links) -> Placed:
    gap = min(max(_gap(node, links), parent.a), parent.b)
    for p in spans:  # never inside a sibling span: to its nearer edge
        if p.a < gap < p.b:
            gap = p.a if gap - p.a <= p.b - gap else p.b
    return Placed(node, gap, gap)


# --------------------------------------------------------------------------- writing back


def render(placed: Placed, words: list[str], seps: list[str], *, lead: str = "",
           trail: str = "") -> list[Item]:
    """The translated block: its words with the placed markup among them, as `Text` and
    `Tag` items. `seps[k]`: the whitespace before target word k (between sentences, the
    source's own). A separator goes between two pieces unless one of them is glued to the
    other: an opening tag to the word after it, a closing tag to the word before it, a void
    tag by its `glue`; the first one in a gap between two words is that gap's own, any other
    a space."""
    atoms: list[tuple[Item, bool, bool, int]] = []  # item, glued left, glued right, word k
    _atoms(placed, words, atoms)
    gaps, nxt = [], len(words)  # the word each atom comes before (itself, for a word)
    for _, _, _, k in reversed(atoms):
        nxt = k if k >= 0 else nxt
        gaps.append(nxt)
    gaps.reverse()
    out: list[Item] = [Text(lead)] if lead else []
    text: list[str] = []
    prev_right, used = True, -1  # nothing before the first piece needs a separator
    for (item, left, right, _), gap in zip(atoms, gaps, strict=True):
        if not prev_right and not left:
            text.append(seps[gap] if used < gap < len(seps) else " ")
            used = gap
        if isinstance(item, Text):
            text.append(item.text)
        else:
            if text:
                out.append(Text("".join(text)))
                text = []
            out.append(item)
        prev_right = right
    if text:
        out.append(Text("".join(text)))
    if trail:
        out.append(Text(trail))
    return out


def _atoms(p: Placed, words: list[str], atoms: list[tuple[Item, bool, bool, int]]) -> None:
    node = p.node
    if node.void and node.open is not None:  # a void always has its tag (`Node.void`)
        glue = node.glue
        atoms.append((node.open, glue in ("left", "both"), glue in ("right", "both"), -1))
        return
    if node.open is not None:
        atoms.append((node.open, False, True, -1))
    at = p.a
    for child in p.children:
        for k in range(at, child.a):
            atoms.append((Text(words[k]), False, False, k))
        _atoms(child, words, atoms)
        at = max(at, child.b)
    for k in range(at, p.b):
        atoms.append((Text(words[k]), False, False, k))
    if node.close is not None:
        atoms.append((node.close, True, False, -1))


def tags_of(items: Iterable[Item]) -> list[Tag]:
    return [it for it in items if isinstance(it, Tag)]
