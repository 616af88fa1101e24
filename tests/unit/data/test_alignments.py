"""Word alignments for guided alignment: Pharaoh lines parsed and checked, word links mapped
onto sentencepiece pieces, and made dense per batch."""

from __future__ import annotations

import numpy as np
import pytest

from mtkit.data.alignments import Links, check_links, parse_links, piece_links, word_counts
from mtkit.data.batch import collate
from mtkit.errors import DataError

# A hand-made vocabulary: "▁" marks the pieces that start a word.
VOCAB = ["<pad>", "<unk>", "<s>", "</s>", "\u2581a", "b", "\u2581c", "\u2581x", "\u2581y", "z",
         "q", "\u2581"]
STARTS = np.array([p.startswith("\u2581") for p in VOCAB])
ID = {p: i for i, p in enumerate(VOCAB)}


def _side(*sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
    ids = [[ID[p] for p in s] for s in sentences]
    return np.array([len(s) for s in ids]), np.array([i for s in ids for i in s], dtype=np.int64)


def test_parse_links_counts_and_pairs() -> None:
    links = parse_links(["0-1 2-0", "", "3-3"], path="a.align", first_line=1)
    assert links.counts.tolist() == [2, 0, 1]
    assert links.pairs.tolist() == [[0, 1], [2, 0], [3, 3]]
    assert links.line.tolist() == [0, 0, 2]
    spaced = parse_links(["0-1   2-0"], path="a", first_line=1)  # any whitespace between links
    assert spaced.pairs.tolist() == [[0, 1], [2, 0]]


@pytest.mark.parametrize("bad", ["0-1 2", "0:1", "1-2-3", "0-1,1-2", "a-b", "0?1", "-1-0",
                                 "1234567890-0"])
def test_malformed_lines_name_file_and_line(bad: str) -> None:
    with pytest.raises(DataError) as e:
        parse_links(["0-0", bad], path="x/train.align", first_line=41)
    assert str(e.value).startswith("x/train.align: line 42: expected word links i-j (0-based "
                                   f"source and target word indices) separated by spaces, got "
                                   f"{bad!r}")


def test_indices_beyond_the_words_of_the_pair_name_file_and_line() -> None:
    src, tgt = ["a b c", "a b"], ["x y", "x y z"]
    check_links(parse_links(["2-1 0-0", "1-2"], path="p", first_line=1), src, tgt, path="p",
                first_line=1)
    with pytest.raises(DataError, match=r"^p: line 8: link 2-0 is out of range: the pair has 2 "
                       r"source and 3 target words \(0-based"):
        check_links(parse_links(["0-0", "2-0"], path="p", first_line=7), src, tgt, path="p",
                    first_line=7)
    with pytest.raises(DataError, match=r"^p: line 7: link 0-2 is out of range"):
        check_links(parse_links(["0-2", ""], path="p", first_line=7), src, tgt, path="p",
                    first_line=7)


def test_a_word_link_links_every_piece_of_both_words() -> None:
    # source words [▁a b] [▁c]; target words [▁x] [▁y z q]
    src, tgt = _side(["\u2581a", "b", "\u2581c"]), _side(["\u2581x", "\u2581y", "z", "q"])
    words = Links(np.array([3]), np.array([[0, 1], [1, 0], [0, 1]]))  # a duplicate link too
    pieces, unmapped = piece_links(words, np.array([2]), np.array([2]), src, tgt,
                                   (STARTS, STARTS))
    assert not unmapped.any()
    assert pieces.counts.tolist() == [7]
    assert pieces.pairs.tolist() == [[0, 1], [0, 2], [0, 3], [1, 1], [1, 2], [1, 3], [2, 0]]


def test_links_stay_with_their_pair_across_a_chunk() -> None:
    src = _side(["\u2581a"], ["\u2581", "b", "\u2581c"], [])  # a bare "▁" starts a word too
    tgt = _side(["\u2581x", "z"], ["\u2581y"], [])
    words = Links(np.array([1, 2, 0]), np.array([[0, 0], [0, 0], [1, 0]]))
    pieces, unmapped = piece_links(words, np.array([1, 2, 0]), np.array([1, 1, 0]), src, tgt,
                                   (STARTS, STARTS))
    assert not unmapped.any()
    assert pieces.counts.tolist() == [2, 3, 0]
    assert pieces.pairs.tolist() == [[0, 0], [0, 1], [0, 0], [1, 0], [2, 0]]


def test_pairs_whose_pieces_are_not_the_whitespace_words_keep_no_links() -> None:
    # pair 0: sentencepiece found 1 word where whitespace found 2; pair 1 starts mid-word
    src = _side(["\u2581a", "b"], ["b", "\u2581a"], ["\u2581c"])
    tgt = _side(["\u2581x"], ["\u2581x"], ["\u2581y"])
    words = Links(np.array([1, 1, 1]), np.array([[1, 0], [0, 0], [0, 0]]))
    pieces, unmapped = piece_links(words, np.array([2, 2, 1]), np.array([1, 1, 1]), src, tgt,
                                   (STARTS, STARTS))
    assert unmapped.tolist() == [True, True, False]
    assert pieces.counts.tolist() == [0, 0, 1] and pieces.pairs.tolist() == [[0, 0]]


def test_word_counts_split_at_whitespace() -> None:
    assert word_counts(["a  b\tc", "", "x"]).tolist() == [3, 0, 1]


def test_collate_makes_the_links_dense_and_drops_those_cut_by_max_len() -> None:
    links = [np.array([[0, 1], [2, 0]]), np.array([[1, 2], [0, 0]])]
    b = collate([[5, 6, 7], [8, 9]], [[10, 11], [12, 13, 14]], [0, 1], links=links)
    assert b.align is not None and b.align.shape == (2, 4, 4)  # (B, T, S), EOS included
    assert b.align.nonzero().tolist() == [[0, 0, 2], [0, 1, 0], [1, 0, 0], [1, 2, 1]]
    assert b.num_linked_rows == 4
    cut = collate([[5, 6, 7], [8, 9]], [[10, 11], [12, 13, 14]], [0, 1], max_len=2,
                  links=links)
    assert cut.align.nonzero().tolist() == [[0, 1, 0], [1, 0, 0]]
    assert collate([[5]], [[6]], [0]).align is None
