"""Read-outs (which attention rows align the target tokens), symmetrization with a reverse
model, and the checks of both. Expected values are worked out by hand in the comments."""

import numpy as np
import pytest
import torch

from mtkit.align import READOUTS, check_readout, default_readout, select_rows, symmetrize
from mtkit.align.files import reading_problems
from mtkit.align.matrix import AlignMatrix
from mtkit.align.pairs import Pair, label
from mtkit.align.reverse import check_direction, combined_links
from mtkit.config import (
    DataConfig,
    DecodeConfig,
    ModelConfig,
    RNNConfig,
    TransformerConfig,
    load_recipe,
)
from mtkit.data.batch import collate
from mtkit.decode import decode_batch, forced
from mtkit.errors import ConfigError, DataError, MtkitError
from mtkit.translation.lines import pharaoh_aligner
from tests.helpers import RECIPES, tiny_model

# Decoder inputs BOS y1 y2 y3 (T = 3): row r is the step whose input is y_r; columns are the
# source tokens x0 x1 x2 and the source EOS. Each row is one-hot, so a row's link shows which
# row was read: row 0 -> x1, row 1 -> x0, row 2 -> x2, row 3 (input y3, predicts EOS) -> x1.
ROWS = np.array([
    [0.0, 1.0, 0.0, 0.0],
    [1.0, 0.0, 0.0, 0.0],
    [0.0, 0.0, 1.0, 0.0],
    [0.0, 1.0, 0.0, 0.0],
])


def test_predict_keeps_every_row_and_shift_drops_the_bos_row():
    np.testing.assert_array_equal(select_rows(ROWS, 3, "current"), ROWS)
    np.testing.assert_array_equal(select_rows(ROWS, 3, "shift"), ROWS[1:])
    as_tensor = torch.tensor(ROWS)
    torch.testing.assert_close(select_rows(as_tensor, 3, "shift"), as_tensor[1:])
    # current passes a matrix without the EOS step as before (drop_eos accepts both)
    np.testing.assert_array_equal(select_rows(ROWS[:3], 3, "current"), ROWS[:3])
    with pytest.raises(ValueError, match="shift read-out needs 4"):
        select_rows(ROWS[:3], 3, "shift")  # no step reads y3: no shift row for it


@pytest.mark.parametrize("guided", [None, "current", "shift"])
def test_a_guided_run_reads_what_its_training_supervised(guided):
    sets = [] if guided is None else [
        "data.train.align=toy/train.align", "train.guided_alignment.weight=0.05",
        f"train.guided_alignment.readout={guided}"]
    assert default_readout(load_recipe(RECIPES / "toy.yaml", sets)) == (guided or "current")


def test_check_readout_lists_the_choices():
    assert READOUTS == ("current", "shift")
    assert check_readout("shift") == "shift"
    with pytest.raises(MtkitError, match="expected one of current, shift"):
        check_readout("next")


class _Pieces:
    """The two methods of a Tokenizer that `label` uses: ids are indices into fixed pieces."""

    src = ["▁x0", "▁x1", "▁x2"]
    tgt = ["▁y1", "▁y2", "▁y3"]

    def src_pieces(self, ids):
        return [self.src[i] for i in ids]

    def tgt_pieces(self, ids):
        return [self.tgt[i] for i in ids]


def test_label_reads_the_rows_of_the_readout():
    pair = Pair(0, [0, 1, 2], [0, 1, 2])
    # current: y1 <- row 0 (x1), y2 <- row 1 (x0), y3 <- row 2 (x2); the EOS row is dropped
    m = label(_Pieces(), pair, ROWS, "cross", "word", "current")
    np.testing.assert_array_equal(m.weights.argmax(1), [1, 0, 2])
    # shift: y1 <- row 1 (x0), y2 <- row 2 (x2), y3 <- row 3 (x1)
    m = label(_Pieces(), pair, ROWS, "cross", "word", "shift")
    np.testing.assert_array_equal(m.weights.argmax(1), [0, 2, 1])
    assert m.tgt_tokens == ("y1", "y2", "y3")


def test_translate_aligner_reads_the_same_rows():
    attn = torch.tensor(ROWS, dtype=torch.float32)
    src, tgt = _Pieces.src, _Pieces.tgt
    assert pharaoh_aligner("argmax-tgt", "current")(src, tgt, attn, None) == "0-1 1-0 2-2"
    assert pharaoh_aligner("argmax-tgt", "shift")(src, tgt, attn, None) == "0-0 1-2 2-1"


