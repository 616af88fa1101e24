"""`mtkit align` end to end on the toy reversal task: a Transformer trained briefly by
`mtkit train`, plus untrained RNN checkpoints (with and without attention) saved with the
checkpoint helpers; and the library pieces of mtkit.align.files that the CLI calls.

The toy words are single sentencepiece pieces, so word-level tokens are the words of each line.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from mtkit.align import AlignMatrix, parse_links, score_links
from mtkit.align import files as ar
from mtkit.align.viz import DEFAULT_DPI, figure_size
from mtkit.cli import app
from mtkit.config import DecodeConfig, ModelConfig, TransformerConfig, dump_recipe, load_recipe
from mtkit.data.batch import collate
from mtkit.data.batching import token_batches
from mtkit.data.spm import Tokenizer
from mtkit.decode import decode_batch
from mtkit.models.build import build_model
from mtkit.run import data_dir, load_model, save_checkpoint
from tests.helpers import REPO, run_cli

# One torch thread (see the `one_thread` fixture in conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")

TOY = REPO / "recipes" / "toy.yaml"
N = 8  # sentence pairs used


def _cli(*args: object):
    # COLUMNS pins rich's width for --print (no terminal under the runner)
    return run_cli("align", *args, env={"COLUMNS": "80"})


@pytest.fixture(scope="module")
def trained(toy_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy Transformer after 150 updates of `mtkit train` (read-only)."""
    run = tmp_path_factory.mktemp("align-toy") / "run"
    shutil.copytree(toy_run, run)
    result = CliRunner().invoke(app, [
        "train", str(TOY), "--run-dir", str(run), "--set", "train.max_updates=150",
        "--set", "train.valid_every=150", "--set", "train.max_time=null"])
    assert result.exit_code == 0, result.output
    return run


def _untrained(toy_run: Path, run: Path, overrides: list[str]) -> Path:
    """A run directory holding the toy data and a freshly initialised model's best.pt."""
    shutil.copytree(data_dir(toy_run), data_dir(run))
    recipe = load_recipe(TOY, overrides)
    tok = Tokenizer.load(data_dir(run))
    model = build_model(recipe.model, tok.src_vocab_size, tok.tgt_vocab_size)
    save_checkpoint(run / "best.pt", {
        "recipe": dump_recipe(recipe), "model": model.state_dict(),
        "vocab": {"src": tok.src_vocab_size, "tgt": tok.tgt_vocab_size}})
    return run


_RNN = ["model.arch=rnn", "model.rnn.emb_dim=16", "model.rnn.hidden_dim=16",
        "model.rnn.attn_dim=16"]


