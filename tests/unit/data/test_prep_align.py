"""`mtkit prep` with word alignments (``data.train.align``): checked in step with the corpus
(one-line errors naming file and line, exit 2), dropped with the pairs cleaning drops, mapped
onto pieces, stored and reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtkit.config import load_recipe, recipe_from_dict
from mtkit.data.manifest import without_unset_align
from mtkit.data.prep import is_prepared, prepare
from mtkit.data.spm import Tokenizer
from mtkit.data.store import ParallelData
from mtkit.errors import DataError
from mtkit.run import data_dir
from tests.helpers import REPO, run_cli

TOY = REPO / "recipes" / "toy"


def _lines(name: str) -> list[str]:
    return (TOY / name).read_text(encoding="utf-8").splitlines()


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _recipe_file(tmp_path: Path, *extra: str) -> Path:
    """The toy task with tmp_path's train.src/tgt/align, guided, as a YAML recipe."""
    path = tmp_path / "r.yaml"
    path.write_text(
        "data:\n  train: {src: train.src, tgt: train.tgt, align: train.align}\n"
        f"  valid: {{src: {TOY / 'valid.src'}, tgt: {TOY / 'valid.tgt'}}}\n"
        "  spm: {vocab_size: 51, input_sentence_size: 0}\n  clean: {max_len: 20}\n"
        "train: {guided_alignment: {weight: 0.05}}\n" + "".join(extra), encoding="utf-8")
    return path


def _toy(tmp_path: Path) -> tuple[list[str], list[str], list[str]]:
    src, tgt, align = _lines("train.src"), _lines("train.tgt"), _lines("train.align")
    for name, lines in (("train.src", src), ("train.tgt", tgt), ("train.align", align)):
        _write(tmp_path / name, lines)
    return src, tgt, align


@pytest.mark.parametrize(("line", "value", "message"), [
    (3, "0-0 1", "line 3: expected word links i-j (0-based source and target word indices) "
     "separated by spaces, got '0-0 1'"),
    (5, "0-0 9-1", "line 5: link 9-1 is out of range: the pair has "),
    (7, "0-7", "line 7: link 0-7 is out of range: the pair has "),
])
def test_bad_links_are_one_line_errors_naming_file_and_line(tmp_path: Path, line: int,
                                                            value: str, message: str) -> None:
    _, _, align = _toy(tmp_path)
    align[line - 1] = value
    _write(tmp_path / "train.align", align)
    result = run_cli("prep", _recipe_file(tmp_path), "--run-dir", tmp_path / "run")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"mtkit: error: {tmp_path / 'train.align'}: {message}")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output
    assert not data_dir(tmp_path / "run").exists()


@pytest.mark.parametrize("n", [999, 1001])
def test_an_alignment_of_another_length_is_refused(tmp_path: Path, n: int) -> None:
    _, _, align = _toy(tmp_path)
    _write(tmp_path / "train.align", (align + ["0-0"])[:n])
    result = run_cli("prep", _recipe_file(tmp_path), "--run-dir", tmp_path / "run")
    assert result.exit_code == 2
    assert result.stderr == (f"mtkit: error: {tmp_path / 'train.align'}: line "
                             f"{min(n, 1000) + 1}: the alignment has {n} lines but the corpus "
                             f"has 1000 ({tmp_path / 'train.src'}); expected one line of links "
                             "per sentence pair\n")


def test_cleaning_drops_the_links_of_the_pairs_it_drops(tmp_path: Path, monkeypatch) -> None:
    """An empty pair, duplicates (dedup) and a pair over clean.max_len go with their links;
    every kept pair keeps its own links; reading in chunks of 7 lines changes no byte."""
    from mtkit.data import stream

    src, tgt = _lines("train.src")[:200], _lines("train.tgt")[:200]
    align = _lines("train.align")[:200]
    words = " ".join("ba ko mir tu lem sa dov pik ra nel gu fos".split() * 2)  # 24 > 20
    for s, t, a in (("", "", ""), (src[3], tgt[3], "0-0"), (words, words, "0-0")):
        src, tgt, align = src + [s], tgt + [t], align + [a]
    for name, lines in (("train.src", src), ("train.tgt", tgt), ("train.align", align)):
        _write(tmp_path / name, lines)
    kept, seen = [], set()  # what the cleaning rules keep, in order
    for i, (s, t) in enumerate(zip(src, tgt, strict=True)):
        if s and (s, t) not in seen and len(s.split()) <= 20:
            kept.append(i)
        seen.add((s, t))
    path = _recipe_file(tmp_path)
    path.write_text(path.read_text().replace("{max_len: 20}", "{max_len: 20, dedup: true}"))
    result = run_cli("prep", path, "--run-dir", tmp_path / "run")
    assert result.exit_code == 0, result.output
    read = sum(len(a.split()) for a in align)
    carried = sum(len(align[i].split()) for i in kept)
    assert (f"alignments: {read:,} word links read; the {len(kept):,} pairs kept carry "
            f"{carried:,}, stored as {carried:,} piece links for guided alignment"
            ) in " ".join(result.stderr.split())
    ddir = data_dir(tmp_path / "run")
    man = json.loads((ddir / "manifest.json").read_text())
    assert man["alignments"] == {"links_read": read, "pairs_kept": len(kept),
                                 "links_kept": carried, "piece_links": carried,
                                 "unmapped": 0, "first_unmapped": None}
    data, tok = ParallelData.load(ddir, "train", links=True), Tokenizer.load(ddir)
    assert len(data) == len(kept) < 203
    for row, i in enumerate(kept):
        assert tok.decode_src(data.src(row)) == src[i]
        assert _word_links(tok, data, row) == _pharaoh(align[i])
    monkeypatch.setattr(stream, "CHUNK", 7)
    prepare(_load(path), tmp_path / "small")
    for name in ("train.align.ids.npy", "train.align.offsets.npy", "train.src.ids.npy"):
        assert (data_dir(tmp_path / "small") / name).read_bytes() == (ddir / name).read_bytes()


