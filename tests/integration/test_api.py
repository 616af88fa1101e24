"""The Python API (`mtkit.load`) on the trained toy model: the same outputs as `mtkit
translate`, errors named by field, attention at both levels, concurrent callers."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import mtkit
from mtkit.config import DecodeConfig
from mtkit.data.store import text_path
from mtkit.errors import ConfigError, MtkitError
from mtkit.run import data_dir
from tests.helpers import run_cli

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def lines(toy_model: Path) -> list[str]:
    src = text_path(data_dir(toy_model), "test", "src").read_text().splitlines()
    return [src[0], "", *src[1:20]]  # an empty line is a sentence too


@pytest.fixture(scope="module")
def model(toy_model: Path) -> mtkit.TranslationModel:
    return mtkit.load(toy_model, device="cpu", threads=1)


def _cli_jsonl(toy_model: Path, lines: list[str], *args: str) -> list[dict]:
    res = run_cli("translate", toy_model, "--threads", "1", "--format", "jsonl", *args,
                  input="\n".join(lines) + "\n")
    assert res.exit_code == 0, res.output
    return [json.loads(line) for line in res.stdout.splitlines()]


def test_import_does_not_load_torch():
    code = "import sys, mtkit; mtkit.load; assert 'torch' not in sys.modules, 'torch'"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("args, options", [
    ((), {}),
    (("--beam", "3", "--nbest", "3"), {"beam_size": 3, "nbest": 3}),
    (("--greedy", "--align"), {"method": "greedy", "align": True}),
    (("--nbest", "2", "--align", "--align-method", "intersection", "--readout", "shift"),
     {"nbest": 2, "align": True, "align_method": "intersection", "readout": "shift"}),
])
def test_outputs_equal_mtkit_translate(toy_model, model, lines, args, options):
    want = _cli_jsonl(toy_model, lines, *args)
    got = model.translate_full(lines, **options)
    assert len(got) == len(want) == len(lines)
    for w, g in zip(want, got, strict=True):
        assert g.source == w["source"] and g.text == w["hypothesis"]
        assert g.candidates[0].score == pytest.approx(w["score"], abs=1e-5)
        assert len(g.candidates[0].tokens) == w["tokens"]
        for entry, cand in zip(w.get("nbest", [w]), g.candidates, strict=True):
            assert (cand.text, len(cand.tokens)) == (entry["hypothesis"], entry["tokens"])
            assert cand.score == pytest.approx(entry["score"], abs=1e-5)
            assert cand.alignment == entry.get("alignment")
        assert g.candidates[0].alignment == w.get("alignment")
    assert model.translate(lines[:3]) == [w["hypothesis"] for w in _cli_jsonl(
        toy_model, lines[:3])]
    assert model.translate(lines[0]) == want[0]["hypothesis"] or options


def test_sampling_equals_mtkit_translate(toy_model, model, lines):
    args = ("--sample", "--nbest", "2", "--seed", "7", "--top-k", "5")
    want = _cli_jsonl(toy_model, lines, *args)
    got = model.translate_full(lines, method="sample", nbest=2, seed=7, top_k=5)
    assert [[c.text for c in g.candidates] for g in got] == [
        [e["hypothesis"] for e in w["nbest"]] for w in want]


def test_errors_name_fields_not_flags(model):
    cases = [({"beam_size": 0}, "beam_size (decode.beam_size): out of range"),
             ({"nbest": 9}, "nbest (decode.nbest): cannot exceed beam_size (4)"),
             ({"beamsize": 2}, "did you mean `decode.beam_size`"),
             ({"method": "greedy", "nbest": 2}, "nbest (decode.nbest): greedy search gives one"),
             ({"align_method": "union"}, "align_method and readout: "),
             ({"align": True, "readout": "sideways"},
              "readout: invalid choice 'sideways'; expected one of current, shift"),
             ({"attention": True, "layer": 5}, "layer 5: the model has 2 decoder layers"),
             ({"attention": True, "head": 4}, "head 4: the model has 4 heads"),
             ({"layer": 0}, "layer and head: they choose the attention returned")]
    for options, message in cases:
        with pytest.raises(ConfigError) as e:
            model.translate_full(["sa gu"], **options)
        assert message in str(e.value), (options, str(e.value))
        assert "--" not in str(e.value), str(e.value)
    with pytest.raises(MtkitError, match="no such checkpoint file or run directory"):
        mtkit.load("/nonexistent/run")


@pytest.mark.parametrize(("field", "value", "message"), [
    ("alpha", math.nan, "expected a finite number, got nan"),
    ("max_len_a", math.inf, "expected a finite number, got inf"),
    ("top_p", -math.inf, "expected a finite number, got -inf"),
    ("beam_size", 0, "out of range: expected a value >= 1, got 0"),
])
def test_a_decode_config_built_by_the_caller_is_checked_as_the_options_are(model, field,
                                                                           value, message):
    """`decode` takes a DecodeConfig its caller built: DecodeConfig(alpha=nan) was accepted,
    and its search ended no hypothesis (an IndexError in the translator)."""
    with pytest.raises(ConfigError) as e:
        model.translate(["sa gu"], **{field: value})
    assert str(e.value) == f"{field} (decode.{field}): {message}"
    with pytest.raises(ConfigError) as e:
        model.decode(["sa gu"], DecodeConfig(**{field: value}))
    assert str(e.value) == f"DecodeConfig: decode.{field}: {message}"
    assert DecodeConfig(**{field: getattr(model.defaults, field)}) is not None


@pytest.mark.parametrize(("call", "message"), [
    (lambda m: m.translate(["mu", 3]), "text[1]: expected a string, got int"),
    (lambda m: m.translate(["mu", None]), "text[1]: expected a string, got None"),
    (lambda m: m.translate(b"mu"), "text: expected a string or a list of strings, got bytes"),
    (lambda m: m.translate(5), "text: expected a string or a list of strings, got int"),
    (lambda m: m.translate("mu\ud800"),
     "text: not valid Unicode text (a lone surrogate at character 2)"),
    (lambda m: m.translate_full(["sa", "mu\udcff"]),
     "text[1]: not valid Unicode text (a lone surrogate at character 2)"),
    (lambda m: m.translate("sa", prefix="a\ud800"),
     "prefix: not valid Unicode text (a lone surrogate at character 1)"),
    (lambda m: m.translate("sa", terms={"sa": "x\ud800"}),
     "terms: entry 1: the target term is not valid Unicode text (a lone surrogate at "
     "character 1)"),
    (lambda m: m.translate("sa", terms={"s\udc80": "x"}),
     "terms: entry 1: the source term is not valid Unicode text"),
])
def test_items_that_are_not_text_are_named(model, call, message):
    """Ints, None and bytes were AttributeError ('int' object has no attribute 'rstrip') or a
    bare TypeError; a lone surrogate in text 'List elements must be str', in terms
    CTranslate2's or sentencepiece's RuntimeError."""
    with pytest.raises(ConfigError) as e:
        call(model)
    assert str(e.value).startswith(message) and "\n" not in str(e.value), str(e.value)


def test_attention_at_both_levels_and_chosen_layers(model, lines):
    [res] = model.translate_full([lines[0]], attention=True, nbest=2)
    for cand in res.candidates:
        att = cand.attention
        sub, word = att.subword, att.word
        assert sub.target == [*cand.tokens, "</s>"] and sub.source == [*res.source_tokens,
                                                                         "</s>"]
        assert word.source == [*lines[0].split(), "</s>"]
        assert word.target == [*cand.text.split(), "</s>"]
        assert np.allclose(np.sum(sub.weights, axis=1), 1, atol=1e-3)
        assert np.shape(word.weights) == (len(word.target), len(word.source))
    # the top layer's head mean by a forced pass is what the search itself attended to
    [forced] = model.translate_full([lines[0]], attention=True, layer=-1, head="mean", nbest=2)
    for a, b in zip(res.candidates, forced.candidates, strict=True):
        np.testing.assert_allclose(a.attention.subword.weights, b.attention.subword.weights,
                                   atol=2e-4)
    [head0] = model.translate_full([lines[0]], attention=True, layer=0, head=0)
    assert head0.candidates[0].attention.what == "cross-attention, layer 0, head 0"
    assert not np.allclose(head0.candidates[0].attention.subword.weights,
                           res.candidates[0].attention.subword.weights, atol=1e-2)
    empty = model.translate_full([""], attention=True, align=True)[0]
    assert empty.text == "" and empty.candidates[0].attention is None


def test_concurrent_callers_get_their_own_results(model, lines):
    want = model.translate(lines)
    jobs = [lines[i:] + lines[:i] for i in range(8)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda job: model.translate(job, beam_size=4), jobs))
    assert got == [want[i:] + want[:i] for i in range(8)]


def test_info_and_defaults(model, toy_model):
    info = model.info
    assert (info.name, info.src_lang, info.tgt_lang, info.engine) == ("toy", "src", "tgt",
                                                                       "mtkit")
    assert info.paths == [str(toy_model / "best.pt")] and (info.layers, info.heads) == (2, 4)
    loaded = mtkit.load(toy_model, device="cpu", beam_size=2, nbest=2)
    assert loaded.defaults.beam_size == 2
    assert len(loaded.translate_full(["sa gu"])[0].candidates) == 2
    # a line over the model's data.max_len (32 tokens) is translated cut, and said so
    assert [t.truncated for t in model.translate_full(["sa " * 40, "sa gu"])] == [True, False]


def test_bf16_is_autocast_and_close(toy_model, model, lines):
    """precision bf16 decodes under autocast (on a CPU here): the scores move, the
    translations of a trained toy model stay; a bad choice is one line."""
    bf16 = mtkit.load(toy_model, device="cpu", threads=1, precision="bf16")
    assert bf16.info.precision == "bf16" and model.info.precision == "fp32"
    low, full = bf16.translate_full(lines[:8]), model.translate_full(lines[:8])
    assert [t.text for t in low] == [t.text for t in full]
    assert any(abs(a.candidates[0].score - b.candidates[0].score) > 1e-5
               for a, b in zip(low, full, strict=True) if a.text)
    with pytest.raises(ConfigError, match="precision: invalid choice 'fp8'"):
        mtkit.load(toy_model, precision="fp8")