@pytest.fixture(scope="module")
def rnn_run(toy_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _untrained(toy_run, tmp_path_factory.mktemp("align-rnn"), _RNN)


@pytest.fixture(scope="module")
def no_attention_run(toy_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _untrained(toy_run, tmp_path_factory.mktemp("align-none"),
                      _RNN + ["model.rnn.attention=none"])


@pytest.fixture
def pairs(tmp_path: Path) -> dict[str, Path]:
    """N toy test pairs, their reversal gold links (one possible link added to the first
    line), the same gold 1-based, and target and gold files one line short."""
    src = (REPO / "recipes/toy/test.src").read_text().splitlines()[:N]
    tgt = (REPO / "recipes/toy/test.tgt").read_text().splitlines()[:N]
    gold = [" ".join(f"{i}-{len(s.split()) - 1 - i}" for i in range(len(s.split())))
            for s in src]
    gold[0] += " 0p0"
    one = [re.sub(r"(\d+)([-p])(\d+)", lambda m: f"{int(m[1]) + 1}{m[2]}{int(m[3]) + 1}", g)
           for g in gold]
    files = {"src": src, "tgt": tgt, "gold": gold, "gold1": one, "short": tgt[:-1],
             "goldshort": gold[:-1]}
    out = {}
    for name, lines in files.items():
        out[name] = tmp_path / f"{name}.txt"
        out[name].write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return out


# --------------------------------------------------------------------------- outputs


def test_forced_alignment_writes_every_output(trained, pairs, tmp_path):
    res = _cli(trained, "-s", pairs["src"], "-t", pairs["tgt"], "--pharaoh", tmp_path / "a.txt",
               "--json", tmp_path / "a.json", "--heatmap", tmp_path / "maps",
               "--gold", pairs["gold"])
    assert res.exit_code == 0, res.output
    src = pairs["src"].read_text().splitlines()
    tgt = pairs["tgt"].read_text().splitlines()
    links = (tmp_path / "a.txt").read_text().splitlines()
    doc = json.loads((tmp_path / "a.json").read_text())
    assert doc["format"] == "mtkit-align" and len(links) == len(doc["sentences"]) == N
    assert doc["settings"]["checkpoint"] == str(trained / "best.pt")
    assert doc["settings"]["targets"] == "given" and doc["settings"]["method"] == "argmax-tgt"
    for k, (rec, line) in enumerate(zip(doc["sentences"], links, strict=True)):
        assert rec["index"] == k and rec["level"] == "word"
        assert rec["src_tokens"] == src[k].split() and rec["tgt_tokens"] == tgt[k].split()
        weights = np.array(rec["weights"])
        assert weights.shape == (len(tgt[k].split()), len(src[k].split()))
        np.testing.assert_allclose(weights.sum(1), 1.0, atol=1e-3)  # EOS dropped, renormalised
        assert rec["links"] == line
        got = parse_links(line).sure  # argmax-tgt: one link per target word, to its argmax
        assert got == {(int(np.argmax(row)), j) for j, row in enumerate(weights)}
        gold = parse_links(pairs["gold"].read_text().splitlines()[k])
        assert rec["scores"] == pytest.approx(score_links(got, gold).as_dict())
    total = doc["scores"]
    assert total["hyp"] == sum(len(t.split()) for t in tgt)
    assert total["possible"] == total["sure"] + 1
    assert (f"AER {total['aer']:.4f}  precision {total['precision']:.4f}  "
            f"recall {total['recall']:.4f}") in res.stdout
    images = sorted((tmp_path / "maps").glob("align-*"))
    assert [p.name for p in images] == [f"align-{k:04d}.png" for k in range(N)]
    assert sorted(p.name for p in (tmp_path / "maps").iterdir()) == [
        *(p.name for p in images), "mtkit-heatmaps.json"]
    for path, rec in zip(images, doc["sentences"], strict=True):
        png = path.read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        matrix = AlignMatrix(np.array(rec["weights"]), tuple(rec["src_tokens"]),
                             tuple(rec["tgt_tokens"]), "word")
        w, h = figure_size(matrix)
        assert struct.unpack(">II", png[16:24]) == (w * DEFAULT_DPI, h * DEFAULT_DPI)


def test_one_based_gold_scores_the_same(trained, pairs, tmp_path):
    zero = _cli(trained, "-s", pairs["src"], "-t", pairs["tgt"], "--gold", pairs["gold"])
    one = _cli(trained, "-s", pairs["src"], "-t", pairs["tgt"], "--gold", pairs["gold1"],
               "--one-based")
    assert zero.exit_code == one.exit_code == 0, zero.output + one.output
    assert "AER " in zero.stdout and zero.stdout == one.stdout
    # a 0-based file read as 1-based holds impossible links
    wrong = _cli(trained, "-s", pairs["src"], "-t", pairs["tgt"], "--gold", pairs["gold"],
                 "--one-based")
    _error(wrong, "gold.txt:1: bad alignment link '0-3'")


def test_print_shows_every_token_within_80_columns(trained, pairs):
    res = _cli(trained, "-s", pairs["src"], "-t", pairs["tgt"], "--print", "--level", "subword")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert lines[0] == "sentence 0 (cross-attention, layer -1, head mean, subword level)"
    blocks = re.split(r"^sentence \d+ .*$", res.stdout, flags=re.M)[1:]
    assert len(blocks) == N
    for block, s, t in zip(blocks, pairs["src"].read_text().splitlines(),
                           pairs["tgt"].read_text().splitlines(), strict=True):
        cells = re.findall(r"\S+", block)
        assert all(f"\u2581{w}" in cells or any(c.endswith(f":\u2581{w}") for c in cells)
                   for w in s.split() + t.split())


@pytest.mark.parametrize("fmt", ["svg", "pdf"])
def test_heatmap_formats(trained, pairs, tmp_path, fmt):
    res = _cli(trained, "-s", pairs["src"], "-t", pairs["tgt"], "--heatmap", tmp_path / "m",
               "--heatmap-format", fmt)
    assert res.exit_code == 0, res.output
    first = (tmp_path / "m" / f"align-0000.{fmt}").read_bytes()
    assert len(list((tmp_path / "m").glob("align-*"))) == N
    if fmt == "pdf":
        assert first.startswith(b"%PDF")
    else:
        text = first.decode()
        for word in pairs["src"].read_text().split("\n")[0].split():
            assert f">{word}</text>" in text


def test_a_heatmap_rerun_leaves_only_its_own_images(trained, pairs, tmp_path):
    maps = tmp_path / "m"
    assert _cli(trained, "-s", pairs["src"], "-t", pairs["tgt"], "--heatmap", maps).exit_code == 0
    (tmp_path / "s").write_text("mu wi\n")
    (tmp_path / "t").write_text("wi mu\n")
    res = _cli(trained, "-s", tmp_path / "s", "-t", tmp_path / "t", "--heatmap", maps)
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in maps.glob("align-*")) == ["align-0000.png"]
    (maps / "notes.txt").write_text("mine")
    res = _cli(trained, "-s", tmp_path / "s", "-t", tmp_path / "t", "--heatmap", maps)
    assert res.exit_code == 2 and "did not write (notes.txt)" in res.stderr, res.output
    assert (maps / "notes.txt").read_text() == "mine"
    # a file of links among the heatmaps would make the folder not mtkit's own next time
    res = _cli(trained, "-s", tmp_path / "s", "-t", tmp_path / "t", "--heatmap", tmp_path / "n",
               "--json", tmp_path / "n" / "links.json")
    assert res.exit_code == 2 and "--json" in res.stderr and "inside the --heatmap folder" in (
        res.stderr), res.output
    # the folder itself (new): found only after every heatmap was drawn, naming no flag
    for flag in ("--json", "--pharaoh"):
        res = _cli(trained, "-s", tmp_path / "s", "-t", tmp_path / "t", "--heatmap",
                   tmp_path / "hm", flag, tmp_path / "hm")
        assert res.stderr == (f"mtkit: error: {flag} {tmp_path / 'hm'}: is the --heatmap "
                              f"folder; give {flag} a file of its own\n"), res.output
        assert not (tmp_path / "hm").exists()
    (maps / "notes.txt").unlink()
    image = maps / "align-0000.png"  # an input among the images would be drawn over
    before = image.read_bytes()
    res = _cli(trained, "-s", image, "-t", tmp_path / "t", "--heatmap", maps)
    assert res.exit_code == 2 and f"-s {image}: inside the --heatmap folder" in res.stderr
    assert image.read_bytes() == before
    (tmp_path / "e").write_text("")  # no pairs: the folder is made, holding no heatmap
    res = _cli(trained, "-s", tmp_path / "e", "-t", tmp_path / "e", "--heatmap", tmp_path / "m2")
    assert res.exit_code == 0, res.output
    assert [p.name for p in (tmp_path / "m2").iterdir()] == ["mtkit-heatmaps.json"]


def test_empty_pairs_get_empty_link_lines(trained, tmp_path):
    (tmp_path / "s").write_text("mu wi\n\nmu\n")
    (tmp_path / "t").write_text("wi mu\n\n\n")
    res = _cli(trained, "-s", tmp_path / "s", "-t", tmp_path / "t", "--pharaoh", "-",
               "--heatmap", tmp_path / "m")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert len(lines) == 3 and lines[1:] == ["", ""] and len(lines[0].split()) == 2
    assert len(list((tmp_path / "m").glob("align-*"))) == 3


def test_a_blank_source_line_gets_no_translation_to_align(toy_run, tmp_path):
    """Without -t, a blank line was translated from its EOS alone into a sentence out of
    nothing, shown and linked; `mtkit translate` gives it an empty line. (An untrained model:
    the trained toy model ends an empty source at once.)"""
    torch.manual_seed(3)
    run = _untrained(toy_run, tmp_path / "run", [])
    (tmp_path / "s").write_text("mu wi\n\n   \nmu\n")
    res = _cli(run, "-s", tmp_path / "s", "--greedy", "--json", "-")
    assert res.exit_code == 0, res.output
    records = json.loads(res.stdout)["sentences"]
    assert [r["tgt_tokens"] == [] for r in records] == [False, True, True, False]
    assert records[1]["links"] == records[2]["links"] == ""


def test_json_to_stdout_holds_the_links_written_to_a_file(trained, pairs, tmp_path):
    res = _cli(trained, "-s", pairs["src"], "-t", pairs["tgt"], "--json", "-",
               "--pharaoh", tmp_path / "links")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["format"] == "mtkit-align" and not (Path.cwd() / "-").exists()
    assert [s["links"] for s in doc["sentences"]] == (tmp_path / "links").read_text().splitlines()


def test_a_dash_reads_the_source_or_the_target_from_stdin(trained, pairs):
    files = _cli(trained, "-s", pairs["src"], "-t", pairs["tgt"], "--pharaoh", "-")
    assert files.exit_code == 0, files.output
    for side in ("src", "tgt"):
        args = {"src": pairs["src"], "tgt": pairs["tgt"]} | {side: "-"}
        piped = run_cli("align", trained, "-s", args["src"], "-t", args["tgt"], "--pharaoh",
                        "-", input=pairs[side].read_text())
        assert piped.exit_code == 0, piped.output
        assert piped.stdout == files.stdout
    _error(_cli(trained, "-s", "-", "-t", "-", "--pharaoh", "-"), "standard input can be one")


def test_methods_and_threshold(trained, pairs):
    def links(*args: str) -> list[set]:
        res = _cli(trained, "-s", pairs["src"], "-t", pairs["tgt"], "--pharaoh", "-", *args)
        assert res.exit_code == 0, res.output
        return [parse_links(line).sure for line in res.stdout.splitlines()]

    def method(name: str, *args: str) -> list[set]:
        return links("--align-method", name, *args)

    tgt, src = links(), method("argmax-src")
    inter, union = method("intersection"), method("union")
    assert inter == [a & b for a, b in zip(tgt, src, strict=True)]
    assert union == [a | b for a, b in zip(tgt, src, strict=True)]
    low, high = (method("threshold", "--threshold", t) for t in ("0.1", "0.9"))
    assert all(h <= lo for h, lo in zip(high, low, strict=True))
    assert sum(map(len, low)) > sum(map(len, high))


# --------------------------------------------------------------------------- translate first


def test_translate_first_aligns_the_search_output(trained, pairs, tmp_path):
    res = _cli(trained, "-s", pairs["src"], "--greedy", "--json", tmp_path / "a.json")
    assert res.exit_code == 0, res.output
    model, _, tok = load_model(trained, "cpu")
    src_ids = tok.encode_src_lines(pairs["src"].read_text().splitlines())
    batch = collate(src_ids, None, range(N))
    hyps = decode_batch(model, batch, DecodeConfig(method="greedy"), need_attn=True)
    doc = json.loads((tmp_path / "a.json").read_text())
    for rec, nbest in zip(doc["sentences"], hyps, strict=True):
        assert rec["tgt_tokens"] == tok.decode_tgt(nbest[0].tokens).split()
    # re-forcing the hypothesis reads the attention the search saw (toy align_layer: -1)
    got = [ar.Pair(k, s, nb[0].tokens)
           for k, (s, nb) in enumerate(zip(src_ids, hyps, strict=True))]
    maps = ar.pair_attention(model, got, model.choose_attention(layer=-1),
                             device=torch.device("cpu"), batch_tokens=100)
    for m, nbest in zip(maps, hyps, strict=True):
        np.testing.assert_allclose(m, nbest[0].attn.numpy(), atol=1e-5)


# --------------------------------------------------------------------------- attention choice


def test_self_attention_matrices(trained, pairs, tmp_path):
    for kind in ("encoder", "decoder"):
        res = _cli(trained, "-s", pairs["src"], "-t", pairs["tgt"], "--self-attention", kind,
                   "--layer", "0", "--head", "1", "--level", "subword", "--json",
                   tmp_path / f"{kind}.json")
        assert res.exit_code == 0, res.output
        side = pairs["src" if kind == "encoder" else "tgt"].read_text().splitlines()
        for rec, line in zip(json.loads((tmp_path / f"{kind}.json").read_text())["sentences"],
                             side, strict=True):
            pieces = [f"\u2581{w}" for w in line.split()]
            assert rec["src_tokens"] == rec["tgt_tokens"] == pieces
            w = np.array(rec["weights"])
            np.testing.assert_allclose(w.sum(1), 1.0, atol=1e-3)
            if kind == "decoder":  # causal: no query sees a later token
                assert np.triu(w, 1).max(initial=0) == 0.0
        shown = _cli(trained, "-s", pairs["src"], "-t", pairs["tgt"], "--self-attention", kind,
                     "--layer", "0", "--print")
        assert shown.exit_code == 0, shown.output
        assert "qry \\ key" in shown.stdout and "key: 0:" in shown.stdout
        assert "tgt \\ src" not in shown.stdout


def test_head_mean_is_the_mean_of_the_heads():
    # align_head set: the model's own default is that head, so the mean is asked for here
    cfg = ModelConfig(transformer=TransformerConfig(
        d_model=16, heads=4, enc_layers=1, dec_layers=2, ffn_dim=16, align_head=2))
    model = build_model(cfg, 12, 12).eval()
    pairs = [ar.Pair(0, [4, 5, 6], [7, 8]), ar.Pair(1, [9], [10, 11, 4, 5])]

    def maps(choice) -> list[np.ndarray]:
        return ar.pair_attention(model, pairs, choice, device=torch.device("cpu"),
                                 batch_tokens=100)

    assert model.choose_attention(layer=0).head == 2
    mean = maps(model.choose_attention(layer=0, head="mean"))
    heads = [maps(model.choose_attention(layer=0, head=h)) for h in range(4)]
    for k, m in enumerate(mean):
        assert m.shape == (len(pairs[k].tgt) + 1, len(pairs[k].src) + 1)
        np.testing.assert_allclose(m, np.mean([h[k] for h in heads], axis=0), atol=1e-6)
        assert not np.allclose(m, heads[2][k])  # not the model's default head


def test_token_batches_respect_the_budget():
    sizes = [5, 1, 9, 3, 3, 7, 2]
    batches = list(token_batches(sizes, 12))
    assert sorted(i for b in batches for i in b) == list(range(len(sizes)))
    assert all(max(sizes[i] for i in b) * len(b) <= 12 for b in batches)
    assert list(token_batches([20], 12)) == [[0]]  # too big alone still goes


def test_rnn_model_aligns_without_layers(rnn_run, pairs):
    res = _cli(rnn_run, "-s", pairs["src"], "-t", pairs["tgt"], "--pharaoh", "-")
    assert res.exit_code == 0, res.output
    tgt = pairs["tgt"].read_text().splitlines()
    assert [len(line.split()) for line in res.stdout.splitlines()] == [len(t.split()) for t in tgt]


# --------------------------------------------------------------------------- errors


def _error(res, fragment: str) -> None:
    assert res.exit_code == 2, res.output
    err = res.stderr.strip()
    assert err.startswith("mtkit: error: ") and "\n" not in err and "Traceback" not in err
    assert fragment in err, err


def test_model_without_attention_is_one_clear_error(no_attention_run, pairs):
    res = _cli(no_attention_run, "-s", pairs["src"], "-t", pairs["tgt"], "--print")
    _error(res, "this model has no attention (model.rnn.attention: none")


def test_rnn_rejects_layers_and_self_attention(rnn_run, pairs):
    base = ["-s", pairs["src"], "-t", pairs["tgt"], "--print"]
    _error(_cli(rnn_run, *base, "--layer", "0"), "--layer and --head apply to Transformer")
    _error(_cli(rnn_run, *base, "--self-attention", "encoder"),
           "an RNN model has no self-attention")


@pytest.mark.parametrize(("args", "fragment"), [
    (["-s", "{tmp}/missing.txt", "-t", "{tgt}", "--print"], "missing.txt: source file not found"),
    (["-s", "{src}", "-t", "{tmp}/nope.txt", "--print"], "nope.txt: target file not found"),
    (["-s", "{src}", "-t", "{short}", "--print"],
     f"short.txt: {N - 1} lines, but the source"),
    (["-s", "{src}", "-t", "{tgt}", "--gold", "{goldshort}"], f"{N - 1} lines of gold links"),
    (["-s", "{src}", "-t", "{tgt}", "--gold", "{src}"], "bad alignment link"),
    (["-s", "{src}", "-t", "{tgt}"], "nothing to do"),
    (["-s", "{src}", "-t", "{tgt}", "--print", "--beam", "4"], "--beam: search options apply"),
    (["-s", "{src}", "--gold", "{gold}"], "--gold needs -t"),
    (["-s", "{src}", "-t", "{tgt}", "--print", "--heatmap-format", "svg"],
     "--heatmap-format applies to --heatmap DIR"),
    (["-s", "{src}", "-t", "{tgt}", "--heatmap", "{tmp}/m", "--heatmap-format", "gif"],
     "--heatmap-format: invalid choice 'gif'; expected one of png, svg, pdf"),
    (["-s", "{src}", "-t", "{tgt}", "--print", "--layer", "2"], "--layer 2: the model has 2"),
    (["-s", "{src}", "-t", "{tgt}", "--print", "--head", "4"], "--head 4: the model has 4"),
    (["-s", "{src}", "-t", "{tgt}", "--print", "--head", "all"], "--head: expected a head"),
    (["-s", "{src}", "-t", "{tgt}", "--print", "--level", "char"], "--level: invalid choice"),
    (["-s", "{src}", "-t", "{tgt}", "--pharaoh", "-", "--align-method", "best"],
     "--align-method: invalid choice 'best'; expected one of argmax-tgt,"),
    (["-s", "{src}", "-t", "{tgt}", "--pharaoh", "-", "--threshold", "0.3"],
     "--threshold: applies only to --align-method threshold"),
    (["-s", "{src}", "-t", "{tgt}", "--pharaoh", "-", "--align-method", "threshold",
      "--threshold", "2"], "--threshold 2.0: expected an attention weight in (0, 1]"),
    (["-s", "{src}", "-t", "{tgt}", "--print", "--align-method", "union"], "apply to links"),
    (["-s", "{src}", "-t", "{tgt}", "--print", "--self-attention", "cross"],
     "--self-attention: invalid choice"),
    # only the flags given are named ('--print, --pharaoh - and --json -' for any two)
    (["-s", "{src}", "-t", "{tgt}", "--print", "--pharaoh", "-"],
     "error: --print and --pharaoh - each write to stdout: give all but one a file"),
    (["-s", "{src}", "-t", "{tgt}", "--json", "-", "--pharaoh", "-"],
     "error: --pharaoh - and --json - each write to stdout"),
    (["-s", "{src}", "-t", "{tgt}", "--json", "-", "--pharaoh", "-", "--print"],
     "error: --print, --pharaoh - and --json - each write to stdout"),
    (["-s", "{src}", "-t", "{tgt}", "--print", "--device", "gpu"],
     "--device: expected auto, cpu, cuda, cuda:N or mps, got 'gpu'"),
    (["-s", "{src}", "--print", "--beam", "0"], "--beam (decode.beam_size): out of range"),
    (["-s", "{src}", "--print", "--greedy", "--alpha", "-1"], "--alpha (decode.alpha): out of"),
    # accepted and ignored before: gold word links scored against pieces, penalties unused
    (["-s", "{src}", "-t", "{tgt}", "--gold", "{gold}", "--level", "subword"],
     "--gold: links are between words: scoring them needs --level word"),
    (["-s", "{src}", "--print", "--greedy", "--length-penalty", "none"],
     "--length-penalty: with greedy search the length penalty changes only the score"),
    (["-s", "{src}", "--print", "--length-penalty", "average", "--alpha", "0.5"],
     "--alpha is the GNMT penalty's exponent, or power's; the length penalty is average"),
    (["-s", "{src}", "--print", "--greedy", "--alpha", "0"], "--alpha: with greedy search"),
    (["-s", "{src}", "-t", "{tgt}", "--print", "--min-len", "0"],
     "--min-len: search options apply only without -t"),  # 0 is given too
])
def test_bad_input_is_one_line_and_exit_2(trained, pairs, tmp_path, args, fragment):
    names = {k: str(v) for k, v in pairs.items()} | {"tmp": str(tmp_path)}
    _error(_cli(trained, *(a.format(**names) for a in args)), fragment)


def test_an_input_error_names_its_flag(trained, pairs, tmp_path):
    _error(_cli(trained, "-s", tmp_path, "--print"),
           f"-s {tmp_path}: is a folder; expected the source file")
    _error(_cli(trained, "-s", pairs["src"], "-t", tmp_path / "nope", "--print"),
           f"-t {tmp_path / 'nope'}: target file not found")


def test_a_corrupt_gzip_input_is_one_line(trained, pairs, tmp_path):
    """Not a traceback (zlib's error was not caught; a file cut short was)."""
    bad = tmp_path / "bad.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbagegarbage")
    _error(_cli(trained, "-s", bad, "--print"), "bad.gz: cannot read the source file")
    _error(_cli(trained, "-s", pairs["src"], "-t", pairs["tgt"], "--gold", bad),
           "cannot read gold alignments")


