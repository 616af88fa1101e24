"""`mtkit score`: sacreBLEU scores and signatures, paired tests, BLEU by length, plots, errors."""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console
from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.significance import PairedTest

from mtkit.errors import MtkitError
from mtkit.score import (
    MetricOptions,
    SignificanceOptions,
    Text,
    bucket_bounds,
    parse_buckets,
    plot_by_length,
    read_text,
    score_files,
    score_texts,
)
from tests.helpers import REPO, run_cli

MULTI30K = Path(os.environ.get("MTKIT_DATA_MIRROR")
                or REPO.parent / "shared" / "data" / "multi30k")
WORDS = [f"w{i}" for i in range(300)]


def _corrupt(lines: list[str], rate: float, seed: int) -> list[str]:
    """Drop each word with probability `rate` and replace another `rate/2` with a wrong one:
    a synthetic system whose quality falls as `rate` grows."""
    rng = random.Random(seed)
    out = []
    for line in lines:
        words = [w if rng.random() > rate / 2 else rng.choice(WORDS)
                 for w in line.split() if rng.random() > rate]
        out.append(" ".join(words))
    return out


@pytest.fixture(scope="module")
def corpus() -> dict[str, list[str]]:
    """200 seeded sentences of 2..45 words: source, two references, a good and a bad system."""
    rng = random.Random(0)
    src = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 45))) for _ in range(200)]
    ref = [" ".join(reversed(s.split())).capitalize() + "." for s in src]
    ref2 = _corrupt(ref, 0.1, seed=1)
    return {"src": src, "ref": ref, "ref2": ref2, "good": _corrupt(ref, 0.15, seed=2),
            "bad": _corrupt(ref, 0.6, seed=3)}


