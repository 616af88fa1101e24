"""The model-free alignment library: merging, extraction, gold parsing, AER, JSON export.
Every expected value below is computed by hand in the comments."""

import json

import numpy as np
import pytest
import torch

from mtkit.align import (
    AlignScores,
    Words,
    argmax_src,
    argmax_tgt,
    check_gold_bounds,
    drop_eos,
    extract_links,
    format_pharaoh,
    from_attention,
    grow_diag_final,
    matrix_record,
    merge_subwords,
    parse_links,
    read_gold,
    score_corpus,
    score_links,
    word_ids,
    words,
    write_json,
)
from mtkit.align.files import AlignReport
from mtkit.errors import DataError, MtkitError

SRC = ["▁Das", "▁Fahr", "rad", "▁fährt"]
TGT = ["▁The", "▁bi", "cycle", "▁rides"]
# (T+1, S+1): the last column is the source EOS, the last row the step that predicts EOS.
ATTN = np.array([
    [0.8, 0.1, 0.1, 0.0, 0.0],
    [0.0, 0.3, 0.2, 0.0, 0.5],  # half its mass on EOS: renormalised to 0, .6, .4, 0
    [0.1, 0.1, 0.7, 0.1, 0.0],
    [0.0, 0.1, 0.0, 0.7, 0.2],  # /0.8 -> 0, .125, 0, .875
    [0.0, 0.0, 0.0, 0.1, 0.9],  # the EOS step: dropped
])


def test_word_ids_and_words():
    assert word_ids(SRC) == [0, 1, 1, 2]
    assert word_ids(["rad", "▁x", "</s>"]) == [0, 1, 2]  # first piece and EOS start words
    assert words(SRC) == ["Das", "Fahrrad", "fährt"]
    assert words(["▁", "(", "▁a"]) == ["(", "a"]
    assert words(["▁"]) == ["▁"]  # a bare marker alone keeps a visible label
    # Words are those of the text split at spaces: a bare marker is a space, no word (a
    # model's output may hold them; link indices count the words a reader sees).
    for pieces, ids in [(["▁a", "▁"], [0, 0]), (["▁", "▁a"], [0, 0]),
                        (["▁a", "▁", "▁b"], [0, 1, 1]), (["▁a", "▁", "▁", "</s>"], [0, 0, 0, 1]),
                        (["▁a", "▁", "b", "▁c"], [0, 1, 1, 2])]:
        assert word_ids(pieces) == ids, pieces
        text = "".join(p for p in pieces if p != "</s>").replace("▁", " ")
        assert words([p for p in pieces if p != "</s>"]) == text.split(), pieces


def test_drop_eos_renormalises_rows():
    got = drop_eos(ATTN, 4, 4)
    want = np.array([[0.8, 0.1, 0.1, 0.0], [0.0, 0.6, 0.4, 0.0],
                     [0.1, 0.1, 0.7, 0.1], [0.0, 0.125, 0.0, 0.875]])
    np.testing.assert_allclose(got, want)
    np.testing.assert_allclose(drop_eos(want, 4, 4), want)  # no EOS: already normalised
    only_eos = np.array([[0.0, 1.0]])
    np.testing.assert_array_equal(drop_eos(only_eos, 1, 1), [[0.0]])  # no division by zero
    with pytest.raises(ValueError, match="does not fit"):
        drop_eos(ATTN, 2, 4)


def test_merge_subwords_sums_source_pieces_and_averages_target_pieces():
    m = from_attention(ATTN, SRC, TGT)
    # columns Fahr+rad summed: The [.8 .2 0], bi [0 1 0], cycle [.1 .8 .1], rides [0 .125 .875];
    # rows bi, cycle averaged: bicycle [.05 .9 .05].
    want = np.array([[0.8, 0.2, 0.0], [0.05, 0.9, 0.05], [0.0, 0.125, 0.875]])
    np.testing.assert_allclose(m.weights, want)
    np.testing.assert_allclose(m.weights.sum(axis=1), 1.0)  # rows stay distributions
    assert m.src_tokens == ("Das", "Fahrrad", "fährt")
    assert m.tgt_tokens == ("The", "bicycle", "rides")
    assert m.level == "word"