def test_gold_link_outside_the_sentence(trained, pairs, tmp_path):
    lines = pairs["gold"].read_text().splitlines()
    lines[3] = "0-9"
    (tmp_path / "g").write_text("\n".join(lines) + "\n")
    res = _cli(trained, "-s", pairs["src"], "-t", pairs["tgt"], "--gold", tmp_path / "g",
               "--pharaoh", tmp_path / "out")
    _error(res, "g:4: gold link 0-9 (0-based) is outside the sentence pair")
    assert not (tmp_path / "out").exists()  # nothing half-written
    # with --one-based the link is quoted as the file has it (it read 0-9 for the file's 1-10)
    shifted = [re.sub(r"\d+", lambda m: str(int(m[0]) + 1), line) for line in lines]
    (tmp_path / "g1").write_text("\n".join(shifted) + "\n")
    res = _cli(trained, "-s", pairs["src"], "-t", pairs["tgt"], "--gold", tmp_path / "g1",
               "--one-based", "--pharaoh", tmp_path / "out")
    _error(res, "g1:4: gold link 1-10 (1-based) is outside the sentence pair")
    # found before any output: the first three pairs' links went to stdout before the error
    res = _cli(trained, "-s", pairs["src"], "-t", pairs["tgt"], "--gold", tmp_path / "g",
               "--pharaoh", "-")
    _error(res, "g:4: gold link 0-9 (0-based) is outside the sentence pair")
    assert res.stdout == ""


