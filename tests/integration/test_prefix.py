"""Target prefixes through every door: `mtkit translate --prefix`, the Python API, the
server's `/v1/translate`, and an export decoded by CTranslate2 (`target_prefix`), all on the
trained toy model (it reverses made-up words)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import mtkit
from mtkit.data.store import text_path
from mtkit.errors import ConfigError
from mtkit.run import data_dir
from tests.helpers import run_cli, serving

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def lines(toy_model: Path) -> list[str]:
    return text_path(data_dir(toy_model), "test", "src").read_text().splitlines()[:12]


def _prefixes(lines: list[str]) -> list[str]:
    """Every other line none; the others its source's first word, or two of its words (the
    reversal would start with the last: a prefix the model would not choose)."""
    out = []
    for n, line in enumerate(lines):
        words = line.split()
        out.append(["", words[0], "", " ".join(words[:2])][n % 4])
    return out


@pytest.fixture(scope="module")
def model(toy_model: Path) -> mtkit.TranslationModel:
    return mtkit.load(toy_model, device="cpu", threads=1)


def _cli_jsonl(run: Path, lines: list[str], prefix_file: Path, *args: str) -> list[dict]:
    res = run_cli("translate", run, "--threads", "1", "--format", "jsonl", "--prefix",
                  prefix_file, *args, input="\n".join(lines) + "\n")
    assert res.exit_code == 0, res.output
    return [json.loads(line) for line in res.stdout.splitlines()]


@pytest.mark.parametrize("args, options", [
    ((), {}),
    (("--greedy",), {"method": "greedy"}),
    (("--beam", "4", "--nbest", "3"), {"beam_size": 4, "nbest": 3}),
])
def test_cli_and_api_keep_the_prefix_and_agree(toy_model, model, lines, tmp_path, args,
                                               options):
    prefixes = _prefixes(lines)
    pfile = tmp_path / "prefix.txt"
    pfile.write_text("\n".join(prefixes) + "\n")
    got = _cli_jsonl(toy_model, lines, pfile, *args)
    api = model.translate_full(lines, prefix=prefixes, **options)
    plain = model.translate_full(lines, **options)
    for rec, res, base, prefix in zip(got, api, plain, prefixes, strict=True):
        assert rec["hypothesis"] == res.text
        for cand in res.candidates:
            assert cand.text.startswith(prefix)
            assert cand.token_logprobs and len(cand.token_logprobs) == len(cand.tokens) + 1
        if not prefix:  # no prefix: the plain translation (scores within float rounding:
            # the batch's rows leave the search at other steps, so its matrices differ)
            assert res.text == base.text
            assert res.candidates[0].score == pytest.approx(base.candidates[0].score, abs=1e-5)
    assert any(p and not b.text.startswith(p) for p, b in zip(prefixes, plain, strict=True))


def test_api_prefix_of_one_sentence_and_alignment_covers_it(model, lines):
    words = lines[0].split()
    out = model.translate(lines[0], prefix=words[0], method="greedy")
    assert out.startswith(words[0])
    [res] = model.translate_full([lines[0]], prefix=[words[0]], align=True, attention=True)
    cand = res.candidates[0]
    assert cand.attention is not None
    assert len(cand.attention.subword.target) == len(cand.tokens) + 1  # the prefix too
    linked = {int(link.split("-")[1]) for link in cand.alignment.split()}
    assert 0 in linked  # the prefix's word is aligned


def test_bad_prefixes_are_named_errors(model, lines, toy_model, tmp_path):
    with pytest.raises(ConfigError, match="prefix: 1 prefixes for 2 sentences"):
        model.translate_full(lines[:2], prefix=["x"])
    with pytest.raises(ConfigError, match="prefix: expected a list"):
        model.translate_full(lines[:2], prefix="x")
    long = " ".join(["sa"] * 40)  # past the output limit, which it raises
    assert model.translate(lines[0], prefix=long).startswith(long)
    short = tmp_path / "short.txt"
    short.write_text("sa\n")
    res = run_cli("translate", toy_model, "--prefix", short, input="\n".join(lines) + "\n")
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1] == (
        f"mtkit: error: --prefix {short}: 1 prefixes for more input lines; expected one per "
        "line (an empty one for none)")
    res = run_cli("translate", toy_model, "--prefix", tmp_path / "nope.txt", input="a\n")
    assert res.exit_code == 2 and "prefix file not found" in res.output
    assert "Traceback" not in res.output


@pytest.fixture(scope="module")
def toy_export(toy_model: Path, tmp_path_factory) -> Path:
    pytest.importorskip("ctranslate2")
    out = tmp_path_factory.mktemp("prefix-export") / "ct2"
    res = run_cli("export", toy_model, "-o", out)
    assert res.exit_code == 0, res.output
    return out


@pytest.mark.parametrize("args", [("--greedy", "--length-penalty", "average"),
                                  ("--beam", "4", "--length-penalty", "none")])
def test_the_export_continues_prefixes_as_mtkit(toy_model, toy_export, lines, tmp_path, args):
    """Greedy and beam output agree, scored by the model with the prefix counted. (A beam
    under the `average` penalty can rank otherwise: the engine normalises a score that
    leaves the prefix out.)"""
    prefixes = _prefixes(lines)
    pfile = tmp_path / "prefix.txt"
    pfile.write_text("\n".join(prefixes) + "\n")
    want = _cli_jsonl(toy_model, lines, pfile, *args)
    got = _cli_jsonl(toy_export, lines, pfile, *args)
    for w, g in zip(want, got, strict=True):
        assert g["hypothesis"] == w["hypothesis"]
        # the model's, prefix counted (the engine renormalises without PAD and BOS: ~1e-3)
        assert g["score"] == pytest.approx(w["score"], abs=5e-3)
    res = run_cli("translate", toy_export, "--greedy", "--align", "--prefix", pfile,
                  input="\n".join(lines) + "\n")
    want_links = run_cli("translate", toy_model, "--greedy", "--align", "--prefix", pfile,
                         input="\n".join(lines) + "\n")
    assert res.exit_code == want_links.exit_code == 0
    assert res.stdout == want_links.stdout


def test_the_server_takes_a_prefix_per_sentence(toy_model, model, lines):
    prefixes = _prefixes(lines)
    want = model.translate_full(lines, prefix=prefixes)
    with serving(toy_model, "--max-sentences", "30") as server:
        r = server.client.post("/v1/translate", json={"text": lines, "prefix": prefixes})
        assert r.status_code == 200, r.text
        assert [t["text"] for t in r.json()["translations"]] == [w.text for w in want]
        one = server.client.post("/v1/translate", json={"text": lines[1],
                                                        "prefix": prefixes[1]})
        assert one.status_code == 200 and one.json()["translations"][0]["text"] == want[1].text
        bad = server.client.post("/v1/translate", json={"text": lines[:2], "prefix": ["x"]})
        assert bad.status_code == 422
        assert bad.json()["error"].startswith("prefix: 1 prefixes for 2 sentences")
