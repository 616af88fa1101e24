"""Terminology on the trained toy model (it reverses made-up words): with either method every
term of a synthetic glossary is in every translation of a line holding its source, lines
without a term are translated byte for byte as without the glossary, and the terms land where
the reversal puts the source word; through the CLI, the API, the server and an export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import mtkit
from mtkit.data.store import text_path
from mtkit.errors import ConfigError
from mtkit.run import data_dir
from mtkit.translation.terms import occurrences
from tests.helpers import run_cli, serving

pytestmark = pytest.mark.usefixtures("one_thread")

# Target terms are other words of the toy vocabulary, so the model can write them, but never
# where the source term is: the reversal would copy the source word.
TERMS = {"sa": "ko", "mir wi": "zen zen", "lop": "ba"}


@pytest.fixture(scope="module")
def lines(toy_model: Path) -> list[str]:
    return text_path(data_dir(toy_model), "test", "src").read_text().splitlines()


@pytest.fixture(scope="module")
def model(toy_model: Path) -> mtkit.TranslationModel:
    return mtkit.load(toy_model, device="cpu", threads=1)


def _check(model, lines, out, plain) -> tuple[int, int]:
    """Every term present (as often as its source); plain lines unchanged. Returns how many
    single-word terms sit at the reversed position of their source word, of those checked."""
    g = model.glossary(TERMS)
    placed = checked = 0
    for line, res, base in zip(lines, out, plain, strict=True):
        matches = g.matches(line)
        if not matches:
            assert res.text == base.text
            continue
        for cand in res.candidates:
            words = cand.text.split()
            for m in matches:
                need = sum(n.target == m.target for n in matches)
                assert occurrences(m.target, words) >= need, (line, cand.text)
        words, src = res.text.split(), line.split()
        if len(words) == len(src):
            for m in matches:
                if m.end - m.start == 1:
                    checked += 1
                    placed += words[len(src) - 1 - m.start] == m.target[0]
    return placed, checked


@pytest.mark.parametrize("method", ["prefix", "align"])
@pytest.mark.parametrize("options", [{}, {"method": "greedy"}, {"beam_size": 4, "nbest": 2}])
def test_every_term_is_in_every_hypothesis_and_plain_lines_do_not_change(model, lines,
                                                                         method, options):
    plain = model.translate_full(lines, **options)
    out = model.translate_full(lines, terms=TERMS, terms_method=method, **options)
    placed, checked = _check(model, lines, out, plain)
    assert sum(bool(model.glossary(TERMS).matches(s)) for s in lines) >= 10
    assert checked >= 5 and placed >= 0.6 * checked, (placed, checked)


def test_terms_with_the_cli_equal_the_api_and_scores_are_the_models(toy_model, model, lines,
                                                                    tmp_path):
    tsv = tmp_path / "terms.tsv"
    tsv.write_text("# a glossary\n" + "".join(f"{s}\t{t}\n" for s, t in TERMS.items()))
    for method in ("prefix", "align"):
        res = run_cli("translate", toy_model, "--threads", "1", "--format", "jsonl", "--terms",
                      tsv, "--terms-method", method, input="\n".join(lines) + "\n")
        assert res.exit_code == 0, res.output
        got = [json.loads(x) for x in res.stdout.splitlines()]
        want = model.translate_full(lines, terms=TERMS, terms_method=method)
        assert [g["hypothesis"] for g in got] == [w.text for w in want]
        # a placed term's output is scored by the model: forced decoding gives its score
        [again] = model.translate_full([lines[0]], prefix=[want[0].text], max_len_a=0.0,
                                       max_len_b=1, length_penalty="none")
        assert again.text == want[0].text
        assert again.candidates[0].logprob == pytest.approx(want[0].candidates[0].logprob,
                                                            abs=1e-4)


def test_glossary_errors_are_one_line(toy_model, model, tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("sa ko\n")
    res = run_cli("translate", toy_model, "--terms", bad, input="sa\n")
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1] == (
        f"mtkit: error: --terms {bad}: line(s) 1: expected a source term, a tab and a target "
        "term")
    # invalid UTF-8 became U+FFFD in the forced term, unsaid
    bad.write_bytes(b"# ein Glossar\nsa\tko\nmir\tg\xfc\n")  # Latin-1
    res = run_cli("translate", toy_model, "--terms", bad, input="sa\n")
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.strip() == (f"mtkit: error: --terms {bad}: line 3: invalid UTF-8; a "
                                  "glossary is UTF-8 text")
    res = run_cli("translate", toy_model, "--terms-method", "prefix", input="sa\n")
    assert res.exit_code == 2 and "--terms-method needs --terms" in res.output
    with pytest.raises(ConfigError, match="terms_method: invalid choice"):
        model.translate("sa", terms=TERMS, terms_method="both")
    with pytest.raises(ConfigError, match="terms: expected a mapping"):
        model.translate("sa", terms="sa=ko")


def test_the_server_and_an_export_place_terms(toy_model, model, lines, tmp_path):
    want = model.translate_full(lines[:20], terms=TERMS)
    with serving(toy_model, "--max-sentences", "30") as server:
        r = server.client.post("/v1/translate", json={"text": lines[:20], "terms": TERMS})
        assert r.status_code == 200, r.text
        assert [t["text"] for t in r.json()["translations"]] == [w.text for w in want]
        bad = server.client.post("/v1/translate", json={"text": "sa", "terms_method": "align"})
        assert bad.status_code == 422 and "terms_method" in bad.json()["error"]
    pytest.importorskip("ctranslate2")
    out = tmp_path / "ct2"
    assert run_cli("export", toy_model, "-o", out).exit_code == 0
    exported = mtkit.load(out, device="cpu", threads=1)
    for method in ("prefix", "align"):
        got = exported.translate_full(lines, terms=TERMS, terms_method=method,
                                      length_penalty="average")
        plain = exported.translate_full(lines, length_penalty="average")
        placed, checked = _check(model, lines, got, plain)
        assert placed >= 0.6 * checked