def test_heatmap_characters_the_font_lacks_are_said_once(trained, tmp_path):
    """CJK and emoji labels were drawn as boxes without a word (matplotlib's warning was
    silenced with the empty-frame one). Private-use characters, which no font draws, stand
    for them here: a machine's fonts may have CJK or emoji."""
    (tmp_path / "s").write_text("mu gu\nsa mu\n")
    (tmp_path / "t").write_text("gu \U0010fffd\U0010fffc\nmu \U0010fffd\n")
    res = _cli(trained, "-s", tmp_path / "s", "-t", tmp_path / "t", "--heatmap", tmp_path / "h")
    assert res.exit_code == 0, res.output
    said = [line for line in res.stderr.splitlines() if "no glyph" in line]
    assert said == ["mtkit: warning: heatmaps: the font has no glyph for "
                    f"{chr(0x10fffc) + chr(0x10fffd)!r}, drawn as boxes; name a font that has "
                    "them in a matplotlibrc (font.family)"]
    # SVG keeps its labels as text, which the viewer's fonts draw: nothing to say
    res = _cli(trained, "-s", tmp_path / "s", "-t", tmp_path / "t", "--heatmap", tmp_path / "v",
               "--heatmap-format", "svg")
    assert res.exit_code == 0 and "no glyph" not in res.stderr, res.output


