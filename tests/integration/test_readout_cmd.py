"""`mtkit align --readout/--reverse/--symmetrize` and `mtkit translate --align --readout` on the
toy run: what they write, that the two commands agree, and their flag errors (one line, exit 2).

The toy task reverses the word order and its sentencepiece model is joint, so the toy model
also translates the other direction correctly: labelled `xx -> yy` in one copy and `yy -> xx`
in another, it stands for a model of each direction.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from mtkit.align import parse_links
from mtkit.config import (
    FileSource,
    ModelConfig,
    RNNConfig,
    dump_recipe,
    recipe_from_yaml_text,
)
from mtkit.config.guided import GuidedAlignmentConfig
from mtkit.models.build import build_model
from mtkit.run import data_dir, load_checkpoint, save_checkpoint
from tests.helpers import REPO, run_cli

pytestmark = pytest.mark.usefixtures("one_thread")
N = 12  # toy test pairs used


def _labelled(toy_model: Path, run: Path, src_lang: str, tgt_lang: str, *,
              rnn: bool = False, guided: str | None = None) -> Path:
    """A copy of the toy model's run whose checkpoint's recipe names these languages; with
    `rnn`, an untrained small RNN in place of the model; with `guided`, a recipe that says the
    model was trained with guided alignment of that read-out (its weights are the toy
    model's: only the defaults that `align` and `translate` take from the recipe matter)."""
    shutil.copytree(data_dir(toy_model), data_dir(run))
    state = load_checkpoint(toy_model / "best.pt")
    recipe = recipe_from_yaml_text(state["recipe"], source="toy")
    data = dataclasses.replace(recipe.data, src_lang=src_lang, tgt_lang=tgt_lang)
    recipe = dataclasses.replace(recipe, data=data)
    if guided is not None:
        train = dataclasses.replace(recipe.train, guided_alignment=GuidedAlignmentConfig(
            weight=0.05, readout=guided))  # type: ignore[arg-type]
        corpus = dataclasses.replace(recipe.data.train, align=FileSource(
            path=str(REPO / "recipes/toy/train.align")))
        recipe = dataclasses.replace(recipe, train=train, data=dataclasses.replace(
            recipe.data, train=corpus))
    if rnn:
        recipe = dataclasses.replace(recipe, model=ModelConfig(arch="rnn", rnn=RNNConfig(
            emb_dim=16, hidden_dim=16, attn_dim=16)))
        vocab = state["vocab"]
        state["model"] = build_model(recipe.model, vocab["src"], vocab["tgt"]).state_dict()
    state["recipe"] = dump_recipe(recipe)
    state.pop("format", None)
    save_checkpoint(run / "best.pt", state)
    return run


@pytest.fixture(scope="module")
def runs(toy_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("readout")
    return {"fwd": _labelled(toy_model, base / "fwd", "xx", "yy"),
            "rev": _labelled(toy_model, base / "rev", "yy", "xx"),
            "same": _labelled(toy_model, base / "same", "xx", "yy"),
            "rnn": _labelled(toy_model, base / "rnn", "yy", "xx", rnn=True),
            "guided": _labelled(toy_model, base / "guided", "xx", "yy", guided="shift")}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("readout-files")
    src = (REPO / "recipes/toy/test.src").read_text().splitlines()[:N]
    tgt = (REPO / "recipes/toy/test.tgt").read_text().splitlines()[:N]
    gold = [" ".join(f"{i}-{len(s.split()) - 1 - i}" for i in range(len(s.split())))
            for s in src]
    out = {}
    for name, lines in (("src", src), ("tgt", tgt), ("gold", gold)):
        out[name] = base / f"{name}.txt"
        out[name].write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return out


def _links(result) -> list[set[tuple[int, int]]]:
    assert result.exit_code == 0, result.output
    return [set(parse_links(line).sure) for line in result.stdout.splitlines()]


def _align(run: Path, files: dict[str, Path], *args: str, src: str = "src", tgt: str = "tgt"):
    return run_cli("align", run, "-s", files[src], "-t", files[tgt], "--pharaoh", "-", *args)


def test_shift_reads_other_rows_than_predict(runs, files):
    current = _links(_align(runs["fwd"], files))
    shift = _links(_align(runs["fwd"], files, "--readout", "shift"))
    assert _links(_align(runs["fwd"], files, "--readout", "current")) == current
    assert shift != current  # a toy model looks up the word it predicts: one row apart


def test_a_guided_run_reads_its_supervised_readout_by_default(runs, files):
    shift = _links(_align(runs["fwd"], files, "--readout", "shift"))
    assert _links(_align(runs["guided"], files)) == shift
    assert _links(_align(runs["guided"], files, "--readout", "current")) != shift
    plain = run_cli("translate", runs["fwd"], "-i", files["src"], "--greedy", "--align",
                    "--readout", "shift")
    guided = run_cli("translate", runs["guided"], "-i", files["src"], "--greedy", "--align")
    assert plain.exit_code == guided.exit_code == 0, (plain.output, guided.output)
    assert guided.stdout == plain.stdout


def test_translate_align_matches_align_on_the_translation(runs, files):
    for readout in ("current", "shift"):
        text = run_cli("translate", runs["fwd"], "-i", files["src"], "--greedy", "--align",
                       "--readout", readout)
        assert text.exit_code == 0, text.output
        from_translate = [set(parse_links(line.split(" ||| ")[1]).sure)
                          for line in text.stdout.splitlines()]
        aligned = run_cli("align", runs["fwd"], "-s", files["src"], "--greedy", "--pharaoh",
                          "-", "--readout", readout)
        assert _links(aligned) == from_translate, readout


def test_reverse_combines_the_two_directions(runs, files, tmp_path):
    fwd = _links(_align(runs["fwd"], files, "--readout", "shift"))
    # the reverse model on its own: target as source; its links turned into (source, target)
    back = [{(i, j) for j, i in links} for links in _links(_align(
        runs["rev"], files, "--readout", "shift", src="tgt", tgt="src"))]
    assert fwd != back  # otherwise nothing below could tell the directions apart
    for how, combine in (("intersection", set.intersection), ("union", set.union)):
        got = _links(_align(runs["fwd"], files, "--readout", "shift", "--reverse", runs["rev"],
                            "--symmetrize", how))
        assert got == [combine(f, b) for f, b in zip(fwd, back, strict=True)], how
    gdf = _links(_align(runs["fwd"], files, "--readout", "shift", "--reverse", runs["rev"]))
    for g, f, b in zip(gdf, fwd, back, strict=True):
        assert f & b <= g <= f | b
    scored = run_cli("align", runs["fwd"], "-s", files["src"], "-t", files["tgt"], "--gold",
                     files["gold"], "--reverse", runs["rev"], "--symmetrize", "intersection")
    assert scored.exit_code == 0 and scored.stdout.startswith("AER "), scored.output
    doc = run_cli("align", runs["fwd"], "-s", files["src"], "--greedy", "--json", "-",
                  "--reverse", runs["rev"], "--readout", "shift", "--align-method", "threshold")
    assert doc.exit_code == 0, doc.output
    assert json.loads(doc.stdout)["settings"] == {  # what made the links, for later readers
        "checkpoint": str(runs["fwd"] / "best.pt"),
        "attention": {"kind": "cross", "layer": -1, "head": "mean", "readout": "shift"},
        "level": "word", "method": "threshold", "threshold": 0.5,
        "targets": {"search": "greedy", "max_len_a": 1.2, "max_len_b": 5, "min_len": 0},
        "reverse": {"checkpoint": str(runs["rev"] / "best.pt"), "attention": {
            "kind": "cross", "layer": -1, "head": "mean", "readout": "shift"},
            "symmetrize": "grow-diag-final"}}


@pytest.mark.parametrize(("args", "fragment"), [
    (["--pharaoh", "-", "--readout", "next"],
     "--readout: invalid choice 'next'; expected one of current, shift"),
    (["--print", "--self-attention", "encoder", "--readout", "shift"],
     "--readout shift: chooses cross-attention rows; it excludes --self-attention"),
    (["--pharaoh", "-", "--symmetrize", "union"],
     "--symmetrize combines the links of two models: add --reverse RUN"),
    (["--pharaoh", "-", "--reverse", "{rev}", "--symmetrize", "gdf"],
     "--symmetrize: invalid choice 'gdf'; expected one of grow-diag-final, intersection"),
    (["--print", "--reverse", "{rev}"], "--reverse: combines links: add --pharaoh"),
    (["--pharaoh", "-", "--level", "subword", "--reverse", "{rev}"],
     "--reverse: needs --level word"),
    (["--pharaoh", "-", "--reverse", "{same}"],
     "translates xx -> yy; expected yy -> xx, the other direction"),
    (["--pharaoh", "-", "--reverse", "{rnn}", "--layer", "0"],
     "--reverse {rnn}: --layer and --head apply to Transformer models"),
])
def test_align_flag_errors_are_one_line_and_exit_2(runs, files, args, fragment):
    names = {k: str(v) for k, v in runs.items()}
    res = run_cli("align", runs["fwd"], "-s", files["src"], "-t", files["tgt"],
                  *(a.format(**names) for a in args))
    _one_line_error(res, fragment.format(**names))


@pytest.mark.parametrize(("args", "fragment"), [
    (["--readout", "shift"], "--readout needs --align"),
    (["--align", "--readout", "next"], "--readout: invalid choice 'next'; expected one of"),
])
def test_translate_flag_errors_are_one_line_and_exit_2(runs, files, args, fragment):
    _one_line_error(run_cli("translate", runs["fwd"], "-i", files["src"], *args), fragment)


def _one_line_error(res, fragment: str) -> None:
    assert res.exit_code == 2, res.output
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("mtkit: error: "), err
    assert fragment in err, err
    assert "Traceback" not in res.output