def _load(path: Path):
    return load_recipe(path)


def _pharaoh(line: str) -> set[tuple[int, int]]:
    return {tuple(map(int, link.split("-"))) for link in line.split()}


def _word_of(pieces: list[str]) -> list[int]:
    """The word index of every piece (a piece starting with '▁' begins a word)."""
    out, word = [], -1
    for p in pieces:
        word += p.startswith("\u2581")
        out.append(word)
    return out


def _word_links(tok: Tokenizer, data: ParallelData, i: int) -> set[tuple[int, int]]:
    sw, tw = _word_of(tok.src_pieces(data.src(i))), _word_of(tok.tgt_pieces(data.tgt(i)))
    return {(sw[p], tw[q]) for p, q in data.links(i).tolist()}


def test_words_split_into_pieces_link_all_their_pieces(tmp_path: Path) -> None:
    """A vocabulary too small for whole words: each word link becomes the product of the
    two words' pieces, and reading links back per word gives the word links."""
    _, _, align = _toy(tmp_path)
    path = _recipe_file(tmp_path)
    path.write_text(path.read_text().replace("vocab_size: 51", "vocab_size: 30")
                    .replace("{max_len: 20}", "{max_len: 100}"))
    report = prepare(_load(path), tmp_path / "run")
    assert report.alignments is not None and report.alignments.unmapped == 0
    assert report.alignments.pairs_kept == 1000  # none cleaned: line i is pair i
    assert report.alignments.piece_links > report.alignments.links_kept  # words were split
    data = ParallelData.load(report.data_dir, "train", links=True)
    tok = Tokenizer.load(report.data_dir)
    for i in range(0, 1000, 37):
        sw, tw = _word_of(tok.src_pieces(data.src(i))), _word_of(tok.tgt_pieces(data.tgt(i)))
        links = data.links(i).tolist()
        assert _word_links(tok, data, i) == _pharaoh(align[i])
        for i_w, j_w in _pharaoh(align[i]):  # every piece pair of a linked word pair
            assert sum(1 for p, q in links if (sw[p], tw[q]) == (i_w, j_w)) == \
                sw.count(i_w) * tw.count(j_w)


def test_a_changed_alignment_file_is_prepared_again(tmp_path: Path) -> None:
    _toy(tmp_path)
    recipe = _load(_recipe_file(tmp_path))
    prepare(recipe, tmp_path / "run")
    assert is_prepared(recipe, tmp_path / "run")
    align = _lines("train.align")
    align[0] = "0-0"
    _write(tmp_path / "train.align", align)
    assert not is_prepared(recipe, tmp_path / "run")


def test_data_without_alignments_load_as_before_and_refuse_guided_training(
        tmp_path: Path) -> None:
    recipe = recipe_from_dict({"data": {
        "train": {"src": str(TOY / "train.src"), "tgt": str(TOY / "train.tgt")},
        "valid": {"src": str(TOY / "valid.src"), "tgt": str(TOY / "valid.tgt")},
        "spm": {"vocab_size": 51}}})
    assert without_unset_align(
        {"train": [{"src": 1, "tgt": 2, "align": None}]}) == {"train": [{"src": 1, "tgt": 2}]}
    run = tmp_path / "run"
    prepare(recipe, run)
    assert not ParallelData.load(data_dir(run), "train").has_links
    with pytest.raises(DataError, match=r"train\.align\.ids\.npy: missing; guided alignment "
                       r"\(train\.guided_alignment\) needs"):
        ParallelData.load(data_dir(run), "train", links=True)