def test_a_terminal_too_narrow_for_print_is_refused_before_any_work(trained, pairs, tmp_path):
    """It failed after the model had run, naming no flag, and the --pharaoh file asked for
    was not written."""
    res = run_cli("align", trained, "-s", pairs["src"], "-t", pairs["tgt"], "--print",
                  "--pharaoh", tmp_path / "links", env={"COLUMNS": "20"})
    _error(res, "--print: the terminal is 20 columns wide; its tables need 24")
    assert not (tmp_path / "links").exists()


def test_gold_on_a_line_whose_words_the_pieces_cannot_follow(trained, tmp_path):
    """Gold links count whitespace words; a line whose words its pieces cannot be matched to
    (sentencepiece drops the NEL between 'sa' and 'gu') is aligned over the words its pieces
    decode to. Its gold was checked against the whitespace words first, then failed mid-run
    against the others (with the outputs half written): now refused before any output."""
    (tmp_path / "s").write_text("mu gu\nmu gu sa\n")
    (tmp_path / "t").write_text("gu mu\nsa\x85gu mu\n")
    (tmp_path / "g").write_text("0-1 1-0\n0-2\n")
    res = _cli(trained, "-s", tmp_path / "s", "-t", tmp_path / "t", "--gold", tmp_path / "g",
               "--pharaoh", "-")
    _error(res, f"{tmp_path / 'g'}:2: gold links count the whitespace words of {tmp_path / 't'}:2 "
           "(3), which its sentencepiece pieces cannot be matched to")
    assert res.stdout == ""