@pytest.fixture
def files(tmp_path: Path, monkeypatch, corpus: dict[str, list[str]]) -> dict[str, Path]:
    """The corpus as files, named relative to the current folder (short names keep rich's
    80-column tables from wrapping)."""
    monkeypatch.chdir(tmp_path)
    out = {}
    for name, lines in corpus.items():
        out[name] = Path(f"{name}.txt")
        out[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
    out["good2"] = Path("good_again.txt")  # the same output as `good`, another file
    out["good2"].write_bytes(out["good"].read_bytes())
    return out


def _cli(*args: object, input: str | bytes | None = None):
    return run_cli("score", *args, input=input)


def _row(output: str, system: str) -> list[str]:
    """The cells of a system's row in a rich table."""
    line = next(ln for ln in output.splitlines() if ln.startswith("│") and f" {system} " in ln)
    return [c.strip() for c in line.strip("│").split("│")][1:]


# --------------------------------------------------------------------------- scores


@pytest.mark.parametrize("width", [1, 2, 4])
def test_table_scores_equal_sacrebleu_to_the_last_printed_digit(files, corpus, width):
    result = _cli("-r", files["ref"], files["good"], files["bad"], "--width", width)
    assert result.exit_code == 0, result.output
    refs = [corpus["ref"]]
    for system in ("good", "bad"):
        expected = [m.corpus_score(corpus[system], refs).format(width, score_only=True)
                    for m in (BLEU(), CHRF(), TER())]
        assert _row(result.stdout, files[system].name) == expected


def test_options_pass_through_and_json_equals_sacrebleu(files, corpus):
    result = _cli("-r", files["ref"], "-r", files["ref2"], files["good"], "--chrf-plus",
                  "--lowercase", "--tokenize", "intl", "--ter-case-sensitive", "--json")
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    refs = [corpus["ref"], corpus["ref2"]]
    metrics = {"BLEU": BLEU(lowercase=True, tokenize="intl"),
               "chrF2++": CHRF(word_order=2, lowercase=True), "TER": TER(case_sensitive=True)}
    for name, metric in metrics.items():
        expected = metric.corpus_score(corpus["good"], refs)
        assert got["systems"][0]["scores"][name]["score"] == expected.score
        assert got["signatures"][name] == metric.get_signature().format()
    assert "nrefs:2" in got["signatures"]["BLEU"] and "tok:intl" in got["signatures"]["BLEU"]
    assert "case:lc" in got["signatures"]["BLEU"] and "nw:2" in got["signatures"]["chrF2++"]
    assert "case:mixed" in got["signatures"]["TER"]
    # a second reference close to the first one can only raise BLEU (best match per sentence)
    one_ref = BLEU(lowercase=True, tokenize="intl").corpus_score(corpus["good"], refs[:1])
    assert got["systems"][0]["scores"]["BLEU"]["score"] > one_ref.score


def test_signatures_printed_under_the_table(files, corpus):
    result = _cli("-r", files["ref"], files["good"], "-m", "bleu,chrf")
    assert result.exit_code == 0, result.output
    bleu = BLEU()
    bleu.corpus_score(corpus["good"], [corpus["ref"]])
    assert f"BLEU signature: {bleu.get_signature().format()}" in result.stdout
    assert "chrF2 signature: nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:" \
        in result.stdout
    assert "TER" not in result.stdout
    assert "BP = " in result.stdout  # BLEU's details: precisions, brevity penalty, lengths


def test_stdin_hypothesis_scores_like_the_file(files):
    from_file = json.loads(_cli("-r", files["ref"], files["good"], "--json").stdout)
    from_stdin = _cli("-r", files["ref"], "-", "--json", input=files["good"].read_text())
    assert from_stdin.exit_code == 0, from_stdin.output
    got = json.loads(from_stdin.stdout)
    assert got["systems"][0]["name"] == "<stdin>"
    assert got["systems"][0]["scores"] == from_file["systems"][0]["scores"]
    # gzip on stdin is decompressed, as a .gz file is (it was scored as bytes: BLEU 1.6)
    gz = _cli("-r", files["ref"], "-", "--json", input=gzip.compress(files["good"].read_bytes()))
    assert gz.exit_code == 0 and gz.stderr == "", gz.output
    assert json.loads(gz.stdout)["systems"][0]["scores"] == from_file["systems"][0]["scores"]


def test_read_text_gzip_crlf_and_trailing_space(tmp_path):
    path = tmp_path / "a.txt.gz"
    path.write_bytes(gzip.compress("Ein Haus. \r\nZwei Häuser\r\n\n".encode()))
    assert read_text(path).lines == ("Ein Haus.", "Zwei Häuser", "")


# --------------------------------------------------------------------------- significance


def _paired(files, *systems, test="bs", n=100, seed=12345):
    sig = SignificanceOptions(tests=(test,), bs_samples=n, ar_trials=n, seed=seed)
    return score_files([files["ref"]], [files[s] for s in systems], metrics=MetricOptions(
        metrics=("bleu", "chrf")), significance=sig)


@pytest.mark.parametrize("test", ["bs", "ar"])
def test_clearly_different_systems_are_significant(files, test):
    report = _paired(files, "good", "bad", test=test)
    (result,) = report.significance
    for metric in ("BLEU", "chrF2"):
        base, bad = result.results[metric]
        assert base.p_value is None and bad.p_value is not None
        assert bad.p_value < 0.05 and result.significant(metric, 1)
        assert bad.score < base.score - 10
        lo, hi = bad.mean - bad.ci, bad.mean + bad.ci  # 95% CI of the bad system
        assert lo <= bad.score <= hi and hi < base.score


@pytest.mark.parametrize("test", ["bs", "ar"])
def test_identical_systems_are_not_significant(files, test):
    report = _paired(files, "good", "good2", test=test)
    for metric, (base, same) in report.significance[0].results.items():
        assert same.score == base.score
        assert same.p_value == 1.0 and not report.significance[0].significant(metric, 1)


@pytest.mark.parametrize("test", ["bs", "ar"])
def test_paired_results_equal_sacrebleus_paired_test(files, corpus, test, monkeypatch):
    report = _paired(files, "good", "bad", test=test, n=50, seed=7)
    monkeypatch.setenv("SACREBLEU_SEED", "7")
    metric = BLEU(references=[corpus["ref"]])
    sigs, table = PairedTest([("g", corpus["good"]), ("b", corpus["bad"])], {"BLEU": metric},
                             references=None, test_type=test, n_samples=50,
                             n_ar_confidence=50 if test == "ar" else -1)()
    ours = report.significance[0].results["BLEU"]
    for mine, theirs in zip(ours, table["BLEU"], strict=True):
        assert mine.score == theirs.score and mine.mean == pytest.approx(theirs.mean)
        assert mine.ci == pytest.approx(theirs.ci)
    assert ours[1].p_value == table["BLEU"][1].p_value
    assert report.significance[0].signatures["BLEU"] == sigs["BLEU"].format()
    assert f"{test}:50" in sigs["BLEU"].format() and "seed:7" in sigs["BLEU"].format()


def test_seed_reaches_sacrebleu(files):
    means = [_paired(files, "good", "bad", seed=s).significance[0].results["BLEU"][1].mean
             for s in (1, 1, 2)]
    assert means[0] == means[1] != means[2]


def test_cli_significance_table_marks_significance(files):
    result = _cli("-r", files["ref"], files["good"], files["good2"], files["bad"], "-m", "bleu",
                  "--paired-bs", "--paired-bs-n", 100, "--paired-ar", "--paired-ar-n", 100)
    assert result.exit_code == 0, result.output
    assert "Paired bootstrap resampling (n=100, seed 12345)" in result.stdout
    assert "Paired approximate randomization (n=100, seed 12345)" in result.stdout
    lines = result.stdout.splitlines()
    p_lines = [ln for ln in lines if "p = " in ln]
    assert len(p_lines) == 4  # two tests x two systems besides the baseline
    assert [("*" in ln) for ln in p_lines] == [False, True, False, True]
    assert "p = 1.0000" in p_lines[0]
    assert "bs:100|seed:12345" in result.stdout and "ar:100|seed:12345" in result.stdout


# --------------------------------------------------------------------------- by length


def test_bucket_bounds_and_parsing():
    assert bucket_bounds((10, 20)) == [(0, 10), (11, 20), (21, None)]
    assert parse_buckets("5,15,40") == (5, 15, 40)
    for bad in ("10,5", "0,10", "a,b", "", "10,10"):
        with pytest.raises(MtkitError, match="increasing positive integers"):
            parse_buckets(bad)


def test_length_buckets_partition_the_corpus_and_match_sacrebleu(corpus):
    hyps = [Text("good", tuple(corpus["good"])), Text("bad", tuple(corpus["bad"]))]
    edges = (10, 20, 30, 40)
    report = score_texts([Text("ref", tuple(corpus["ref"]))], hyps,
                         src=Text("src", tuple(corpus["src"])), buckets=edges,
                         metrics=MetricOptions(metrics=("chrf",)))
    buckets = report.by_length
    assert [b.label for b in buckets] == ["0-10", "11-20", "21-30", "31-40", "41+"]
    assert sum(b.sentences for b in buckets) == len(corpus["src"])
    lengths = [len(s.split()) for s in corpus["src"]]
    for b in buckets:
        idx = [i for i, n in enumerate(lengths) if n >= b.lo and (b.hi is None or n <= b.hi)]
        assert b.sentences == len(idx) > 0
        for j, system in enumerate(("good", "bad")):
            expected = BLEU().corpus_score([corpus[system][i] for i in idx],
                                           [[corpus["ref"][i] for i in idx]])
            assert b.bleu[j] == expected.score
    assert report.length_signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a")


def test_empty_bucket_and_edges_are_inclusive(tmp_path):
    src = ["a b c", "a b c d", "x " * 9 + "y"]  # 3, 4 and 10 words
    ref = ["the cat sat", "the dog ran off", "one two three four five six seven eight nine ten"]
    report = score_texts([Text("r", tuple(ref))], [Text("h", tuple(ref))],
                         src=Text("s", tuple(src)), buckets=(3, 5, 9, 10))
    assert [(b.label, b.sentences) for b in report.by_length] == [
        ("0-3", 1), ("4-5", 1), ("10-10", 1)]  # the empty 6-9 and 11+ are left out
    assert [b["label"] for b in report.to_dict()["by_length"]["buckets"]] == [
        "0-3", "4-5", "10-10"]


def test_small_buckets_are_marked_unreliable_in_table_json_and_plot(tmp_path):
    """A bucket of 2 sentences was drawn and tabled like one of 500."""
    src = ["a b"] * 25 + ["a b c d e f"] * 2  # 25 short sentences, 2 long ones
    ref = ["the cat sat on the mat"] * 27
    report = score_texts([Text("r", tuple(ref))], [Text("h", tuple(ref))],
                         src=Text("s", tuple(src)), buckets=(3, 5))
    assert [(b.label, b.reliable) for b in report.by_length] == [("0-3", True), ("6+", False)]
    assert [b["reliable"] for b in report.to_dict()["by_length"]["buckets"]] == [True, False]
    console = Console(file=io.StringIO(), width=100)
    report.render(console)
    table = console.file.getvalue()
    assert "2, few" in table and "25, few" not in table
    assert "few: a bucket of under 20 sentences" in table
    svg = tmp_path / "len.svg"
    plot_by_length(report, svg)
    text = svg.read_text()
    assert "(2, few)" in text and "(25)" in text and "unreliable" in text


def test_cli_by_length_table(files, corpus):
    result = _cli("-r", files["ref"], files["good"], files["bad"], "--src", files["src"],
                  "--by-length", "--buckets", "15,30", "-m", "ter")
    assert result.exit_code == 0, result.output
    counts = [int(_row(result.stdout, label)[0]) for label in ("0-15", "16-30", "31+")]
    assert sum(counts) == len(corpus["src"])


# --------------------------------------------------------------------------- plots


def test_plot_png_svg_pdf(files, tmp_path):
    report = score_files([files["ref"]], [files["good"], files["bad"]], src=files["src"],
                         metrics=MetricOptions(metrics=("bleu",)))
    png, svg, pdf = tmp_path / "len.png", tmp_path / "len.svg", tmp_path / "len.PDF"
    for path in (png, svg, pdf):
        plot_by_length(report, path)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 400 and height >= 250
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    text = svg.read_text()
    assert "good.txt" in text and "bad.txt" in text  # the legend names both systems
    assert pdf.read_bytes()[:5] == b"%PDF-"
    assert list(tmp_path.glob(".*.tmp")) == []  # atomic writes leave no temporary files


def test_cli_plot_implies_by_length(files, tmp_path):
    out = tmp_path / "plots" / "bleu_by_length.png"
    result = _cli("-r", files["ref"], files["good"], "--src", files["src"], "--plot", out)
    assert result.exit_code == 2 and "folder" in result.output  # as with the shell's >
    out.parent.mkdir()
    result = _cli("-r", files["ref"], files["good"], "--src", files["src"], "--plot", out, "--json")
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert "by_length" in json.loads(result.stdout)


# --------------------------------------------------------------------------- errors


def _fails(result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    err = result.stderr.strip()
    assert err.startswith("mtkit: error:") and "\n" not in err, err
    for word in words:
        assert word in err, err


def test_line_count_mismatch_names_both_files(files, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("one line\nanother\n")
    _fails(_cli("-r", files["ref"], files["good"], short), "ref.txt", "200", "short.txt", "2")
    _fails(_cli("-r", files["ref"], "-r", short, files["good"]), "short.txt", "has 2")
    _fails(_cli("-r", files["ref"], files["good"], "--src", short, "--by-length"),
           "source", "short.txt")


def test_missing_empty_and_directory_inputs(files, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    _fails(_cli("-r", files["ref"], tmp_path / "nope.txt"), "nope.txt", "no such file")
    _fails(_cli("-r", empty, files["good"]), "empty.txt", "empty")
    _fails(_cli("-r", files["ref"], tmp_path), "is a directory")
    _fails(_cli("-r", files["ref"], "-", input=""), "<stdin>", "empty")


def test_invalid_utf8_is_replaced_with_the_shared_warning(files, tmp_path):
    latin1 = tmp_path / "latin1.txt"
    lines = files["good"].read_bytes().split(b"\n")
    lines[1] = "Gr\xfc\xdfe".encode("latin-1")
    latin1.write_bytes(b"\n".join(lines))
    assert read_text(latin1).lines[1] == "Gr\ufffd\ufffde"
    result = _cli("-r", files["ref"], latin1)
    assert result.exit_code == 0, result.output
    assert result.stderr == (f"mtkit: warning: {latin1}: invalid UTF-8 on 1 line (first: line "
                             "2), replaced with U+FFFD\n")


def test_tokenized_output_gets_one_warning_naming_its_file(tmp_path, monkeypatch):
    """sacreBLEU's own check warns in three bare lines that name its Python parameter
    `force`; mtkit says it in one line naming the file, for BLEU only (as sacreBLEU)."""
    monkeypatch.chdir(tmp_path)
    lines = [f"a man sits on bench {i} ." for i in range(120)]
    Path("tok.txt").write_text("\n".join(lines) + "\n")
    Path("ref.txt").write_text("\n".join(x[:-2] + "." for x in lines) + "\n")
    result = _cli("-r", "ref.txt", "tok.txt", "--json")
    assert result.exit_code == 0, result.output
    assert result.stderr == ("mtkit: warning: tok.txt: 120 of 120 lines end in a tokenized "
                             "period (' .'); BLEU expects detokenized text, which would score "
                             "differently\n")
    scores = json.loads(result.stdout)
    bleu = BLEU()
    assert scores["systems"][0]["scores"]["BLEU"]["score"] == bleu.corpus_score(
        lines, [[x[:-2] + "." for x in lines]]).score
    assert scores["signatures"]["BLEU"] == bleu.get_signature().format()
    assert _cli("-r", "ref.txt", "tok.txt", "-m", "chrf").stderr == ""
    Path("few.txt").write_text("\n".join(lines[:99] + ["x."] * 21) + "\n")
    assert _cli("-r", "ref.txt", "few.txt").stderr == ""


def test_what_sacrebleu_logs_becomes_a_warning_or_goes_with_its_error(files, monkeypatch,
                                                                      capfd):
    import logging

    from mtkit.score import metrics

    def logging_bleu(fails: bool):
        def make(**kwargs):
            logging.getLogger("sacrebleu").warning("Tokenizer 'x' has been changed to 'y'.")
            if fails:
                raise OSError("no network")
            return BLEU(**kwargs)
        return make

    monkeypatch.setattr(metrics, "BLEU", logging_bleu(fails=False))
    result = _cli("-r", files["ref"], files["good"], "-m", "bleu")
    assert result.exit_code == 0, result.output
    assert result.stderr == ("mtkit: warning: sacreBLEU: Tokenizer 'x' has been changed to "
                             "'y'.\n")
    monkeypatch.setattr(metrics, "BLEU", logging_bleu(fails=True))
    result = _cli("-r", files["ref"], files["good"], "-m", "bleu")
    assert result.exit_code == 2
    assert result.stderr == ("mtkit: error: sacrebleu cannot set up bleu with tokenizer '13a': "
                             "no network\n")
    assert capfd.readouterr().err == ""  # nothing printed past the runner either
    assert logging.getLogger("sacrebleu").handlers == []


@pytest.mark.parametrize("args, words", [
    (["--paired-bs"], ["two or more hypothesis files"]),
    (["--src", "{src}"], ["--src is used only by --by-length"]),
    (["--by-length"], ["need --src"]),
    (["--paired-ar-n", "5"], ["--paired-ar-n needs --paired-ar"]),
    (["--seed", "3"], ["--seed needs"]),
    (["-m", "bleu,meteor"], ["--metrics 'bleu,meteor': 'meteor' unknown; expected names "
                             "among bleu, chrf, ter"]),
    (["-m", "bleu,,"], ["--metrics 'bleu,,': an empty name"]),  # was accepted as bleu
    (["--tokenize", "moses"], ["moses", "13a"]),
    (["-m", "bleu", "--chrf-plus"], ["need chrf in --metrics"]),
    (["--chrf-plus", "--chrf-word-order", "1"], ["--chrf-plus is --chrf-word-order 2"]),
    (["--src", "{src}", "--plot", "out.jpg"], ["out.jpg", ".png, .svg or .pdf"]),
    (["--src", "{src}", "--by-length", "--buckets", "30,20"], ["--buckets '30,20'", "increasing"]),
    (["-", "-"], ["only once"]),
    (["--json", "--width", "3"], ["--width sets the decimals of the tables"]),
])
def test_bad_flags_are_one_line_errors(files, args, words):
    args = [a.format(src=files["src"]) for a in args]
    _fails(_cli("-r", files["ref"], files["good"], *args, input="x\n"), *words)


def test_options_validate_in_the_library():
    with pytest.raises(MtkitError, match="seed 0"):
        SignificanceOptions(seed=0)
    with pytest.raises(MtkitError, match="^chrf_word_order -1: expected 0 or more"):
        MetricOptions(chrf_word_order=-1)


# --------------------------------------------------------------------------- real text


@pytest.mark.data
def test_multi30k_corrupted_systems(tmp_path):
    ref_path = MULTI30K / "test_2016_flickr.de.gz"
    src_path = MULTI30K / "test_2016_flickr.en.gz"
    if not ref_path.exists() or not src_path.exists():
        pytest.skip(f"{MULTI30K} not available")
    ref = list(read_text(ref_path).lines)
    light, heavy = tmp_path / "light.de", tmp_path / "heavy.de"
    light.write_text("\n".join(_corrupt(ref, 0.1, seed=4)) + "\n", encoding="utf-8")
    heavy.write_text("\n".join(_corrupt(ref, 0.4, seed=5)) + "\n", encoding="utf-8")
    report = score_files([ref_path], [light, heavy], src=src_path,
                         significance=SignificanceOptions(bs_samples=100))
    assert report.sentences == 1000
    for i, hyp in enumerate((light, heavy)):
        hyps = hyp.read_text(encoding="utf-8").splitlines()
        assert report.scores[i]["BLEU"].score == BLEU().corpus_score(hyps, [ref]).score
        assert report.scores[i]["TER"].score == TER().corpus_score(hyps, [ref]).score
    assert report.significance[0].significant("BLEU", 1)
    assert sum(b.sentences for b in report.by_length) == 1000


def test_the_sacrebleu_adapter_matches_sacrebleus_public_scores():
    """mtkit.score.sacrebleu_api is the only caller of sacreBLEU's private API: if an upgrade
    changes those calls, this fails (loudly, naming the function) instead of scores going
    wrong. Each adapter result must equal sacreBLEU's public corpus_score."""
    from sacrebleu.metrics import BLEU, CHRF, TER

    from mtkit.score import sacrebleu_api

    refs = ["the cat sat on the mat", "a dog runs in the park", "it is raining today"]
    hyps = ["the cat sat on a mat", "a dog is running in a park", "it rains today"]
    for metric in (BLEU(references=[refs]), CHRF(word_order=2, references=[refs]),
                   TER(references=[refs])):
        public = metric.corpus_score(hyps, None)
        stats = sacrebleu_api.sentence_statistics(metric, hyps)
        assert len(stats) == len(hyps), "sentence_statistics: one entry per sentence expected"
        name, score, verbose = sacrebleu_api.corpus_score(metric, stats)
        assert (name, score) == (public.name, public.score), "corpus_score changed"
        assert verbose in public.format(), "corpus_score: verbose details changed"
        _, sub, _ = sacrebleu_api.corpus_score(metric, stats[:2])
        assert sub == metric.corpus_score(hyps[:2], [refs[:2]]).score, "subset aggregation"
    bleu = BLEU(references=[refs])
    assert "BP = " in sacrebleu_api.corpus_score(
        bleu, sacrebleu_api.sentence_statistics(bleu, hyps))[2], "BLEU's verbose details"
    before = os.environ.get("SACREBLEU_SEED")
    with sacrebleu_api.seeded(7):
        assert os.environ["SACREBLEU_SEED"] == "7"
    assert os.environ.get("SACREBLEU_SEED") == before
