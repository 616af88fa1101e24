"""A vocabulary of its own beside the sentencepiece models: a table from pieces to model ids.

mtkit's own models use sentencepiece's ids as model ids (`mtkit.models.vocab` fixes the special
ones). A model made elsewhere may number its pieces otherwise: Marian's vocab.json lists the
pieces of one or two sentencepiece models in an order of its own, so that one table can serve
both languages (a shared vocabulary) while each side keeps its own segmentation. Such a model's
data folder holds, besides its sentencepiece model(s), ``pieces.json``: the piece of every model
id, per side, with the special ids where `mtkit.models.vocab` puts them. The importer writes it
(`mtkit.hf.marian`); `mtkit.data.spm.Tokenizer` reads it and then encodes and decodes through it:

- encoding: a line's pieces (sentencepiece's `out_type=str`) looked up in the table, a piece
  the table lacks becoming UNK (sentencepiece's unknown characters included: their surface is
  the piece), the EOS added by the caller as always. A line that starts with a language code
  ``>>xx<<`` (Marian's multilingual models select their target language so) has the code cut
  off before sentencepiece and looked up whole, as Marian's tokenizer does;
- decoding: the pieces of the ids but the special ones (UNK included, as transformers'
  `skip_special_tokens` drops it), joined by the side's sentencepiece model, every remaining
  U+2581 a space, stripped.

Shapes: V a side's vocabulary (table entries).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mtkit.errors import DataError
from mtkit.models.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID

PIECES = "pieces.json"  # in a data folder, beside the sentencepiece model(s)
_FORMAT = 1
SPECIAL_PIECES = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}
_DROPPED = frozenset(SPECIAL_PIECES)  # ids decoding leaves out
_WORD = "\u2581"  # sentencepiece's word-start mark


@dataclass(frozen=True)
class PieceTable:
    """The piece of every model id: src (V_src,), tgt (V_tgt,); shared: one table for both
    sides (tgt is src), which is what sharing embeddings needs."""

    src: tuple[str, ...]
    tgt: tuple[str, ...]

    @property
    def shared(self) -> bool:
        return self.src == self.tgt

    def problems(self) -> list[str]:
        """What makes the table unusable: special ids elsewhere, a piece listed twice."""
        out = []
        for side, pieces in (("source", self.src), ("target", self.tgt)):
            for i, piece in SPECIAL_PIECES.items():
                if len(pieces) <= i or pieces[i] != piece:
                    out.append(f"{side} id {i} must be {piece}")
            if len(set(pieces)) != len(pieces):
                twice = next(p for p in pieces if pieces.count(p) > 1)
                out.append(f"{side} piece {twice!r} has two ids")
        return out

    def to_json(self) -> str:
        body = {"format": _FORMAT, "src": list(self.src),
                "tgt": None if self.shared else list(self.tgt)}
        return json.dumps(body, ensure_ascii=False, indent=0) + "\n"

    @classmethod
    def from_json(cls, text: str, *, where: str) -> PieceTable:
        try:
            raw = json.loads(text)
            src = tuple(raw["src"])
            tgt = src if raw.get("tgt") is None else tuple(raw["tgt"])
            ok = raw.get("format") == _FORMAT and all(isinstance(p, str) for p in src + tgt)
        except (ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            raise DataError(f"{where}: not an mtkit piece table ({PIECES} format {_FORMAT})")
        table = cls(src, tgt)
        if bad := table.problems():
            raise DataError(f"{where}: {bad[0]}")
        return table

    @classmethod
    def load(cls, data_dir: Path) -> PieceTable | None:
        """The table in `data_dir`, or None when it has none (a model of mtkit's own ids)."""
        path = Path(data_dir) / PIECES
        if not path.is_file():
            return None
        return cls.from_json(path.read_text(encoding="utf-8"), where=str(path))


def split_language_code(line: str) -> tuple[list[str], str]:
    """A leading ``>>xx<<`` code as a piece of its own, and the rest of the line (Marian's
    tokenizer's `remove_language_code`)."""
    if line.startswith(">>") and (end := line.find("<<")) != -1:
        return [line[: end + 2]], line[end + 2:]
    return [], line


class TableSide:
    """One side's encoding and decoding through its table (see the module doc); `proc` the
    side's sentencepiece processor."""

    def __init__(self, proc, pieces: Sequence[str]) -> None:
        self.proc = proc
        self.pieces = tuple(pieces)
        self.index = {p: i for i, p in enumerate(self.pieces)}

    def ids(self, pieces: Iterable[str]) -> list[int]:
        get = self.index.get
        return [get(p, UNK_ID) for p in pieces]

    def encode(self, line: str) -> list[int]:
        code, text = split_language_code(line)
        return self.ids(code + self.proc.encode(text, out_type=str))

    def encode_lines(self, lines: Sequence[str], threads: int) -> list[list[int]]:
        split = [split_language_code(line) for line in lines]
        pieces = self.proc.encode([text for _, text in split], out_type=str,
                                  num_threads=threads)
        return [self.ids(code + p) for (code, _), p in zip(split, pieces, strict=True)]

    def decode(self, ids: Iterable[int]) -> str:
        kept = [self.pieces[i] for i in ids if i not in _DROPPED]
        return self.proc.decode_pieces(kept).replace(_WORD, " ").strip()