def test_words_are_the_lines_whitespace_words(trained, tmp_path):
    """Sentencepiece's normalization turns a zero-width space and U+FFFD into spaces: its
    words were the words of the normalized line, so 'mu\u200bwi' counted as two, every index
    after it shifted and a gold link to the last word was refused (or scored the wrong word).
    Links, labels and gold indices count the line's whitespace words, as Pharaoh files do."""
    (tmp_path / "s").write_text("sa mu\u200bwi gu\npel\ufffdnel dar\n", encoding="utf-8")
    (tmp_path / "t").write_text("gu wi mu sa\ndar nel pel\n", encoding="utf-8")
    (tmp_path / "g").write_text("0-3 1-1 1-2 2-0\n0-1 0-2 1-0\n")
    res = _cli(trained, "-s", tmp_path / "s", "-t", tmp_path / "t", "--gold", tmp_path / "g",
               "--json", tmp_path / "a.json", "--pharaoh", tmp_path / "a.txt")
    assert res.exit_code == 0, res.output
    assert "warning" not in res.stderr
    records = json.loads((tmp_path / "a.json").read_text())["sentences"]
    assert records[0]["src_tokens"] == ["sa", "mu\u200bwi", "gu"]
    assert records[1]["src_tokens"] == ["pel\ufffdnel", "dar"]
    assert [np.array(r["weights"]).shape for r in records] == [(4, 3), (3, 2)]
    for line in (tmp_path / "a.txt").read_text().splitlines():
        assert all(int(link.split("-")[0]) < 3 for link in line.split())


