"""A tokenizer through a table of model ids (`mtkit.data.pieces`): Marian's vocab.json does
not follow the sentencepiece models' own ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtkit.data.pieces import PieceTable, split_language_code
from mtkit.data.spm import Tokenizer
from mtkit.errors import DataError
from mtkit.models.vocab import EOS_ID, UNK_ID
from tests.marian import WORDS_SRC, WORDS_TGT, toy_lines, train_spm

SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")


@pytest.fixture(scope="module")
def protos() -> tuple[bytes, bytes]:
    return train_spm(toy_lines(WORDS_SRC, 300, 0), 50), train_spm(toy_lines(WORDS_TGT, 300, 1), 50)


def _table(proto: bytes, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    tok = Tokenizer(proto)
    pieces = [tok.src_pieces([i])[0] for i in range(tok.src_vocab_size)]
    ordinary = sorted(p for p in pieces if p not in SPECIALS + ("<unk>",))[::-1]  # not spm's
    return SPECIALS + tuple(ordinary) + extra


def test_encoding_and_decoding_go_through_the_table(protos, tmp_path: Path) -> None:
    src = _table(protos[0], (">>de<<",))
    tgt = _table(protos[1])
    tok = Tokenizer(*protos, table=PieceTable(src, tgt))
    assert tok.src_vocab_size == len(src) and tok.tgt_vocab_size == len(tgt)
    ids = tok.encode_src("the cat 😀 sat")
    assert tok.src_pieces(ids) == [src[i] for i in ids]
    assert UNK_ID in ids  # the emoji: its piece is in no table
    # unk dropped, as transformers drops it; the lone word mark before it stays a space
    assert tok.decode_src(ids) == "the cat  sat"
    # a leading language code is one piece, looked up whole
    coded = tok.encode_src(">>de<< the cat")
    assert coded[0] == src.index(">>de<<") and coded[1:] == tok.encode_src(" the cat")
    assert split_language_code(">>de<<x") == ([">>de<<"], "x")
    assert tok.encode_src_lines(["the cat", ">>de<< a dog"]) == [
        tok.encode_src("the cat"), tok.encode_src(">>de<< a dog")]
    de = tok.encode_tgt("die Katze saß")
    assert tok.decode_tgt([*de, EOS_ID]) == "die Katze saß"
    assert tok.starts_word("tgt")[tok.encode_tgt("Katze")[0]]
    # saved beside the models, loaded with them; the table is part of the fingerprint
    tok.save(tmp_path)
    again = Tokenizer.load(tmp_path)
    assert again.table == tok.table and again.fingerprint() == tok.fingerprint()
    assert Tokenizer(*protos).fingerprint() != tok.fingerprint()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "pieces.json", "spm.src.model", "spm.tgt.model"]


def test_a_shared_table_is_stored_once_and_serves_both_sides(protos, tmp_path: Path) -> None:
    table = _table(protos[0]) + tuple(p for p in _table(protos[1])[4:]
                                      if p not in _table(protos[0]))
    tok = Tokenizer(*protos, table=PieceTable(table, table))
    assert tok.table.shared and tok.src_vocab_size == tok.tgt_vocab_size
    assert '"tgt": null' in tok.table.to_json()
    tok.save(tmp_path)
    assert Tokenizer.load(tmp_path).table == tok.table


@pytest.mark.parametrize(("text", "why"), [
    ('{"format": 1, "src": ["<pad>", "<s>", "<unk>", "</s>"]}', "source id 1 must be <unk>"),
    ('{"format": 1, "src": ["<pad>", "<unk>", "<s>", "</s>", "a", "a"]}', "piece 'a' has two"),
    ('{"format": 2, "src": []}', "not an mtkit piece table"),
    ("[", "not an mtkit piece table"),
])
def test_a_broken_table_is_refused_in_one_line(tmp_path: Path, text: str, why: str) -> None:
    (tmp_path / "pieces.json").write_text(text)
    with pytest.raises(DataError, match=why):
        PieceTable.load(tmp_path)
