"""Heatmap files and terminal tables of attention matrices."""

import io
import re
import time
import xml.etree.ElementTree as ET

import matplotlib
import numpy as np
import pytest
from PIL import Image
from rich.cells import cell_len
from rich.console import Console

from mtkit.align import AlignMatrix, from_attention
from mtkit.align.viz import (
    DEFAULT_DPI,
    _cell_text,
    figure_size,
    heatmap_name,
    print_matrix,
    render_text,
    save_heatmap,
    write_heatmap,
)
from mtkit.errors import MtkitError

SRC15 = "Ein Mann in einem blauen Hemd fährt mit seinem Fahrrad eine lange Straße entlang .".split()
TGT15 = "A man in a blue shirt rides his bicycle along a long road in town .".split()


def _matrix(src, tgt, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.dirichlet(np.full(len(src), 0.3), size=len(tgt))
    return AlignMatrix(w, tuple(src), tuple(tgt), "word")


SMALL = from_attention(np.array([[0.7, 0.2, 0.1, 0.0], [0.1, 0.6, 0.2, 0.1],
                                 [0.0, 0.1, 0.1, 0.8]]), ["▁Ein", "▁Ma", "nn"],
                       ["▁A", "▁man"], level="subword", keep_eos=True)  # (T+1, S+1): with EOS


def test_heatmap_name():
    assert heatmap_name(7) == "align-0007.png"
    assert heatmap_name(12345, "svg") == "align-12345.svg"


def test_figure_size_grows_with_lengths():
    w1, h1 = figure_size(_matrix(SRC15[:5], TGT15[:5]))
    w2, h2 = figure_size(_matrix(SRC15, TGT15[:5]))
    w3, h3 = figure_size(_matrix(SRC15[:5], TGT15))
    assert w2 > w1 and h2 >= h1  # longer source: wider
    assert h3 > h1  # longer target: taller
    assert all(x * 4 == int(x * 4) for x in (w1, h1, w2, h2))  # quarter inches: exact pixels


def test_png_heatmap_is_valid_with_expected_pixel_size(tmp_path):
    m = _matrix(SRC15, TGT15)
    path = write_heatmap(m, tmp_path, 7)
    assert path == tmp_path / "align-0007.png"
    with Image.open(path) as im:
        im.verify()
    with Image.open(path) as im:
        assert im.format == "PNG"
        w, h = figure_size(m)
        assert im.size == (int(w * DEFAULT_DPI), int(h * DEFAULT_DPI))
    with Image.open(save_heatmap(m, tmp_path / "hi.png", dpi=50)) as im:
        assert im.size == (int(w * 50), int(h * 50))


def test_svg_heatmap_keeps_labels_as_text(tmp_path):
    fonttype = matplotlib.rcParams["svg.fonttype"]
    path = write_heatmap(SMALL, tmp_path, 3, fmt="svg")
    assert path.name == "align-0003.svg"
    assert matplotlib.rcParams["svg.fonttype"] == fonttype  # setting did not leak
    root = ET.parse(path).getroot()
    w, h = figure_size(SMALL)
    assert root.get("width") == f"{w * 72:g}pt" and root.get("height") == f"{h * 72:g}pt"
    texts = {"".join(t.itertext()).strip() for t in root.iter("{http://www.w3.org/2000/svg}text")}
    for token in ("▁Ein", "▁Ma", "nn", "▁A", "▁man", "</s>", "sentence 3 (subword level)"):
        assert token in texts, token


def test_heatmap_labels_are_plain_text_not_tex(tmp_path):
    """A word with two '$' was read as math: '$$' and '$_$' raised matplotlib's ValueError
    (a traceback, the rest of the images not drawn), '$5-$10' was drawn as '5-10'."""
    words = ["$$", "$_$", "$5-$10", "$x^2$"]
    path = write_heatmap(_matrix(words, ["a", "$b$"]), tmp_path, 0, fmt="svg")
    texts = {"".join(t.itertext()).strip()
             for t in ET.parse(path).getroot().iter("{http://www.w3.org/2000/svg}text")}
    assert set(words) | {"$b$"} <= texts


def test_terminal_table_shows_control_characters_escaped():
    """A corpus line's ESC sequence went to the terminal as is (it could recolour it)."""
    text = render_text(_matrix(["a\x1b[31mred", "b"], ["c\x07"]), width=60)
    assert "\x1b[31m" not in text and "\x07" not in text
    assert "a\\x1b[31mred" in text and "c\\x07" in text


def test_pdf_heatmap_is_valid_with_page_size(tmp_path):
    path = write_heatmap(SMALL, tmp_path, 0, fmt="pdf")
    data = path.read_bytes()
    assert data.startswith(b"%PDF-") and data.rstrip().endswith(b"%%EOF")
    w, h = figure_size(SMALL)
    box = re.search(rb"/MediaBox \[ *0 0 ([\d.]+) ([\d.]+) *\]", data)
    assert box and (float(box[1]), float(box[2])) == (w * 72, h * 72)


@pytest.mark.parametrize("fmt", ["png", "svg", "pdf"])
def test_the_same_matrix_gives_the_same_bytes(tmp_path, fmt):
    """No save date in the file: rerunning `align --heatmap` does not churn outputs."""
    first = write_heatmap(SMALL, tmp_path / "a", 0, fmt=fmt).read_bytes()
    time.sleep(1.1)  # a date stored to the second would differ now
    assert write_heatmap(SMALL, tmp_path / "b", 0, fmt=fmt).read_bytes() == first


def test_heatmap_rejects_unknown_format(tmp_path):
    with pytest.raises(MtkitError, match="png, svg, pdf"):
        write_heatmap(SMALL, tmp_path, 0, fmt="jpg")
    assert not list(tmp_path.iterdir())


def test_cell_text_two_decimals_in_three_chars():
    assert [_cell_text(v) for v in (0.0, 0.071, 0.5, 0.994, 0.996, 1.0)] == \
        [".00", ".07", ".50", ".99", "1.0", "1.0"]


def _assert_fits(text, width):
    lines = text.splitlines()
    assert lines and max(cell_len(line) for line in lines) <= width


def test_terminal_table_15_words_fit_80_columns_in_one_block():
    m = _matrix(SRC15, TGT15)
    text = render_text(m, width=80, title="sentence 0")
    _assert_fits(text, 80)
    assert "note:" not in text  # no wrapping needed
    for token in SRC15 + TGT15:
        assert token in text, token
    row = next(line for line in text.splitlines() if line.startswith("1 man "))
    assert row.split()[2:] == [_cell_text(v) for v in m.weights[1]]  # every value, in order
    header = next(line for line in text.splitlines() if line.startswith("tgt"))
    assert header.split()[-1] == "14"


@pytest.mark.parametrize("width", [24, 40, 60])
def test_terminal_table_wraps_long_sentences_into_blocks(width):
    src = SRC15 + ["und", "dann", "weiter", "nach", "Hause"]
    m = _matrix(src, TGT15)
    text = render_text(m, width=width)
    _assert_fits(text, width)
    assert "note: 20 source tokens do not fit" in " ".join(text.split())
    for token in src + TGT15:
        assert token in text, token
    # each row's values appear across the blocks, in order
    values = [v for line in text.splitlines() if line.startswith("3 a ")
              for v in line.split()[2:]]
    assert values == [_cell_text(v) for v in m.weights[3]]


def test_terminal_table_lists_cut_target_labels_in_full():
    long = "Donaudampfschifffahrtsgesellschaftskapitän"
    m = _matrix(["a", "b"], ["x", long])
    text = render_text(m, width=40)
    _assert_fits(text, 40)
    assert f"1:{long}" in text.replace("\n", "")


def test_terminal_table_keeps_markup_like_tokens_literally():
    m = _matrix(["[b]", "[/x]"], ["[red]"])
    text = render_text(m, width=40)
    assert "[b]" in text and "[/x]" in text and "[red]" in text


def test_color_rendering_shades_by_weight_and_print_uses_console_width():
    m = AlignMatrix(np.array([[0.9, 0.0]]), ("a", "b"), ("x",), "word")
    colored = render_text(m, width=40, color=True)
    assert "\x1b[" in colored and "48;2;" in colored  # truecolor backgrounds
    assert "\x1b" not in render_text(m, width=40)
    console = Console(width=30, record=True, color_system=None, file=io.StringIO())
    print_matrix(m, console, title="sentence 5")
    out = console.export_text()
    assert out.startswith("sentence 5") and ".90" in out
    _assert_fits(out, 30)
    with pytest.raises(MtkitError, match="too narrow"):
        render_text(m, width=10)