def test_from_attention_accepts_torch_and_keeps_eos_at_subword_level():
    m = from_attention(torch.tensor(ATTN, dtype=torch.float32), SRC, TGT, level="subword",
                       keep_eos=True)
    assert m.src_tokens == (*SRC, "</s>") and m.tgt_tokens == (*TGT, "</s>")
    np.testing.assert_allclose(m.weights, ATTN, atol=1e-7)
    # word level with EOS kept: EOS is a word of its own, its mass not redistributed
    w = from_attention(ATTN, SRC, TGT, keep_eos=True)
    assert w.src_tokens == ("Das", "Fahrrad", "fährt", "</s>")
    # bi [0 .5 0 .5] and cycle [.1 .8 .1 0] (columns Fahr+rad summed), averaged:
    np.testing.assert_allclose(w.weights[1], [0.05, 0.65, 0.05, 0.25])
    with pytest.raises(MtkitError, match="'word' or 'subword'"):
        from_attention(ATTN, SRC, TGT, level="char")  # type: ignore[arg-type]


def test_merge_subwords_direct():
    w = np.array([[0.5, 0.2, 0.3], [0.1, 0.1, 0.8], [0.0, 0.4, 0.6]])  # pieces x y z / a b c
    got = merge_subwords(w, ["▁a", "b", "▁c"], ["▁x", "y", "▁z"])
    # columns a+b: [.7 .3], [.2 .8], [.4 .6]; rows x, y averaged: [.45 .55]
    np.testing.assert_allclose(got, [[0.45, 0.55], [0.4, 0.6]])
    with pytest.raises(ValueError, match="does not fit"):
        merge_subwords(w, ["▁a", "b"], ["▁x", "y", "▁z"])


def test_given_words_keep_words_without_pieces():
    """A whitespace word that normalization removes (a lone zero-width space) keeps its
    index: a zero column or row, never a link."""
    w = np.array([[0.5, 0.2, 0.3], [0.1, 0.1, 0.8], [0.0, 0.4, 0.6]])
    src = Words((0, 0, 2), ("ab", "\u200b", "c"))
    tgt = Words((0, 2, 2), ("x", "\u200b", "yz"))
    got = merge_subwords(w, src, tgt)
    np.testing.assert_allclose(got, [[0.7, 0.0, 0.3], [0.0, 0.0, 0.0], [0.3, 0.0, 0.7]])
    m = from_attention(np.hstack([w, np.zeros((3, 1))]), ["▁a", "b", "▁c"], ["▁x", "▁y", "z"],
                       src_words=src, tgt_words=tgt, keep_eos=True)
    assert m.src_tokens == ("ab", "\u200b", "c", "</s>") and m.tgt_tokens == tgt.labels
    with pytest.raises(ValueError, match="word ids"):
        from_attention(w, ["▁a", "b"], ["▁x", "▁y", "z"], src_words=src)
    with pytest.raises(ValueError, match="do not fit"):
        Words((0, 3), ("a", "b"))


# T=4, S=4. argmax per target row: (0,0) (1,1) (2,2) (0,3); per source column: col 3
# [.2 .1 .1 .3] -> (3,3). Link (0,3) is off the diagonal between two aligned words.
W = np.array([
    [0.7, 0.1, 0.0, 0.2],
    [0.1, 0.8, 0.0, 0.1],
    [0.0, 0.1, 0.8, 0.1],
    [0.6, 0.0, 0.1, 0.3],
])
DIAG = {(0, 0), (1, 1), (2, 2)}


@pytest.mark.parametrize(("method", "want"), [
    ("argmax-tgt", DIAG | {(0, 3)}),
    ("argmax-src", DIAG | {(3, 3)}),
    ("intersection", DIAG),
    ("union", DIAG | {(0, 3), (3, 3)}),
    # grow-diag adds (3,3) (diagonal neighbour of (2,2), source 3 unaligned); (0,3) is nobody's
    # neighbour and both its words are aligned by then, so FINAL does not add it either.
    ("grow-diag-final", DIAG | {(3, 3)}),
])
def test_extraction_methods(method, want):
    assert extract_links(W, method) == want


