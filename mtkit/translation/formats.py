"""The records `LineTranslator.run` writes, one per input line: the best translation as a
text line (with its word links after `|||` when aligned), Moses n-best lines (one per
hypothesis) when several are asked for, or one JSON object (`jsonl`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, get_args

if TYPE_CHECKING:
    from mtkit.data.hypothesis import Hypothesis

OutputFormat = Literal["text", "jsonl"]
FORMATS: tuple[str, ...] = get_args(OutputFormat)


def record(fmt: OutputFormat, index: int, line: str, hyps: Sequence[Hypothesis | None],
           texts: Sequence[str], *, nbest: bool, link: Callable[[int], str] | None) -> str:
    """One input line's record, newline-terminated. index: the line's number from 0; line:
    its source text; hyps: its hypotheses best first (one None for an empty line, written as
    an empty translation scoring 0) and texts: theirs decoded; nbest: several were asked for;
    link(k): the word links of hypothesis k (None: not aligned)."""
    scores = [h.score if h else 0.0 for h in hyps]
    if fmt == "jsonl":
        return _jsonl(index, line, hyps, texts, scores, nbest=nbest, link=link)
    if nbest:
        # Moses n-best: id ||| hypothesis ||| features ||| total, the one feature (F0, as
        # Marian names it) being the score; links go last, as Moses's
        # -print-alignment-info-in-n-best puts them (Marian puts them third)
        links = [f" ||| {link(k)}" if link else "" for k in range(len(hyps))]
        return "".join(f"{index} ||| {t} ||| F0= {s:.4f} ||| {s:.4f}{a}\n"
                       for t, s, a in zip(texts, scores, links, strict=True))
    if link is not None:
        return f"{texts[0]} ||| {link(0)}\n"
    return texts[0] + "\n"


def _jsonl(index: int, line: str, hyps: Sequence[Hypothesis | None], texts: Sequence[str],
           scores: list[float], *, nbest: bool, link: Callable[[int], str] | None) -> str:
    counts = [len(h.tokens) if h else 0 for h in hyps]
    rec: dict[str, Any] = {"id": index, "source": line, "hypothesis": texts[0],
                           "score": scores[0], "tokens": counts[0]}
    if nbest:
        rec["nbest"] = [{"hypothesis": t, "score": s, "tokens": n}
                        for t, s, n in zip(texts, scores, counts, strict=True)]
        if link is not None:  # each hypothesis has its own attention
            for k, entry in enumerate(rec["nbest"]):
                entry["alignment"] = link(k)
    if link is not None:
        rec["alignment"] = link(0)
    return json.dumps(rec, ensure_ascii=False) + "\n"
