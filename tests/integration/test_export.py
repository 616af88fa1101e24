"""`mtkit export --engine ctranslate2` and `mtkit translate DIR`: the exported float32 model
computes what mtkit computes, for every Transformer option; errors are one line.

Tiny random models stand in for trained ones where exactness is the question (greedy output,
teacher-forced log-probabilities, attention); the trained toy model (conftest `toy_model`)
where the search must agree (beam with the matching length penalty) and int8 must translate.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from mtkit.cli import app
from mtkit.config import dump_recipe, load_recipe
from mtkit.data.batch import collate
from mtkit.data.prep import prepare
from mtkit.data.spm import Tokenizer
from mtkit.data.store import text_path
from mtkit.models.build import build_model
from mtkit.models.vocab import BOS_ID, EOS_ID, PAD_ID
from mtkit.run import data_dir, save_checkpoint
from tests.helpers import RECIPES

ct2 = pytest.importorskip(
    "ctranslate2", reason="CTranslate2 is an optional extra: pip install 'mtkit[ctranslate2]' "
    "(make test installs it)")

pytestmark = pytest.mark.usefixtures("one_thread")

# Every architecture option mtkit trains, crossed; alignment layer/head vary along.
OPTIONS = [dict(norm=n, share_embeddings=s, positions=p, activation=a)
           for n, s, p, a in itertools.product(("pre", "post"), (True, False),
                                               ("sinusoidal", "learned"), ("relu", "gelu"))]


def _cli(*args: object, input: str | None = None):
    return CliRunner().invoke(app, [str(a) for a in args], input=input)


def _random_run(base: Path, run: Path, options: dict, *, align_layer: int = -1,
                align_head: int | None = None, seed: int = 0, joint: bool = True) -> Path:
    """A run directory holding an untrained tiny Transformer as best.pt, on `base`'s prepared
    data. Weights are perturbed so that no layer is trivial; PAD and BOS get no mass, as in
    any trained model (mtkit never produces them; see ct2_translate's note on renormalising)."""
    shutil.copytree(base, run)
    sets = [f"model.transformer.{k}={str(v).lower()}" for k, v in options.items()]
    sets += ["model.transformer.d_model=32", "model.transformer.ffn_dim=48",
             f"model.transformer.align_layer={align_layer}",
             f"model.transformer.align_head={'null' if align_head is None else align_head}",
             f"data.spm.joint={str(joint).lower()}"]
    recipe = load_recipe(RECIPES / "toy.yaml", sets)
    tok = Tokenizer.load(data_dir(run))
    torch.manual_seed(seed)
    model = build_model(recipe.model, tok.src_vocab_size, tok.tgt_vocab_size)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
        model.generator.bias[[PAD_ID, BOS_ID]] = -30.0
        model.generator.bias[EOS_ID] += 2.0  # some outputs end before their limit
    save_checkpoint(run / "best.pt", {
        "recipe": dump_recipe(recipe), "model": model.state_dict(),
        "vocab": {"src": tok.src_vocab_size, "tgt": tok.tgt_vocab_size,
                  "sha256": tok.fingerprint()}})
    return run


def _export(run: Path, out: Path, *extra: str) -> Path:
    res = _cli("export", run, "-o", out, *extra)
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture(scope="module")
def test_src(toy_run: Path) -> Path:
    return text_path(data_dir(toy_run), "test", "src")


@pytest.mark.parametrize("i", range(len(OPTIONS)),
                         ids=["-".join(str(v) for v in o.values()) for o in OPTIONS])
def test_float32_export_greedy_and_attention_equal_mtkit(i, toy_run, test_src, tmp_path):
    options = OPTIONS[i]
    run = _random_run(toy_run, tmp_path / "run", options, align_layer=i % 2 - 1,
                      align_head=None if i % 3 == 0 else i % 4, seed=i)
    out = _export(run, tmp_path / "ct2")
    # every other set reads the shift rows: the engine's attention must hold the step after
    # the last kept token (whose input it is) as mtkit's search does
    readout = ("current", "shift")[i % 2]
    want = _cli("translate", run, "--greedy", "--align", "--readout", readout, "-i", test_src)
    got = _cli("translate", out, "--greedy", "--align", "--readout", readout, "-i", test_src)
    assert want.exit_code == 0 and got.exit_code == 0, (want.output, got.output)
    assert got.stdout == want.stdout
    assert len(set(want.stdout.splitlines())) > 10  # not one degenerate output for all


def _teacher_forced(run: Path) -> tuple[torch.Tensor, list[list[str]], list[list[str]]]:
    """mtkit's log-probabilities of the toy test targets, (B, T) with EOS, and the pieces
    (without the EOS, which the engine adds)."""
    from mtkit.run import load_model

    model, _, tok = load_model(run)
    ddir = data_dir(run)
    srcs = tok.encode_src_lines(text_path(ddir, "test", "src").read_text().splitlines())
    tgts = tok.encode_tgt_lines(text_path(ddir, "test", "tgt").read_text().splitlines())
    b = collate(srcs, tgts, range(len(srcs)))
    with torch.no_grad():
        logits = model(b.src, b.src_lens, b.tgt_in).logits
    lp = logits.log_softmax(-1).gather(2, b.tgt_out.unsqueeze(2)).squeeze(2)
    lp = lp.masked_fill(b.tgt_out == PAD_ID, 0.0)
    # the engine ends each source with EOS (add_source_eos)
    return lp, [tok.src_pieces(s) for s in srcs], [tok.tgt_pieces(t) for t in tgts]


@pytest.mark.parametrize("limits", [(), ("--max-len-a", "0.5", "--max-len-b", "1")])
def test_beam_links_equal_mtkit_for_every_sentence_of_a_batch(limits, toy_run, test_src,
                                                              tmp_path):
    """The engine's beam search gave sentence i of a batch the first step's attention of
    sentence i // beam (CTranslate2 4.x): its first target word linked where another
    sentence's did. The export's links are mtkit's, batch-mates included, and for outputs
    that end at their limit (the engine's last step has no EOS row: it is added)."""
    run = _random_run(toy_run, tmp_path / "run", OPTIONS[1], align_head=1, seed=11)
    out = _export(run, tmp_path / "ct2")
    args = ("--beam", "3", "--length-penalty", "average", "--align", "--readout", "shift",
            *limits, "-i", test_src)
    want, got = _cli("translate", run, *args), _cli("translate", out, *args)
    assert want.exit_code == 0 and got.exit_code == 0, (want.output, got.output)
    # a random model's beam has near ties, which the engines may break apart: the lines where
    # both chose the same words are compared
    pairs = [(w.split(" ||| "), g.split(" ||| ")) for w, g in zip(
        want.stdout.splitlines(), got.stdout.splitlines(), strict=True)]
    same = [(w[1], g[1]) for w, g in pairs if w[0] == g[0]]
    assert len(same) >= 30 and len({w.split(" ")[0] for w, _ in same}) > 2
    assert [g for _, g in same] == [w for w, _ in same]


@pytest.mark.parametrize("i", range(0, len(OPTIONS), 3))
def test_float32_export_teacher_forced_scores_match(i, toy_run, tmp_path):
    run = _random_run(toy_run, tmp_path / "run", OPTIONS[i], align_head=1, seed=100 + i)
    out = _export(run, tmp_path / "ct2")
    want, src, tgt = _teacher_forced(run)
    scored = ct2.Translator(str(out), intra_threads=1).score_batch(src, tgt)
    for row, res in zip(want, scored, strict=True):
        got = torch.tensor(res.log_probs)  # the target's tokens and EOS
        torch.testing.assert_close(got, row[: got.numel()], atol=1e-4, rtol=0)
        assert bool((row[got.numel():] == 0).all())


@pytest.fixture(scope="module")
def toy_run_separate(toy_recipe_path, tmp_path_factory) -> Path:
    """The toy data with separate source and target sentencepiece models."""
    run = tmp_path_factory.mktemp("toy-separate")
    prepare(load_recipe(toy_recipe_path, ["data.spm.joint=false",
                                          "model.transformer.share_embeddings=false"]), run)
    return run


def test_separate_vocabularies_export_exactly(toy_run_separate, test_src, tmp_path):
    run = _random_run(toy_run_separate, tmp_path / "run",
                      dict(norm="post", share_embeddings=False, positions="sinusoidal",
                           activation="relu"), align_head=3, seed=7, joint=False)
    out = _export(run, tmp_path / "ct2")
    assert (out / "spm.src.model").is_file() and (out / "spm.tgt.model").is_file()
    want = _cli("translate", run, "--greedy", "--align", "-i", test_src).stdout
    assert _cli("translate", out, "--greedy", "--align", "-i", test_src).stdout == want
    expected, src, tgt = _teacher_forced(run)
    scored = ct2.Translator(str(out), intra_threads=1).score_batch(src, tgt)
    for row, res in zip(expected, scored, strict=True):
        torch.testing.assert_close(torch.tensor(res.log_probs), row[: len(res.log_probs)],
                                   atol=1e-4, rtol=0)


@pytest.fixture(scope="module")
def toy_export(toy_model: Path, tmp_path_factory) -> Path:
    return _export(toy_model, tmp_path_factory.mktemp("toy-export") / "ct2")


@pytest.mark.parametrize("penalty", ["average", "none", "power"])
def test_beam_matches_with_the_matching_length_penalty(penalty, toy_model, toy_export,
                                                       test_src):
    """1-best output and score agree under the shared penalties (power: alpha 0.6, the
    engine's length_penalty 0.6); with `average` the whole 3-best list does too. (With `none`
    the engines' finishing rules differ below the best: mtkit finishes only EOS ranked among
    the K best candidates, as fairseq does.)"""
    args = ("--beam", "5", "--nbest", "3", "--length-penalty", penalty, "--format", "jsonl",
            "-i", test_src, *(("--alpha", "0.6") if penalty == "power" else ()))
    want = [json.loads(line) for line in _cli("translate", toy_model, *args).stdout.splitlines()]
    got = [json.loads(line) for line in _cli("translate", toy_export, *args).stdout.splitlines()]
    assert len(got) == len(want) == 60
    deep = 3 if penalty == "average" else 1
    for w, g in zip(want, got, strict=True):
        assert [h["hypothesis"] for h in g["nbest"][:deep]] == [
            h["hypothesis"] for h in w["nbest"][:deep]]
        for hw, hg in zip(w["nbest"][:deep], g["nbest"][:deep], strict=True):
            # the engine renormalises over the tokens it allows (no PAD, BOS); the toy model
            # still gives those a little mass, hence scores agree to about 1%
            assert hg["score"] == pytest.approx(hw["score"], rel=1e-2, abs=1e-3)


# Limits of floor(0.5 n) + 1 target tokens: most toy outputs (as long as their source) are cut,
# and a batch holds sentences of different limits.
SHORT = ("--max-len-a", "0.5", "--max-len-b", "1", "--format", "jsonl")


def test_outputs_cut_at_their_limit_score_as_cut_whatever_the_batch(toy_model, toy_export,
                                                                      test_src, tmp_path):
    """The engine decodes a batch to its largest limit: an output cut to its own limit kept
    the longer output's score (-153 against mtkit's -91 on test2016), which changed with the
    rest of the batch."""
    args = ("--greedy", "--length-penalty", "none", *SHORT)
    want = [json.loads(x) for x in _cli("translate", toy_model, *args, "-i", test_src).stdout
            .splitlines()]
    got = [json.loads(x) for x in _cli("translate", toy_export, *args, "-i", test_src).stdout
           .splitlines()]
    limits = [int(0.5 * len(w["source"].split())) + 1 for w in want]
    at_limit = sum(w["tokens"] == n for w, n in zip(want, limits, strict=True))
    assert len(set(limits)) >= 3 and at_limit > 40
    for w, g in zip(want, got, strict=True):
        assert g["hypothesis"] == w["hypothesis"]
        assert g["score"] == pytest.approx(w["score"], rel=1e-2, abs=1e-3)
    for i in (0, 17, 42):
        one = tmp_path / "one.txt"
        one.write_text(want[i]["source"] + "\n")
        alone = json.loads(_cli("translate", toy_export, *args, "-i", one).stdout)
        assert alone["score"] == pytest.approx(got[i]["score"], abs=1e-5)


@pytest.mark.parametrize("penalty, b", [("average", "1"), ("none", "2"), ("average", "2")])
def test_a_beam_cut_at_its_limit_keeps_mtkits_best(penalty, b, toy_model, toy_export,
                                                   test_src):
    """Outputs that differ only past a sentence's limit were cut to the same text and listed
    twice, with different scores; the 1-best could differ from mtkit's, also when hypotheses
    that ended before the limit were crowded out of the engine's list by unfinished ones
    (scored without their EOS)."""
    args = ("--beam", "5", "--nbest", "3", "--length-penalty", penalty, "--max-len-a", "0.5",
            "--max-len-b", b, "--format", "jsonl", "-i", test_src)
    want = [json.loads(x) for x in _cli("translate", toy_model, *args).stdout.splitlines()]
    got = [json.loads(x) for x in _cli("translate", toy_export, *args).stdout.splitlines()]
    for w, g in zip(want, got, strict=True):
        texts = [h["hypothesis"] for h in g["nbest"]]
        assert len(set(texts)) == len(texts) == 3
        assert g["hypothesis"] == w["hypothesis"]
        assert g["score"] == pytest.approx(w["score"], rel=1e-2, abs=1e-3)


def test_min_len_scores_are_the_models_and_beams_are_noted(toy_model, toy_export, test_src):
    """The engine bans EOS before its log-softmax (renormalising those steps), mtkit after:
    greedy output is the same and its score now is too; a beam's difference is noted."""
    args = ("--greedy", "--min-len", "6", "--length-penalty", "none", "--format", "jsonl",
            "-i", test_src)
    want = [json.loads(x) for x in _cli("translate", toy_model, *args).stdout.splitlines()]
    res = _cli("translate", toy_export, *args)
    got = [json.loads(x) for x in res.stdout.splitlines()]
    assert "note" not in res.stderr
    for w, g in zip(want, got, strict=True):
        assert g["hypothesis"] == w["hypothesis"]
        assert g["score"] == pytest.approx(w["score"], rel=1e-2, abs=1e-3)
    res = _cli("translate", toy_export, "--beam", "3", "--min-len", "6", "-i", test_src)
    assert res.exit_code == 0 and "mtkit: note: decode.min_len: CTranslate2's beam" in res.stderr


def test_the_readme_python_snippet_translates_as_mtkit_does(toy_export, test_src, tmp_path):
    """Its README's Python, run as written (THIS_DIR and input.txt filled in), prints what
    `mtkit translate` of the export prints (it used `lines` without defining it)."""
    readme = (toy_export / "README.md").read_text()
    code = readme.split("```python\n")[1].split("```")[0].replace("THIS_DIR", str(toy_export))
    shutil.copy(test_src, tmp_path / "input.txt")
    ran = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == _cli("translate", toy_export, "-i", test_src).stdout


def test_the_engine_ends_sources_with_eos_as_for_other_exports(toy_export, test_src,
                                                                tmp_path):
    """CTranslate2's fairseq and Marian converters set add_source_eos; mtkit's exports did
    not, so the usual steps (encode, translate_batch) translated without the `</s>` the model
    was trained with, unwarned. An export made before still translates as it did."""
    import ctranslate2
    import sentencepiece as spm

    config = json.loads((toy_export / "config.json").read_text())
    assert config["add_source_eos"] is True
    sp = spm.SentencePieceProcessor(model_file=str(toy_export / "spm.model"))
    lines = test_src.read_text().splitlines()
    found = ctranslate2.Translator(str(toy_export)).translate_batch(
        [sp.encode(line, out_type=str) for line in lines], beam_size=4, length_penalty=1.0,
        suppress_sequences=[["<pad>"], ["<s>"]])
    want = _cli("translate", toy_export, "--beam", "4", "--length-penalty", "average", "-i",
                test_src).stdout
    assert "".join(sp.decode(r.hypotheses[0]) + "\n" for r in found) == want
    older = tmp_path / "older"
    shutil.copytree(toy_export, older)
    (older / "config.json").write_text(json.dumps({**config, "add_source_eos": False}))
    marker = json.loads((toy_export / "mtkit-export.json").read_text())
    assert marker["format"] == "ctranslate2/2"  # an mtkit before, which appends EOS, refuses
    (older / "mtkit-export.json").write_text(json.dumps({**marker, "format": "ctranslate2"}))
    newer = tmp_path / "newer"  # a format this mtkit does not know: refused, not misread
    shutil.copytree(toy_export, newer)
    (newer / "mtkit-export.json").write_text(json.dumps({**marker, "format": "ctranslate2/3"}))
    _one_error_line(_cli("translate", newer, "-i", test_src), "format 'ctranslate2/3'; "
                    "expected 'ctranslate2/2' or 'ctranslate2'")
    for args in (["--beam", "4"], ["--beam", "3", "--align", "--nbest", "2"]):
        assert _cli("translate", older, *args, "-i", test_src).stdout == _cli(
            "translate", toy_export, *args, "-i", test_src).stdout


def test_an_export_where_a_run_is_wanted_is_named_an_export(toy_export, tmp_path):
    """export, score --run and align take runs or checkpoints: an export folder is said to be
    one (it read 'no best.pt ... train a model first', or 'run mtkit prep first')."""
    for args in (["export", toy_export, "-o", tmp_path / "again"],
                 ["score", "--run", toy_export, "--split", "test"],
                 ["align", toy_export, "-s", tmp_path / "x", "--print"]):
        (tmp_path / "x").write_text("a b\n")
        res = _cli(*args)
        assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
        assert f"{toy_export}: an exported model (CTranslate2), not a run directory" in res.output
    assert not (tmp_path / "again").exists()


def test_an_export_translates_alone_and_a_mistyped_partner_is_named(toy_model, toy_export,
                                                                    test_src, tmp_path):
    """An export beside a checkpoint is refused; beside a mistyped path (or '-') the refusal
    said 'translates alone' instead of naming the path."""
    _one_error_line(_cli("translate", toy_export, toy_model, "-i", test_src),
                    f"{toy_export}: an exported model translates alone, not in an ensemble")
    for other in (tmp_path / "nothere", "-"):
        _one_error_line(_cli("translate", toy_export, other, "-i", test_src),
                        f"{other}: no such checkpoint file or run directory")


def test_a_ctranslate2_model_mtkit_did_not_export_is_named_one(toy_export, test_src,
                                                                tmp_path):
    """It read 'no best.pt or last.pt in this run directory; train a model first'."""
    other = tmp_path / "other"
    shutil.copytree(toy_export, other)
    (other / "mtkit-export.json").unlink()
    _one_error_line(_cli("translate", other, "-i", test_src),
                    "a CTranslate2 model that mtkit export did not write")


def test_gnmt_is_refused_for_an_export_and_export_notes_it(toy_model, toy_export, test_src):
    for search in (["--beam", "2"], ["--sample", "--nbest", "2"]):  # sampled lists rank by it
        res = _cli("translate", toy_export, *search, "--length-penalty", "gnmt", "-i", test_src)
        assert res.exit_code == 2
        assert res.output.count("\n") == 1 and ("--length-penalty (decode.length_penalty): "
                                                 "CTranslate2 has no GNMT") in res.output
    readme = (toy_export / "README.md").read_text()
    assert "length_penalty" in readme and "translate_batch" in readme


def test_int8_export_loads_and_translates(toy_model, toy_export, test_src, tmp_path,
                                         monkeypatch):
    monkeypatch.chdir(toy_model.parent)  # the run named relative to where export runs
    out = _export(Path(toy_model.name), tmp_path / "int8", "--quantize", "int8")
    meta = json.loads((out / "mtkit-export.json").read_text())
    assert meta["quantization"] == "int8"
    assert meta["checkpoint"] == str((toy_model / "best.pt").resolve())  # as it is anywhere
    assert (out / "model.bin").stat().st_size < 0.6 * (toy_export / "model.bin").stat().st_size
    got = _cli("translate", out, "--beam", "5", "-i", test_src).stdout.splitlines()
    want = _cli("translate", toy_export, "--beam", "5", "-i", test_src).stdout.splitlines()
    assert len(got) == 60
    assert sum(g == w for g, w in zip(got, want, strict=True)) >= 45


def test_weights_the_device_cannot_compute_in_are_noted_in_one_line(toy_model, toy_export,
                                                                   test_src, tmp_path, capfd):
    """CTranslate2 converts float16 weights to float32 on a CPU and logs a warning of its own
    at every load (on fd 2, past the runner): mtkit says it once, in its own words."""
    import ctranslate2

    if "float16" in ctranslate2.get_supported_compute_types("cpu"):
        pytest.skip("this CPU computes in float16")
    out = _export(toy_model, tmp_path / "f16", "--quantize", "float16")
    capfd.readouterr()
    res = _cli("translate", out, "--greedy", "--device", "cpu", "-i", test_src)
    assert res.exit_code == 0, res.output
    assert "[ctranslate2]" not in capfd.readouterr().err
    notes = [line for line in res.stderr.splitlines() if "note" in line]
    assert notes == [f"mtkit: note: {out}: float16 weights run as float32 here (CTranslate2 has "
                     "no efficient float16 computation on cpu)"]
    assert len(res.stdout.splitlines()) == 60
    assert "note" not in _cli("translate", toy_export, "--greedy", "--device", "cpu",
                              "-i", test_src).stderr


def test_streams_keep_order_empty_lines_and_jsonl(toy_model, toy_export, test_src):
    lines = test_src.read_text().splitlines()[:4]
    text = "\n".join([lines[0], "", *lines[1:], "   "]) + "\n"
    want = _cli("translate", toy_model, "--greedy", "--format", "jsonl", input=text).stdout
    got = _cli("translate", toy_export, "--greedy", "--format", "jsonl", input=text)
    assert got.exit_code == 0, got.output
    w, g = ([json.loads(x) for x in o.splitlines()] for o in (want, got.stdout))
    assert [r["hypothesis"] for r in g] == [r["hypothesis"] for r in w]
    assert [r["id"] for r in g] == list(range(6)) and g[1]["hypothesis"] == ""


def test_two_workers_translate_like_one(toy_export, test_src):
    """--threads 2 on a CPU: two engine replicas decode batches at once (inter_threads), the
    output in input order as with one thread (the engine's arithmetic may differ in the last
    bits with the batch's size, so a near tie may go the other way)."""
    for search in (["--greedy"], ["--beam", "3"]):
        args = (*search, "--batch-tokens", "60", "-i", test_src, "--device", "cpu")
        one = _cli("translate", toy_export, *args, "--threads", "1")
        two = _cli("translate", toy_export, *args, "--threads", "2")
        assert one.exit_code == two.exit_code == 0, two.output
        a, b = one.stdout.splitlines(), two.stdout.splitlines()
        assert len(a) == len(b) == 60 and sum(x == y for x, y in zip(a, b, strict=True)) >= 57


def test_a_stop_ends_the_engine_work_at_its_next_call(toy_export, test_src, monkeypatch):
    """The engine's translate_batch cannot be interrupted: a batch went to it whole, and
    Ctrl-C waited for its end (13-19 s on test2016). It now gets ENGINE_TOKENS at a time,
    giving mtkit's output, and a stop ends the search at the next call."""
    import threading

    from mtkit.export import ct2_translate as ct
    from mtkit.translation.lines import Stopped

    want = _cli("translate", toy_export, "--beam", "3", "-i", test_src).stdout
    monkeypatch.setattr(ct, "ENGINE_TOKENS", 20)
    got = _cli("translate", toy_export, "--beam", "3", "-i", test_src)
    assert got.exit_code == 0 and got.stdout == want
    export = ct.open_export(toy_export)
    tr = ct.CT2Translator(export, export.recipe.decode)
    calls, stop = [], threading.Event()
    engine = tr.engine

    class Engine:  # stops the run at its first call
        def translate_batch(self, source, **options):
            calls.append(len(source))
            stop.set()
            return engine.translate_batch(source, **options)

    tr.engine = Engine()
    ids = [export.tokenizer.encode_src(line) for line in test_src.read_text().splitlines()]
    with pytest.raises(Stopped):
        tr._search(ids, stop, list(range(len(ids))))
    assert len(calls) == 1 and calls[0] < len(ids)

    calls = []  # per call: (sources, their pieces), the nbest copies counted

    class Counting:
        def __getattr__(self, name):  # score_batch
            return getattr(engine, name)

        def translate_batch(self, source, **options):
            calls.append((len(source), sum(map(len, source))))
            return engine.translate_batch(source, **options)

    sampled = dataclasses.replace(export.recipe.decode, method="sample", nbest=4)
    for on_cpu in (True, False):  # a GPU gets whole batches
        monkeypatch.setattr(ct, "runs_on_cpu", lambda device, cpu=on_cpu: cpu)
        tr = ct.CT2Translator(export, sampled)
        tr.engine, calls[:] = Counting(), []
        tr._search(ids, threading.Event(), list(range(len(ids))))
        assert sum(n for n, _ in calls) == 4 * len(ids)
        if on_cpu:  # at most 20 pieces a call with the copies, or one source's copies alone
            assert len(calls) > 1 and all(p <= 20 or n == 4 for n, p in calls), calls
        else:
            assert len(calls) == 1


def test_sampling_is_seeded(toy_export, test_src):
    args = ("--sample", "--nbest", "2", "--seed", "3", "--top-k", "5", "-i", test_src)
    first, second = (_cli("translate", toy_export, *args) for _ in range(2))
    assert first.exit_code == 0, first.output
    assert first.stdout == second.stdout and first.stdout.count("\n") == 120
    # the engine's seed is 32-bit: 2**32 + 3 drew as 3 did, -1 as 2**32 - 1
    for seed in (2**32 + 3, -1):
        _one_error_line(_cli("translate", toy_export, "--sample", "--seed", str(seed), "-i",
                             test_src),
                        f"--seed (decode.seed): CTranslate2 takes a seed from 0 to "
                        f"4294967295, got {seed}")


def _one_error_line(res, *needles: str) -> None:
    assert res.exit_code == 2, res.output
    assert res.output.count("\n") == 1 and "Traceback" not in res.output, res.output
    for n in needles:
        assert n in res.output, res.output


def test_export_refuses_what_it_did_not_write(toy_model, tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    _one_error_line(_cli("export", toy_model, "-o", foreign), "-o", "not an mtkit export")
    assert (foreign / "notes.txt").read_text() == "keep me"
    out = _export(toy_model, tmp_path / "ct2")
    before = (out / "model.bin").stat().st_mtime_ns
    _export(toy_model, out)  # a previous export is replaced
    assert (out / "model.bin").stat().st_mtime_ns >= before
    (out / "extra.txt").write_text("x")
    _one_error_line(_cli("export", toy_model, "-o", out), "extra.txt")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left


def test_export_option_errors_are_one_line(toy_model, tmp_path):
    _one_error_line(_cli("export", toy_model, "-o", tmp_path / "a", "--quantize", "int4"),
                    "--quantize", "int8")
    _one_error_line(_cli("export", toy_model, "-o", tmp_path / "a", "--engine", "onnx"),
                    "--engine", "ctranslate2")
    _one_error_line(_cli("export", tmp_path / "nothing", "-o", tmp_path / "a"), "nothing")
    assert not (tmp_path / "a").exists()
    # a folder that cannot be made is named by -o, not by the temporary folder beside it
    (tmp_path / "f").write_text("mine\n")
    _one_error_line(_cli("export", toy_model, "-o", tmp_path / "f" / "x"),
                    f"-o {tmp_path / 'f' / 'x'}: cannot write (a parent of it is a file")
    _one_error_line(_cli("export", toy_model, "-o", "/proc/mtkit-x"), "-o /proc/mtkit-x: cannot")


def test_an_existing_folder_is_filled_in_place(toy_model, toy_export, test_src, tmp_path,
                                               monkeypatch):
    """An empty folder (a mount point, a folder with the user's group and mode) or a previous
    export is filled, not replaced: a mount point cannot be renamed (EBUSY, named neither -o
    nor the cause) and a replaced folder lost its setgid bit, group and mode."""
    here = tmp_path / "here"
    here.mkdir()
    here.chmod(0o2750)
    inode = here.stat().st_ino
    monkeypatch.chdir(here)
    _export(toy_model, Path("."))  # the current folder, empty
    assert here.stat().st_ino == inode and stat.S_IMODE(here.stat().st_mode) == 0o2750
    want = _cli("translate", toy_export, "-i", test_src).stdout
    assert _cli("translate", here, "-i", test_src).stdout == want
    (here / ".mtkit-export.k3j2x_ab.tmp").mkdir()  # what an export killed while filling left
    _export(toy_model, here, "--quantize", "int8")
    assert here.stat().st_ino == inode
    assert json.loads((here / "mtkit-export.json").read_text())["quantization"] == "int8"
    assert sorted(p.name for p in here.iterdir()) == sorted(
        json.loads((here / "mtkit-export.json").read_text())["files"])
    (here / ".mtkit-export.cache.tmp").mkdir()  # the user's, not a temporary of mtkit's
    _one_error_line(_cli("export", toy_model, "-o", here), "did not write")
    assert (here / ".mtkit-export.cache.tmp").is_dir()


def test_a_second_export_into_one_folder_at_once_is_refused(toy_model, toy_export, tmp_path):
    """The second removed the first one's files in the making (or the two mixed)."""
    import fcntl
    import os

    out = tmp_path / "ex"
    shutil.copytree(toy_export, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    fd = os.open(out, os.O_RDONLY)  # as an export filling it holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _one_error_line(_cli("export", toy_model, "-o", out, "--quantize", "int8"), "-o",
                        "another mtkit export is writing into it")
    finally:
        os.close(fd)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    _export(toy_model, out, "--quantize", "int8")  # once it is free


def test_an_export_that_did_not_finish_is_refused_and_exported_again(toy_model, toy_export,
                                                                     test_src, tmp_path):
    out = tmp_path / "ex"
    shutil.copytree(toy_export, out)
    meta = json.loads((out / "mtkit-export.json").read_text())
    (out / "mtkit-export.json").write_text(json.dumps({**meta, "complete": False}))
    _one_error_line(_cli("translate", out, "-i", test_src), "did not finish",
                    "export the run again")
    _export(toy_model, out)
    assert _cli("translate", out, "-i", test_src).exit_code == 0


def test_a_full_disk_is_one_line_naming_o(toy_model, tmp_path, monkeypatch):
    from mtkit.export import ct2_dir

    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ct2_dir, "_write", full)
    for out in (tmp_path / "new", tmp_path):  # built beside, filled in place
        _one_error_line(_cli("export", toy_model, "-o", out), f"-o {out}",
                        "No space left on device")
    assert not (tmp_path / "new").exists() and list(tmp_path.iterdir()) == []


def test_an_export_the_engine_cannot_load_is_one_line(toy_model, toy_export, test_src,
                                                      tmp_path):
    """A damaged model.bin, or a device the engine lacks: one line naming the export."""
    broken = tmp_path / "broken"
    shutil.copytree(toy_export, broken)
    with open(broken / "model.bin", "r+b") as f:
        f.truncate(200)
    _one_error_line(_cli("translate", broken, "-i", test_src), str(broken),
                    "CTranslate2 cannot load it")
    if not ct2.get_cuda_device_count():
        _one_error_line(_cli("translate", toy_export, "-i", test_src, "--device", "cuda"),
                        "--device: 'cuda' requested but CTranslate2 sees no CUDA device")
    _one_error_line(_cli("translate", toy_export, "-i", test_src, "-o",
                         toy_export / "model.bin"), "-o", "the export's model.bin")
    (broken / "spm.model").write_text("garbage")
    res = _cli("translate", broken, "-i", test_src)
    _one_error_line(res, "sentencepiece model", "export the run again")
    assert "prep" not in res.output
    for name in ("spm.model", "config.json"):  # the engine said: '[json.exception...]'
        shutil.rmtree(broken)
        shutil.copytree(toy_export, broken)
        (broken / name).unlink()
        _one_error_line(_cli("translate", broken, "-i", test_src),
                        f"{name} missing from the export", "export the run again")
    (broken / "config.json").write_text((toy_export / "config.json").read_text())
    (broken / "README.md").unlink()  # read by people, not by the engine
    assert _cli("translate", broken, "-i", test_src).exit_code == 0
    (broken / "mtkit-export.json").write_text("[]")  # was an AttributeError traceback
    _one_error_line(_cli("translate", broken, "-i", test_src), "not a readable mtkit export")
    shutil.rmtree(broken)
    shutil.copytree(toy_export, broken)
    (broken / "recipe.yaml").write_text("a: b: c\n")  # was yaml's ParserError traceback
    _one_error_line(_cli("translate", broken, "-i", test_src),
                    f"{broken / 'recipe.yaml'}: line 1 not valid YAML")
    # a vocabulary file that does not list the pieces: refused before translating (it failed
    # in the engine with a traceback, or, one piece moved, would translate wrongly)
    vocab = json.loads((toy_export / "shared_vocabulary.json").read_text())
    for damaged in ('["a"]', json.dumps(vocab[:5] + vocab[6:5:-1] + vocab[5:6] + vocab[7:]),
                    "{not json"):
        shutil.rmtree(broken)
        shutil.copytree(toy_export, broken)
        (broken / "shared_vocabulary.json").write_text(damaged)
        _one_error_line(_cli("translate", broken, "-i", test_src),
                        str(broken / "shared_vocabulary.json"), "export the run again")


def test_an_rnn_says_what_to_use_instead(toy_run, tmp_path):
    run = tmp_path / "rnn"
    shutil.copytree(toy_run, run)
    recipe = load_recipe(RECIPES / "toy.yaml", ["model.arch=rnn"])
    tok = Tokenizer.load(data_dir(run))
    model = build_model(recipe.model, tok.src_vocab_size, tok.tgt_vocab_size)
    save_checkpoint(run / "best.pt", {
        "recipe": dump_recipe(recipe), "model": model.state_dict(),
        "vocab": {"src": tok.src_vocab_size, "tgt": tok.tgt_vocab_size}})
    _one_error_line(_cli("export", run, "-o", tmp_path / "out"), "model.arch is rnn",
                    "mtkit translate")


def test_missing_ctranslate2_is_one_line_with_the_install_hint(toy_model, toy_export,
                                                               tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    failure: BaseException = ModuleNotFoundError("No module named 'ctranslate2'",
                                                 name="ctranslate2")

    def no_ct2(name, *args, **kwargs):
        if name == "ctranslate2":
            raise failure
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ct2)
    _one_error_line(_cli("export", toy_model, "-o", tmp_path / "x"), "is not installed",
                    "mtkit[ctranslate2]")
    _one_error_line(_cli("translate", toy_export, "--greedy", input="a b\n"),
                    "mtkit[ctranslate2]")
    # installed but broken: the reason is said, not "not installed" (nor a traceback)
    for failure in (ImportError("libiomp5.so: cannot open shared object file"),
                    OSError("[WinError 126] The specified module could not be found")):
        _one_error_line(_cli("translate", toy_export, "--greedy", input="a b\n"),
                        "installed but cannot be loaded", str(failure))


_NO_TORCH = """
import sys
from mtkit.cli import main
sys.argv = ["mtkit", *sys.argv[1:]]
try:
    main()
finally:
    heavy = sorted(m for m in ("torch", "numpy") if m in sys.modules)
    print("imported:", *heavy, file=sys.stderr)
"""


@pytest.mark.parametrize(("extra", "needs"), [
    (["--greedy"], []),
    (["--beam", "2", "--nbest", "2", "--length-penalty", "average", "--format", "jsonl"], []),
    # links and terms read the engine's attention as a numpy array (numpy: the engine's own)
    (["--align"], ["numpy"]),
    (["--align", "--align-method", "grow-diag-final", "--readout", "shift"], ["numpy"]),
    (["--terms", "TERMS", "--terms-method", "prefix"], ["numpy"]),
    (["--terms", "TERMS", "--terms-method", "align"], ["numpy"]),
    (["--prefix", "SRC"], []),
])
def test_translating_with_an_export_never_imports_torch(toy_export, test_src, tmp_path, extra,
                                                        needs):
    """`mtkit translate EXPORT` starts without torch (2.5-3.5 s to import on 2 cores): the
    engine does the work, links, terms and prefixes included; plain text needs no numpy."""
    terms = tmp_path / "terms.tsv"
    terms.write_text("sa\tgu\n")
    args = [{"TERMS": str(terms), "SRC": str(test_src)}.get(a, a) for a in extra]
    proc = subprocess.run([sys.executable, "-c", _NO_TORCH, "translate", str(toy_export),
                           "-i", str(test_src), "--threads", "1", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) >= len(test_src.read_text().splitlines())
    assert proc.stderr.splitlines()[-1] == " ".join(["imported:", *needs]), proc.stderr


_API_NO_TORCH = """
import sys
import mtkit
model = mtkit.load(sys.argv[1], device="cpu", threads=1)
lines = open(sys.argv[2], encoding="utf-8").read().splitlines()[:4]
full = model.translate_full(lines, attention=True, align=True, terms={"sa": "gu"})
best = full[0].candidates[0]
assert best.attention is not None and best.alignment is not None
model.translate(lines, prefix=[lines[0].split()[0], "", "", ""])
print("torch" in sys.modules)
"""


def test_the_apis_attention_links_terms_and_prefixes_on_an_export_import_no_torch(
        toy_export, test_src):
    proc = subprocess.run([sys.executable, "-c", _API_NO_TORCH, str(toy_export), str(test_src)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_outputs_end_by_the_models_positions_with_a_warning(toy_run, test_src, tmp_path):
    """Learned positions cut every output at the table's end without a word (--min-len past
    it was accepted); an export's sinusoid table ended in the engine's traceback ('No position
    encodings are defined for positions >= 64')."""
    learned = _random_run(toy_run, tmp_path / "learned",
                          dict(positions="learned", max_positions=33))
    out = _export(learned, tmp_path / "ct2-learned")
    for model in (learned, out):
        res = _cli("translate", model, "--greedy", "--max-len-b", "100", "-i", test_src)
        assert res.exit_code == 0, res.output
        assert ("60 output limit(s) (--max-len-a/--max-len-b) lowered to 32 tokens, the most "
                "the model's positions allow") in res.stderr
        refused = _cli("translate", model, "--greedy", "--min-len", "40", "--max-len-b", "100",
                       "-i", test_src)
        assert refused.exit_code == 2
        assert ("--min-len (decode.min_len): 40 tokens before EOS, but the model's outputs "
                "end by 32 tokens") in refused.stderr
    sinusoids = _random_run(toy_run, tmp_path / "sin", dict(positions="sinusoidal"))
    out = _export(sinusoids, tmp_path / "ct2-sin")
    res = _cli("translate", out, "--greedy", "--max-len-b", "100", "-i", test_src)
    assert res.exit_code == 0, res.output
    assert "lowered to 63 tokens" in res.stderr  # the recipe's max_positions 64
    # the checkpoint caps its sinusoids' outputs where its export does (Recipe.output_cap):
    # computed for any length, they let one request decode thousands of tokens
    native = _cli("translate", sinusoids, "--greedy", "--max-len-b", "100", "-i", test_src)
    assert native.exit_code == 0 and "lowered to 63 tokens" in native.stderr


def test_the_readme_says_how_a_shift_trained_model_aligns(toy_model):
    """A model trained with guided alignment read out by `shift` gives mtkit's links from the
    next step's row; the README said only which layer's attention, and a deployer reading
    row j for piece j got other links than mtkit's."""
    from mtkit.export.ct2_dir import _readme

    tok = Tokenizer.load(toy_model / "data")
    toy = RECIPES / "toy.yaml"
    plain = load_recipe(toy)
    shift = load_recipe(toy, ["data.train.align=toy/train.align",
                              "train.guided_alignment.weight=0.05",
                              "train.guided_alignment.readout=shift"])
    assert "read out by `shift`" not in _readme(plain, tok, "float32", None)
    assert "row of target piece j+1\naligns piece j" in _readme(shift, tok, "float32", None)