def test_threshold_method():
    assert extract_links(W, "threshold", threshold=0.6) == DIAG | {(0, 3)}
    assert extract_links(W, "threshold") == DIAG | {(0, 3)}  # default 0.5
    assert extract_links(W, "threshold", threshold=0.75) == {(1, 1), (2, 2)}
    with pytest.raises(MtkitError, match=r"\(0, 1\]"):
        extract_links(W, "threshold", threshold=0.0)
    with pytest.raises(MtkitError, match="^threshold: applies only to method threshold$"):
        extract_links(W, "union", threshold=0.3)
    with pytest.raises(MtkitError, match="argmax-tgt, argmax-src"):
        extract_links(W, "viterbi")


def test_argmax_skips_empty_rows_and_columns():
    w = np.array([[0.0, 0.0, 0.0], [0.3, 0.7, 0.0]])
    assert argmax_tgt(w) == {(1, 1)}
    assert argmax_src(w) == {(0, 1), (1, 1)}


def test_grow_diag_final_steps():
    # intersection {00, 11}. GROW pass 1, around (1,1): (1,2) covers the unaligned target 2
    # and is added; (0,2) is in the union but source 0 and target 2 are both aligned: refused.
    # Pass 2, around (1,2): (0,3) covers target 3: added. FINAL(forward) adds (4,4), whose words
    # are unaligned and which neighbours nothing; (0,2) stays out.
    forward = {(0, 0), (1, 1), (4, 4)}
    backward = {(0, 0), (1, 1), (1, 2), (0, 3), (0, 2)}
    assert grow_diag_final(forward, backward) == {(0, 0), (1, 1), (1, 2), (0, 3), (4, 4)}
    # FINAL needs only ONE of the two words unaligned (grow-diag-final, not -final-and):
    # (0,2) is two cells from (0,0), yet joins because target 2 is unaligned.
    assert grow_diag_final({(0, 0)}, {(0, 0), (0, 2)}) == {(0, 0), (0, 2)}


def test_format_pharaoh():
    assert format_pharaoh({(2, 1), (0, 0), (1, 2), (0, 3)}) == "0-0 0-3 1-2 2-1"
    assert format_pharaoh(set()) == ""


def test_parse_links_sure_possible_and_one_based():
    g = parse_links("0-0 1-1 2?2 1p2 3-3")
    assert g.sure == {(0, 0), (1, 1), (3, 3)}
    assert g.possible == {(0, 0), (1, 1), (3, 3), (2, 2), (1, 2)}  # P includes S
    g1 = parse_links("1-1 2?3", one_based=True)
    assert g1.sure == {(0, 0)} and g1.possible == {(0, 0), (1, 2)}
    assert parse_links("").possible == frozenset()


@pytest.mark.parametrize(("line", "one_based"), [("0-x", False), ("1:2", False),
                                                  ("0-1", True), ("-1-2", False)])
def test_parse_links_errors_name_the_place(line, one_based):
    with pytest.raises(DataError, match=r"gold\.txt:7: bad alignment link"):
        parse_links(line, one_based=one_based, where="gold.txt:7")


