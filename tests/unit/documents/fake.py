"""A model-free translator for the document tests: each sentence's words reversed and upper
cased, with the exact word links of that reversal (what the toy model learns), or kept in
order (`monotone`)."""

from __future__ import annotations

from mtkit.documents.inline import Item, Tag, Text


def reverse(sentences: list[str]) -> list[tuple[str, list[tuple[int, int]]]]:
    out = []
    for s in sentences:
        words = s.split()
        n = len(words)
        out.append((" ".join(w.upper() for w in reversed(words)),
                    [(i, n - 1 - i) for i in range(n)]))
    return out


def monotone(sentences: list[str]) -> list[tuple[str, list[tuple[int, int]]]]:
    return [(s.upper(), [(i, i) for i in range(len(s.split()))]) for s in sentences]


def unaligned(sentences: list[str]) -> list[tuple[str, list[tuple[int, int]]]]:
    return [(s.upper(), []) for s in sentences]


def joined(items: list[Item]) -> str:
    return "".join(it.text if isinstance(it, Text) else it.raw for it in items)


def raw_tags(items: list[Item]) -> list[str]:
    return [it.raw for it in items if isinstance(it, Tag)]