def test_a_tokenizer_that_merges_words_is_named(trained, tmp_path, monkeypatch):
    """Where encoding each word alone does not give the line's pieces, the words are those
    the pieces decode to, and a warning names the line."""
    (tmp_path / "s").write_text("sa gu\nmu wi\n")
    (tmp_path / "t").write_text("gu sa\nwi mu\n")
    encode = Tokenizer.encode_src

    def merged(self, line):  # a tokenizer that encodes 'mu' alone otherwise than in a line
        ids = encode(self, line)
        return ids[:-1] if line == "mu" else ids

    monkeypatch.setattr(Tokenizer, "encode_src", merged)
    res = _cli(trained, "-s", tmp_path / "s", "-t", tmp_path / "t", "--pharaoh", "-")
    assert res.exit_code == 0, res.output
    assert "s:2: the tokenizer does not keep the line's whitespace words apart" in res.stderr
    assert "s:1" not in res.stderr and len(res.stdout.splitlines()) == 2


def test_a_sentence_longer_than_learned_positions_is_named(toy_run, tmp_path):
    """It failed mid-run: 'sequence of 51 tokens is longer than ...', no file, no line."""
    run = _untrained(toy_run, tmp_path / "run", ["model.transformer.positions=learned",
                                                 "model.transformer.max_positions=33"])
    (tmp_path / "s").write_text("sa gu\n" + "sa gu " * 20 + "\n")
    (tmp_path / "t").write_text("gu sa\ngu sa\n")
    _error(_cli(run, "-s", tmp_path / "s", "-t", tmp_path / "t", "--print"),
           f"-s {tmp_path / 's'}:2: 40 tokens, more than the model's 33 positions allow")


def test_a_source_longer_than_location_attention_scores_is_named(toy_run, tmp_path):
    run = _untrained(toy_run, tmp_path / "run", _RNN + [
        "model.rnn.attention=location", "model.rnn.placement=luong",
        "model.rnn.max_positions=33"])
    (tmp_path / "s").write_text("sa gu\n" + "sa gu " * 20 + "\n")
    (tmp_path / "t").write_text("gu sa\ngu sa\n")
    _error(_cli(run, "-s", tmp_path / "s", "-t", tmp_path / "t", "--print"),
           f"-s {tmp_path / 's'}:2: 40 tokens, more than the model's 33 positions allow "
           "(with EOS or BOS; model.rnn.max_positions)")