@pytest.mark.parametrize("cfg", [
    ModelConfig(transformer=TransformerConfig(d_model=16, heads=2, enc_layers=1, dec_layers=2,
                                              ffn_dim=16)),
    ModelConfig(arch="rnn", rnn=RNNConfig(cell="gru", emb_dim=8, hidden_dim=8, attn_dim=8,
                                          placement="bahdanau")),
], ids=["transformer", "bahdanau-gru"])
def test_a_search_already_holds_the_shift_rows(cfg):
    # Hypothesis.attn ends with the EOS step, whose input is the last token: its rows 1..T are
    # those of a forced pass over the finished output, for every hypothesis of a beam.
    model = tiny_model(cfg, 14)
    sources = [[4, 5, 6, 7], [8, 9], [10, 11, 12, 13, 4]]
    nbest = decode_batch(model, collate(sources, None, range(3)),
                         DecodeConfig(beam_size=3, nbest=3, max_len_b=6), need_attn=True)
    hyps = [h for hs in nbest for h in hs]
    srcs = [s for s, hs in zip(sources, nbest, strict=True) for _ in hs]
    scored = forced(model, collate(srcs, [h.tokens for h in hyps], range(len(hyps))))
    for h, f in zip(hyps, scored, strict=True):
        assert h.attn is not None and f.attn is not None
        assert h.attn.shape[0] == len(h.tokens) + 1
        torch.testing.assert_close(select_rows(h.attn, len(h.tokens), "shift"),
                                   f.attn[1:], atol=1e-4, rtol=1e-4)


def test_symmetrize_by_name():
    fwd, bwd = {(0, 0), (1, 1), (4, 4)}, {(0, 0), (1, 1), (1, 2), (0, 3), (0, 2)}
    assert symmetrize(fwd, bwd, "intersection") == {(0, 0), (1, 1)}
    assert symmetrize(fwd, bwd, "union") == fwd | bwd
    # grow-diag-final, worked out in test_align_lib.test_grow_diag_final_steps
    assert symmetrize(fwd, bwd, "grow-diag-final") == {(0, 0), (1, 1), (1, 2), (0, 3), (4, 4)}
    with pytest.raises(MtkitError, match="expected one of grow-diag-final, intersection"):
        symmetrize(fwd, bwd, "grow-diag")  # type: ignore[arg-type]


def _matrix(weights, src, tgt) -> AlignMatrix:
    return AlignMatrix(np.array(weights, dtype=float), tuple(src), tuple(tgt), "word")


def test_reverse_links_are_transposed_before_combining():
    # forward (T=2 target rows, S=3 source columns): argmax-tgt links 0-0, 2-1
    fwd = _matrix([[0.9, 0.1, 0.0], [0.1, 0.2, 0.7]], "abc", "de")
    # reverse (S=3 rows, T=2 columns): source word a -> target 0, b -> 1, c -> 1, i.e. the
    # links (i, j) = (0, 0), (1, 1), (2, 1) once turned around
    rev = _matrix([[0.8, 0.2], [0.3, 0.7], [0.4, 0.6]], "de", "abc")
    forward = {(0, 0), (2, 1)}
    args = {"method": "argmax-tgt", "threshold": None, "where": "src.txt:1"}
    assert combined_links(forward, fwd, rev, how="union", **args) == {(0, 0), (1, 1), (2, 1)}
    assert combined_links(forward, fwd, rev, how="intersection", **args) == {(0, 0), (2, 1)}
    # grow-diag-final: (1,1) neighbours (0,0) diagonally and (2,1) and covers source word 1
    assert combined_links(forward, fwd, rev, how="grow-diag-final", **args) == {
        (0, 0), (1, 1), (2, 1)}
    short = _matrix([[0.5, 0.5], [0.5, 0.5]], "de", "ab")  # it split the source in 2 words
    with pytest.raises(DataError, match=r"^src\.txt:1: the reverse model reads 2 target and 2 "
                       r"source words, the forward model 2 and 3"):
        combined_links(forward, fwd, short, how="union", **args)


def test_reading_problems_name_the_option_by_its_field_and_the_cli_by_its_flag():
    from mtkit.cli.options import flag_of

    ok = {"kind": "cross", "readout": "shift", "reverse": True, "symmetrize": "union",
          "needs_links": True, "level": "word"}
    assert reading_problems(**ok) == []

    def said(**changed):
        problems = reading_problems(**{**ok, **changed})
        return [p.text(str) for p in problems], [p.text(flag_of) for p in problems]

    assert said(readout="next") == (
        ["readout: invalid choice 'next'; expected one of current, shift"],
        ["--readout: invalid choice 'next'; expected one of current, shift"])
    assert said(symmetrize="gdf")[1] == [
        "--symmetrize: invalid choice 'gdf'; expected one of grow-diag-final, intersection, "
        "union"]
    assert said(kind="encoder") == (
        ["readout shift: chooses cross-attention rows; it excludes kind",
         "reverse: combines cross-attention links; it excludes kind"],
        ["--readout shift: chooses cross-attention rows; it excludes --self-attention",
         "--reverse: combines cross-attention links; it excludes --self-attention"])
    assert said(needs_links=False, level="subword")[1] == [
        "--reverse: combines links: add --pharaoh, --json or --gold",
        "--reverse: needs --level word: the two models' pieces differ, their words do not"]


def test_reverse_direction_from_the_language_labels():
    en_de, de_en = DataConfig(src_lang="en", tgt_lang="de"), DataConfig(src_lang="de",
                                                                      tgt_lang="en")
    assert check_direction(en_de, de_en, name="runs/de-en") is None
    with pytest.raises(ConfigError, match=r"^reverse runs/x: translates en -> de; expected "
                       r"de -> en"):
        check_direction(en_de, en_de, name="runs/x")
    for unlabelled in ((DataConfig(), DataConfig()), (en_de, DataConfig())):
        warning = check_direction(*unlabelled, name="runs/y")
        assert warning is not None and "default language labels" in warning