def test_read_gold_reports_file_and_line(tmp_path):
    p = tmp_path / "gold.txt"
    p.write_text("0-0 1?1\n\n0-1 1-x\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"gold\.txt:3: bad alignment link '1-x'"):
        read_gold(p)
    p.write_text("0-0 1?1\n\n", encoding="utf-8")
    golds = read_gold(p)
    assert len(golds) == 2 and golds[1].possible == frozenset()
    assert golds[0].where.endswith("gold.txt:1")
    with pytest.raises(DataError, match="cannot read gold alignments"):
        read_gold(tmp_path / "missing.txt")


def test_check_gold_bounds_names_line_and_link():
    g = parse_links("0-0 2?1", where="gold.txt:4")
    check_gold_bounds(g, 3, 2)  # fits: source words 0..2, target words 0..1
    with pytest.raises(DataError, match=r"gold\.txt:4: gold link 2-1 \(0-based\) is outside"):
        check_gold_bounds(g, 2, 2)


def test_aer_precision_recall_hand_computed():
    # S = {00, 11, 33}, P = S + {22, 12}; A = {00, 12, 23, 33}
    # |A∩S| = 2, |A∩P| = 3: precision 3/4, recall 2/3, AER = 1 - (2+3)/(4+3) = 2/7
    g1 = parse_links("0-0 1-1 2?2 1p2 3-3")
    s1 = score_links({(0, 0), (1, 2), (2, 3), (3, 3)}, g1)
    assert (s1.precision, s1.recall) == pytest.approx((0.75, 2 / 3))
    assert s1.aer == pytest.approx(2 / 7)
    # S = P = {01, 10}; A = {01}: precision 1, recall 1/2, AER = 1 - 2/3
    g2 = parse_links("0-1 1-0")
    total, per = score_corpus([{(0, 1)}, {(0, 0), (1, 2), (2, 3), (3, 3)}], [g2, g1])
    assert per[0].aer == pytest.approx(1 / 3) and per[0].recall == pytest.approx(0.5)
    # corpus: |A| = 5, |S| = 5, |A∩S| = 3, |A∩P| = 4: P 4/5, R 3/5, AER 1 - 7/10
    assert (total.precision, total.recall, total.aer) == pytest.approx((0.8, 0.6, 0.3))
    assert (total.hyp, total.sure, total.possible) == (5, 5, 7)


def test_aer_edge_cases_and_count_mismatch():
    perfect = score_links({(0, 0)}, parse_links("0-0 1?1"))  # possible links need no match
    assert perfect.aer == 0.0 and perfect.precision == 1.0 and perfect.recall == 1.0
    assert AlignScores.from_counts(0, 0, 0, 0, 0).aer == 0.0
    empty_hyp = score_links(set(), parse_links("0-0"))
    assert empty_hyp.aer == 1.0 and empty_hyp.recall == 0.0
    with pytest.raises(DataError, match="2 gold lines for 1 sentence pairs"):
        score_corpus([set()], [parse_links("", where="g.txt:1"), parse_links("", where="g.txt:2")])


def test_json_export_round_trip(tmp_path):
    m = from_attention(ATTN, SRC, TGT)
    links = extract_links(m.weights)
    g = parse_links("0-0 1-1 2-2")
    rec = matrix_record(m, index=7, links=links, scores=score_links(links, g))
    path = tmp_path / "out" / "align.json"
    write_json(path, [rec], scores=score_links(links, g))
    doc = json.loads(path.read_text(encoding="utf-8"))
    sent = doc["sentences"][0]
    assert doc["format"] == "mtkit-align" and doc["scores"]["aer"] == 0.0
    assert sent["index"] == 7 and sent["src_tokens"] == ["Das", "Fahrrad", "fährt"]
    assert sent["links"] == "0-0 1-1 2-2"
    np.testing.assert_allclose(sent["weights"], m.weights, atol=1e-4)


def test_json_settings_record_the_length_penalty_that_chose_the_targets():
    """--length-penalty and --alpha change which translation is aligned; the settings named
    the beam but not them."""
    from mtkit.align.files import AlignOutputs, settings_record
    from mtkit.config import DecodeConfig
    from mtkit.models.base import AttentionChoice

    def targets(**decode) -> dict:
        return settings_record(None, AttentionChoice("cross"), "shift", AlignOutputs(show=True),
                               DecodeConfig(**decode), None)["targets"]

    assert targets(method="beam", beam_size=3, length_penalty="gnmt", alpha=2.0) == {
        "search": "beam", "beam_size": 3, "length_penalty": "gnmt", "alpha": 2.0,
        "max_len_a": 1.5, "max_len_b": 10, "min_len": 0}
    assert targets(method="beam", length_penalty="average")["length_penalty"] == "average"
    assert "alpha" not in targets(method="beam", length_penalty="average")
    assert "length_penalty" not in targets(method="greedy", nbest=1)


@pytest.mark.parametrize(("pairs", "words"), [(1, "aligned 1 sentence pair in"),
                                              (3, "aligned 3 sentence pairs in")])
def test_report_summary_counts_pairs_in_english(pairs, words):
    assert AlignReport(pairs=pairs, seconds=0.5).summary().startswith(words)
