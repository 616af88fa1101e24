"""Blocks of a document translated: each block's markup taken out, its plain text split into
sentences, every sentence of the document translated in one call (so they share the usual
length-sorted batches), and each block rejoined with its own spacing between sentences and
its markup placed back by the word alignment (`mtkit.documents.place`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mtkit.documents.inline import Item, Source, take_out
from mtkit.documents.place import Link, Placement, place, render
from mtkit.documents.sentences import WordRange, fitted, sentence_ranges

# Plain sentences -> each one's translation and its word links (source i, target j).
Translate = Callable[[list[str]], list[tuple[str, list[Link]]]]


@dataclass(frozen=True)
class Splitting:
    """How a block's sentences are made to fit: `too_long` says whether a sentence is past
    what the model reads (it is split again at punctuation or a clause; None: no limit)."""

    too_long: Callable[[str], bool] | None = None


@dataclass
class _Block:
    items: Sequence[Item]
    source: Source
    ranges: list[WordRange]
    words: list[str]


def translate_blocks(blocks: Sequence[Sequence[Item]], translate: Translate, *,
                     splitting: Splitting = Splitting(), placement: Placement = "align"
                     ) -> list[list[Item]]:
    """Each block translated, as `Text` and `Tag` items in the writer's order; a block with
    no word comes back as it was."""
    prepared = [_prepare(items, splitting) for items in blocks]
    sentences = [" ".join(b.words[a:e]) for b in prepared for a, e in b.ranges]
    results = iter(translate(sentences) if sentences else [])
    out = []
    for b in prepared:
        if not b.ranges:
            out.append(list(b.items))
            continue
        out.append(_rejoin(b, [next(results) for _ in b.ranges], placement))
    return out


def words(source: Source) -> list[str]:
    return [source.plain[s:e] for s, e in source.words]


def _prepare(items: Sequence[Item], splitting: Splitting) -> _Block:
    source = take_out(items)
    if not source.words:
        return _Block(items, source, [], [])
    tokens = words(source)
    ranges = sentence_ranges(source.plain, source.words)
    if splitting.too_long is not None:
        ranges = fitted(ranges, tokens, splitting.too_long)
    return _Block(items, source, ranges, tokens)


def _rejoin(b: _Block, results: list[tuple[str, list[Link]]], placement: Placement
            ) -> list[Item]:
    """The block's translation: its sentences' words in order, the source's own whitespace
    between sentences, the markup placed over block-level links."""
    tgt: list[str] = []
    seps: list[str] = []
    links: list[Link] = []
    src = b.source
    for (a, e), (text, sent_links) in zip(b.ranges, results, strict=True):
        sent = text.split()
        # the first word's separator shows only after a tag that starts the block
        between = src.plain[src.words[a - 1][1]:src.words[a][0]] if a else " "
        seps.extend([between] + [" "] * (len(sent) - 1) if sent else [])
        links.extend((a + i, len(tgt) + j) for i, j in sent_links
                     if 0 <= i < e - a and 0 <= j < len(sent))
        tgt.extend(sent)
    placed = place(src, len(tgt), links, method=placement)
    return render(placed, tgt, seps, lead=src.lead, trail=src.trail)
