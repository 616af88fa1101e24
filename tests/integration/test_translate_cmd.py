"""`mtkit translate` and `mtkit score --run` on the trained toy model (tests/conftest.py
`toy_model`): streams, files, formats, ensembles, errors, and scoring a run's test split."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mtkit.data.store import text_path
from mtkit.errors import MtkitError
from mtkit.run import data_dir
from mtkit.translation import lines as tr
from tests.helpers import run_cli

# One torch thread (see the `one_thread` fixture in conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")

MTKIT = [sys.executable, "-m", "mtkit"]


@pytest.fixture(scope="module")
def src_file(toy_model: Path) -> Path:
    return text_path(data_dir(toy_model), "test", "src")


_cli = run_cli


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def test_stdin_to_stdout_in_a_subprocess(toy_model, src_file):
    lines = src_file.read_text().splitlines()[:5]
    text = "\n".join([lines[0], "", *lines[1:]]) + "\n"
    proc = subprocess.run([*MTKIT, "translate", str(toy_model), "--threads", "1"], input=text,
                          capture_output=True, text=True, env=_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    expected = _cli("translate", toy_model, "-i", src_file).stdout.splitlines()[:5]
    assert out == [expected[0], "", *expected[1:]]
    assert proc.stderr.strip().splitlines()[-1].startswith("mtkit: translated 6 sentences, ")
    assert "sentences/s" in proc.stderr and "tokens/s" in proc.stderr


def test_gzip_input_on_stdin_or_cut_short(toy_model, src_file, tmp_path):
    """gzip on standard input is read as a .gz file is; a .gz cut short is one line, exit 2
    (it exited 130, 'interrupted', with an empty line)."""
    import gzip

    packed = gzip.compress(src_file.read_bytes())
    proc = subprocess.run([*MTKIT, "translate", str(toy_model), "--threads", "1"], input=packed,
                          capture_output=True, env=_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode() == _cli("translate", toy_model, "-i", src_file).stdout
    cut = tmp_path / "cut.en.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    out = tmp_path / "out.de"
    out.write_text("mine\n")
    proc = subprocess.run([*MTKIT, "translate", str(toy_model), "-i", str(cut), "-o", str(out)],
                          capture_output=True, text=True, env=_env(), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"mtkit: error: {cut}: broken gzip file (")
    assert proc.stderr.count("\n") == 1
    assert out.read_text() == "mine\n"


def test_lines_typed_at_a_terminal_named_by_i_are_translated_as_typed(toy_model, tmp_path):
    """`-i /dev/stdin` at a terminal waited for 2,000 lines (or the end of input) before any
    output, with the progress bar drawn over the typing; standard input itself did not."""
    import pty
    import select

    from mtkit.fileio import is_terminal

    master, slave = pty.openpty()
    try:
        tty = os.ttyname(slave)
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        (tmp_path / "plain.txt").write_text("a\n")
        assert is_terminal(tty)
        assert not any(is_terminal(p) for p in (os.devnull, fifo, tmp_path / "plain.txt"))
        proc = subprocess.Popen([*MTKIT, "translate", str(toy_model), "--greedy", "-i", tty,
                                 "--threads", "1"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=_env())
        try:
            # an empty line first (one byte), then a line: each translated as typed, the
            # input still open (a one-byte start waited for 8 KB or the end once)
            os.write(master, b"\n")
            ready, _, _ = select.select([proc.stdout], [], [], 60)
            assert ready and proc.stdout.readline() == b"\n", "no translation before the end"
            os.write(master, b"mu wi\n")
            ready, _, _ = select.select([proc.stdout], [], [], 60)
            assert ready and proc.stdout.readline().strip(), "no translation before the end"
        finally:
            proc.kill()
            proc.wait()
    finally:
        os.close(master)
        os.close(slave)


def _progress_on_a_terminal(args: list[str], stdin: object) -> str:
    """What `mtkit translate ARGS` draws on a stderr that is a terminal (stdout: a pipe)."""
    import pty
    import select

    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([*MTKIT, "translate", *args, "--threads", "1"], stdin=stdin,
                                stdout=subprocess.DEVNULL, stderr=slave,
                                env={**_env(), "COLUMNS": "120"})
        os.close(slave)
        drawn = b""
        while True:
            ready, _, _ = select.select([master], [], [], 60)
            try:
                chunk = os.read(master, 65536) if ready else b""
            except OSError:  # the terminal's other end is closed: the command is over
                chunk = b""
            if not chunk:
                break
            drawn += chunk
        assert proc.wait(timeout=60) == 0, drawn
    finally:
        os.close(master)
    return drawn.decode(errors="replace")


def test_a_file_gets_a_bar_with_its_total_and_a_pipe_a_count(toy_model, src_file, tmp_path):
    """A file's lines are counted (`-i FILE` or `< FILE`), for a bar with sentences/s and the
    ETA; a pipe, which cannot be read twice, keeps the counter (only the count was shown)."""
    big = tmp_path / "big.txt"
    big.write_text(src_file.read_text() * 20)  # 1,200 lines
    for args, stdin in (([str(toy_model), "-i", str(big), "-o", str(tmp_path / "a.de")],
                         subprocess.DEVNULL),
                        ([str(toy_model), "-o", str(tmp_path / "b.de")], big.open("rb"))):
        drawn = _progress_on_a_terminal(args, stdin)
        assert "/1,200 sentences" in drawn and "sentences/s" in drawn and "ETA" in drawn, drawn
    cat = subprocess.Popen(["cat", str(big)], stdout=subprocess.PIPE)
    drawn = _progress_on_a_terminal([str(toy_model), "-o", str(tmp_path / "c.de")], cat.stdout)
    cat.wait()
    assert " sentences" in drawn and "/1,200" not in drawn and "ETA" not in drawn, drawn
    assert "mtkit: translated 1200 sentences" in drawn


def test_a_pipe_closed_early_ends_the_command_cleanly(toy_model, src_file, tmp_path):
    """`cat big | mtkit translate run | head -n 2`: no traceback, exit status 0."""
    big = tmp_path / "big.txt"
    big.write_text(src_file.read_text() * 100)  # 6000 lines: three chunks
    proc = subprocess.Popen([*MTKIT, "translate", str(toy_model), "--greedy", "-i", str(big),
                             "--threads", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=_env())
    assert proc.stdout is not None and proc.stderr is not None
    head = [proc.stdout.readline() for _ in range(2)]
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert all(line.endswith(b"\n") for line in head)
    assert "Traceback" not in err and "Exception" not in err and "Error" not in err


@pytest.mark.parametrize("args", [["--help"], ["translate", "--help"], ["score", "-r", "{ref}",
                                                                         "{ref}"]])
def test_a_reader_gone_before_help_or_a_table_is_no_failure(args, src_file):
    """`mtkit --help | head -1`, `mtkit score ... | head -1`: the reader closes before the
    command writes; exit 0, nothing on stderr (rich and click exited 1)."""
    proc = subprocess.Popen([*MTKIT, *(a.format(ref=src_file) for a in args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before a byte is written: every write meets a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert err == ""


def test_output_file_is_written_whole_or_not_at_all(toy_model, src_file, tmp_path,
                                                    monkeypatch):
    out = tmp_path / "out.txt"
    result = _cli("translate", toy_model, "-i", src_file, "-o", out)
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert len(out.read_text().splitlines()) == len(src_file.read_text().splitlines())
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]

    def fail(self, lines, stream, on_batch=None, prefixes=None):
        stream.write("half of it\n")
        raise MtkitError("the translation failed")

    monkeypatch.setattr(tr.StreamTranslator, "run", fail)
    before = out.read_text()
    result = _cli("translate", toy_model, "-i", src_file, "-o", out)
    assert result.exit_code == 2 and "the translation failed" in result.stderr
    assert out.read_text() == before and [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_jsonl_nbest_and_alignments(toy_model, src_file):
    result = _cli("translate", toy_model, "-i", src_file, "--format", "jsonl", "--nbest", "2",
                  "--align", "--align-method", "intersection")
    assert result.exit_code == 0, result.output
    recs = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(recs) == 60
    assert set(recs[0]) == {"id", "source", "hypothesis", "score", "tokens", "nbest",
                            "alignment"}
    assert all(len(r["nbest"]) == 2 and r["alignment"] for r in recs)


def test_text_with_alignments(toy_model, src_file):
    result = _cli("translate", toy_model, "-i", src_file, "--align", "--greedy")
    lines = result.stdout.splitlines()
    plain = _cli("translate", toy_model, "-i", src_file, "--greedy").stdout.splitlines()
    assert [line.split(" ||| ")[0] for line in lines] == plain
    assert all(len(line.split(" ||| ")) == 2 for line in lines)


def test_alignment_indices_count_the_lines_whitespace_words(toy_model, tmp_path):
    """Sentencepiece normalizes a zero-width space into a space: 'sa\u200bsa' is one word of
    the line but was two of the links' (every later index shifted, as in `mtkit align`)."""
    (tmp_path / "in").write_text("sa\u200bsa gu mir\nsa sa gu mir\n", encoding="utf-8")
    result = _cli("translate", toy_model, "-i", tmp_path / "in", "--align", "--greedy")
    assert result.exit_code == 0, result.output
    joined, plain = ([tuple(map(int, link.split("-"))) for link in line.split(" ||| ")[1].split()]
                     for line in result.stdout.splitlines())
    assert max(i for i, _ in plain) == 3  # the model links the last word
    assert max(i for i, _ in joined) == 2


@pytest.mark.parametrize("mode", [[], ["--ensemble-mode", "prob"]])
def test_an_ensemble_of_two_copies_equals_the_model(toy_model, src_file, mode):
    one = _cli("translate", toy_model, "-i", src_file, "--format", "jsonl")
    two = _cli("translate", toy_model, toy_model / "best.pt", "-i", src_file, "--format", "jsonl",
               *mode)
    assert one.exit_code == two.exit_code == 0, two.output
    a, b = ([json.loads(x) for x in r.stdout.splitlines()] for r in (one, two))
    assert [r["hypothesis"] for r in a] == [r["hypothesis"] for r in b]
    assert all(abs(x["score"] - y["score"]) < 1e-4 for x, y in zip(a, b, strict=True))


def test_ensemble_mode_needs_an_ensemble_and_a_known_mode(toy_model, src_file):
    one = _cli("translate", toy_model, "-i", src_file, "--ensemble-mode", "prob")
    bad = _cli("translate", toy_model, toy_model, "-i", src_file, "--ensemble-mode", "max")
    assert one.exit_code == bad.exit_code == 2
    assert "--ensemble-mode: needs two or more models" in one.output
    assert "expected logprob or prob" in bad.output


def test_sampling_options_reach_the_sampler(toy_model, src_file):
    args = ["translate", toy_model, "-i", src_file, "--sample", "--temperature", "5"]
    a, b = _cli(*args, "--seed", "3"), _cli(*args, "--seed", "3")
    c = _cli(*args, "--seed", "4", "--top-k", "2")
    assert a.exit_code == c.exit_code == 0, c.output
    assert a.stdout == b.stdout != c.stdout


def test_each_batch_samples_its_own_random_stream(toy_model, tmp_path):
    """Every batch's generator was seeded with --seed alone: the k-th line of each batch got
    the same draws, so a repeated line gave at most a batch's worth of different samples."""
    (tmp_path / "in").write_text("sa pel gu mir nel\n" * 48)
    args = ["translate", toy_model, "-i", tmp_path / "in", "--sample", "--temperature", "5",
            "--batch-tokens", "24"]  # four sentences a batch
    a, b = _cli(*args), _cli(*args)
    assert a.exit_code == 0, a.output
    assert a.stdout == b.stdout  # still reproducible
    lines = a.stdout.splitlines()
    assert len(lines) == 48 and len(set(lines)) > 8


def test_overlong_lines_warn_once_with_their_count(toy_model, tmp_path):
    long_line = " ".join(["sa gu mir"] * 20)  # 60 tokens, the toy limit is 32
    src = tmp_path / "in.txt"
    src.write_text(f"sa gu\n{long_line}\n{long_line} pel\nmir\n")
    result = _cli("translate", toy_model, "-i", src)
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 4
    warning = ("mtkit: warning: 2 input line(s) longer than 32 source tokens (the model's "
               "data.max_len) were truncated")
    assert result.stderr.count("warning") == 1 and warning in result.stderr


def test_a_binary_file_is_refused_naming_it_unless_a_document_reader_takes_it(toy_model,
                                                                             tmp_path):
    """A .docx read as lines (renamed, or on standard input) was translated into noise with
    one warning and exit 0; as report.docx the docx reader takes it."""
    import docx

    doc = docx.Document()
    doc.add_paragraph("sa gu mir")
    doc.save(tmp_path / "report.docx")
    shutil.copyfile(tmp_path / "report.docx", tmp_path / "report.txt")
    out = tmp_path / "out.de"
    result = _cli("translate", toy_model, "-i", tmp_path / "report.txt", "-o", out)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"mtkit: error: {tmp_path / 'report.txt'}: not text: a NUL byte on "
                           "line 1, in its first 8,000 bytes (a binary file); ")
    assert "--input-format (paragraphs, html" in line and "docx)" in line
    assert not out.exists()
    proc = subprocess.run([*MTKIT, "translate", str(toy_model), "--threads", "1"],
                          input=(tmp_path / "report.docx").read_bytes(), capture_output=True,
                          env=_env(), timeout=120)
    assert proc.returncode == 2 and proc.stdout == b""
    assert proc.stderr.decode().startswith("mtkit: error: <stdin>: not text: a NUL byte")
    assert _cli("translate", toy_model, "-i", tmp_path / "report.docx", "-o",
                tmp_path / "out.docx").exit_code == 0
    # text with a stray NUL past the head is still translated, with the warning
    late = tmp_path / "late.txt"
    late.write_bytes(b"sa gu\n" * 2000 + b"mir\0 sa\n")
    result = _cli("translate", toy_model, "-i", late)
    assert result.exit_code == 0 and "NUL bytes on 1 line (first: line 2001)" in result.stderr


@pytest.mark.parametrize(("args", "words"), [
    (["-i", "missing.txt"], "-i missing.txt: input file not found"),
    (["-i", "."], "-i .: is a folder; expected the input file"),
    (["-o", "."], "-o .: is a folder; expected a file name"),
    (["--beam", "0"], "--beam (decode.beam_size): out of range: expected a value >= 1, got 0"),
    (["--nbest", "9"], "--nbest (decode.nbest): cannot exceed beam_size (4)"),
    (["--length-penalty", "long"], "--length-penalty (decode.length_penalty): invalid choice"),
    (["--format", "xml"], "--format: invalid choice 'xml'; expected text or jsonl"),
    (["--device", "gpu"], "--device: expected auto, cpu, cuda, cuda:N or mps, got 'gpu'"),
    (["--greedy", "--sample"], "--greedy and --sample exclude each other"),
    (["--greedy", "--beam", "3"], "--beam is for beam search; it excludes --greedy"),
    (["--top-p", "0.5"], "--top-p: sampling options need --sample (decode.method is beam)"),
    (["--greedy", "--nbest", "2"], "--nbest (decode.nbest): greedy search gives one hypothesis"),
    (["--align-method", "union"], "--align-method needs --align"),
    (["--align", "--align-method", "diag"], "--align-method: invalid choice 'diag'"),
    (["--length-penalty", "none", "--alpha", "0.6"], "--alpha is the GNMT penalty's exponent"),
    (["--greedy", "--length-penalty", "average"], "--length-penalty: with greedy search the "
     "length penalty changes only the score, which text output does not show"),
    (["--greedy", "--alpha", "0"], "--alpha: with greedy search"),  # 0 is a value given
])
def test_bad_options_are_one_line_errors(toy_model, args, words):
    result = _cli("translate", toy_model, *args, input="sa gu\n")
    assert result.exit_code == 2
    assert result.stderr.startswith("mtkit: error: ") and words in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)


def test_a_dash_names_standard_input_and_output(toy_model, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plain = _cli("translate", toy_model, "--greedy", input="sa gu\nmu\n")
    dashes = _cli("translate", toy_model, "--greedy", "-i", "-", "-o", "-",
                  input="sa gu\nmu\n")
    assert plain.exit_code == dashes.exit_code == 0, dashes.output
    assert dashes.stdout == plain.stdout and len(plain.stdout.splitlines()) == 2
    assert not (tmp_path / "-").exists()


def test_a_greedy_length_penalty_rescores_the_jsonl_output(toy_model):
    scores = []
    for penalty in ("none", "average"):
        res = _cli("translate", toy_model, "--greedy", "--length-penalty", penalty, "--format",
                   "jsonl", input="sa gu\n")
        assert res.exit_code == 0, res.output
        scores.append(json.loads(res.stdout)["score"])
    assert scores[0] != scores[1]


def test_bad_checkpoints_are_one_line_errors(toy_model, tmp_path):
    result = _cli("translate", tmp_path / "nowhere", input="sa gu\n")
    assert result.exit_code == 2
    assert "nowhere: no such checkpoint file or run directory" in result.stderr
    result = _cli("translate", tmp_path, input="sa gu\n")
    assert result.exit_code == 2 and "no best.pt or last.pt in this run directory" in result.stderr
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    result = _cli("translate", junk, input="sa gu\n")
    assert result.exit_code == 2 and "junk.pt: not a readable checkpoint" in result.stderr
    assert "Traceback" not in result.output


# --------------------------------------------------------------------------- score --run


@pytest.fixture
def run_copy(toy_model: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    return run


def test_score_run_translates_the_split_then_reuses_it(run_copy):
    result = _cli("score", "--run", run_copy, "--split", "test", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    (system,) = report["systems"]
    written = sorted((run_copy / "translations").iterdir())
    name = Path(system["name"]).name
    assert [p.name for p in written] == [name, name + ".key"]
    assert written[0].name.startswith("test.beam4-")
    assert report["references"] == [str(text_path(data_dir(run_copy), "test", "tgt"))]
    assert system["scores"]["BLEU"]["score"] > 60  # the toy model has learned to reverse
    assert "mtkit: translated test with" in result.stderr
    again = _cli("score", "--run", run_copy, "--split", "test", "--json")
    assert "mtkit: reusing" in again.stderr and json.loads(again.stdout) == report
    # a score call on the file itself gives the same numbers
    plain = _cli("score", "-r", report["references"][0], written[0], "--json")
    assert json.loads(plain.stdout)["systems"][0]["scores"] == system["scores"]
    # a translation edited (or cut short) since is not reused: it is made again
    written[0].write_text(written[0].read_text().replace("\n", "\n\n", 1))
    again = _cli("score", "--run", run_copy, "--split", "test", "--json")
    assert "mtkit: translated test with" in again.stderr and json.loads(again.stdout) == report


def test_score_run_takes_a_checkpoint_of_the_run(run_copy):
    """`mtkit average` writes RUN/averaged.pt, which score --run takes, as translate does;
    its translation is kept apart from the best checkpoint's."""
    shutil.copy(run_copy / "last.pt", run_copy / "averaged.pt")
    result = _cli("score", "--run", run_copy / "averaged.pt", "--split", "test", "--json")
    assert result.exit_code == 0, result.output
    (system,) = json.loads(result.stdout)["systems"]
    assert Path(system["name"]).parent == run_copy / "translations" / "averaged"
    assert Path(system["name"]).name.startswith("test.beam4-")
    assert f"with {run_copy / 'averaged.pt'} into" in result.stderr
    # the run's own checkpoint named is the run: its translation, not another
    assert _cli("score", "--run", run_copy, "--split", "test").exit_code == 0
    again = _cli("score", "--run", run_copy / "best.pt", "--split", "test")
    assert again.exit_code == 0 and "mtkit: reusing" in again.stderr
    # a checkpoint outside a run has no splits: said so (it advised `mtkit prep`)
    away = run_copy.parent / "away.pt"
    shutil.copy(run_copy / "last.pt", away)
    result = _cli("score", "--run", away, "--split", "test")
    assert result.exit_code == 2 and f"{away}: not in a run directory" in result.stderr


def test_score_run_with_greedy_and_other_systems(run_copy, tmp_path):
    other = tmp_path / "other.txt"
    other.write_text(text_path(data_dir(run_copy), "test", "src").read_text())  # unreversed
    result = _cli("score", "--run", run_copy, "--split", "test", "--greedy", other,
                  "-m", "bleu", "--json")
    assert result.exit_code == 0, result.output
    systems = json.loads(result.stdout)["systems"]
    assert Path(systems[0]["name"]).name.startswith("test.greedy-")
    assert systems[0]["scores"]["BLEU"]["score"] > systems[1]["scores"]["BLEU"]["score"]


def test_score_run_checks_other_systems_before_translating(run_copy, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("a b\n")
    result = _cli("score", "--run", run_copy, "--split", "test", short)
    assert result.exit_code == 2 and "line counts differ" in result.stderr
    assert str(short) in result.stderr and not (run_copy / "translations").exists()


def test_score_run_by_length_takes_the_split_source(run_copy):
    result = _cli("score", "--run", run_copy, "--split", "test", "--by-length", "--buckets",
                  "3,5", "-m", "bleu", "--json")
    assert result.exit_code == 0, result.output
    buckets = json.loads(result.stdout)["by_length"]["buckets"]
    assert [b["sentences"] for b in buckets] == [24, 18, 18]  # 2-3, 4-5 and 6-7 words


@pytest.mark.parametrize(("args", "words"), [
    (["--split", "test", "hyp.txt", "-r", "ref.txt"], "--split: only with --run RUN_DIR"),
    (["--run", "{run}"], "--run needs --split NAME"),
    (["--run", "{run}", "--split", "dev"], "--split dev: "),
    (["--run", "{run}", "--split", "test", "-r", "ref.txt"], "--ref: with --run the reference"),
    (["--run", "{run}", "--split", "test", "--by-length", "--src", "src.txt"],
     "--src: with --run the source is the split's own"),
    (["--run", "{run}", "--split", "test", "--greedy", "--beam", "2"],
     "--greedy and --beam exclude each other"),
    (["--run", "{run}", "--split", "test", "--beam", "0"], "--beam (decode.beam_size)"),
    (["hyp.txt"], "missing option --ref/-r FILE"),
    (["--run", "{run}", "--split", "test", "--buckets", "5"], "--buckets needs --by-length"),
])
def test_score_run_errors(toy_model, args, words):
    result = _cli("score", *(a.format(run=toy_model) for a in args))
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("mtkit: error: ") and words in result.stderr
    assert not (toy_model / "translations").exists()


def test_a_checkpoint_refuses_a_vocabulary_it_was_not_trained_on(toy_model, src_file, tmp_path,
                                                                  toy_recipe_path):
    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    bpe = ["--set", "data.spm.model_type=bpe"]
    refused = _cli("prep", toy_recipe_path, "--run-dir", run, *bpe)
    assert refused.exit_code == 2
    assert "holds trained checkpoints (best.pt" in refused.output and "--force" in refused.output
    # Forced: same vocabulary size, different pieces; sizes alone would not notice.
    forced = _cli("prep", toy_recipe_path, "--run-dir", run, *bpe, "--force")
    assert forced.exit_code == 0, forced.output
    out = _cli("translate", run, "-i", src_file)
    assert out.exit_code == 2
    assert "is not the one this checkpoint was trained with" in out.output


def test_a_test_set_added_after_training_keeps_the_vocabulary(toy_model, tmp_path,
                                                              toy_recipe_path):
    """Adding a test set to a trained run was refused ('the recipe's data section changed';
    with --force, 'those checkpoints then stop loading', which was not so): the validation and
    test splits are prepared again with the checkpoints' sentencepiece model."""
    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    spm = {p.name: p.read_bytes() for p in (run / "data").glob("spm*.model")}
    train = (run / "data" / "train.src.ids.npy").read_bytes()
    toy = toy_recipe_path.parent / "toy"
    added = ["--set", f"data.test.extra.src={toy / 'valid.src'}",
             "--set", f"data.test.extra.tgt={toy / 'valid.tgt'}"]
    done = _cli("prep", toy_recipe_path, "--run-dir", run, *added)
    assert done.exit_code == 0, done.output
    assert {p.name: p.read_bytes() for p in (run / "data").glob("spm*.model")} == spm
    assert (run / "data" / "train.src.ids.npy").read_bytes() == train
    scored = _cli("score", "--run", run, "--split", "extra", "--greedy")
    assert scored.exit_code == 0, scored.output
    # The training split's own settings still need --force.
    refused = _cli("prep", toy_recipe_path, "--run-dir", run, *added,
                   "--set", "data.clean.max_len=10")
    assert refused.exit_code == 2 and "holds trained checkpoints" in refused.output


def test_prep_rebuilds_a_missing_tokenizer_of_a_trained_run(toy_model, src_file, tmp_path,
                                                            toy_recipe_path):
    """With nothing changed, a lost sentencepiece model of a trained run is trained again
    from the same inputs (the same model): keeping the one there, as when only the test sets
    change, failed with 'no sentencepiece model; run mtkit prep first', said by prep."""
    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    (model,) = (run / "data").glob("spm*.model")
    kept = model.read_bytes()
    model.unlink()
    done = _cli("prep", toy_recipe_path, "--run-dir", run)
    assert done.exit_code == 0, done.output
    assert model.read_bytes() == kept
    assert _cli("translate", run, "-i", src_file).exit_code == 0


_THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")
_HUGE_PAGES = """
import sys, torch
from mtkit.run import load_model
load_model(sys.argv[1])
big = torch.empty(64 << 20, dtype=torch.uint8).fill_(1)  # 64 MB, touched
kb = [int(line.split()[1]) for line in open("/proc/self/smaps_rollup")
      if line.startswith("AnonHugePages:")][0]
print(kb)
"""


@pytest.mark.skipif(not _THP_MODE.is_file() or "[madvise]" not in _THP_MODE.read_text(),
                    reason="needs Linux transparent huge pages in madvise mode (in 'always' "
                    "mode every process gets them, in 'never' none)")
@pytest.mark.parametrize("user", [None, "0"])
def test_loading_a_model_puts_large_tensors_on_huge_pages(toy_model, user):
    """`load_model` sets THP_MEM_ALLOC_ENABLE before torch's first allocation, so a large
    tensor allocated afterwards lies on 2 MB pages; a value the user set wins."""
    env = {k: v for k, v in _env().items() if k != "THP_MEM_ALLOC_ENABLE"}
    if user is not None:
        env["THP_MEM_ALLOC_ENABLE"] = user
    proc = subprocess.run([sys.executable, "-c", _HUGE_PAGES, str(toy_model)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    huge_kb = int(proc.stdout)
    assert (huge_kb >= 32 << 10) if user is None else (huge_kb < 32 << 10), huge_kb


# --------------------------------------------------------------------------- start-up (issue 14)


def test_in_process_translate_pauses_and_freezes_nothing(toy_model, src_file):
    """Only a process mtkit owns has its loading frozen (mtkit/process/startup.py)."""
    import gc

    from mtkit.process import startup

    before = gc.get_freeze_count()
    res = _cli("translate", toy_model, "-i", src_file, "--greedy")
    assert res.exit_code == 0, res.stderr
    assert gc.isenabled() and gc.get_freeze_count() == before
    assert not startup._OWNED["process"]


def test_the_console_script_freezes_what_loading_made(toy_model, src_file):
    code = ("import atexit, gc, sys\n"
            "atexit.register(lambda: print('frozen', gc.get_freeze_count(), gc.isenabled(),"
            " file=sys.stderr))\n"
            f"sys.argv = ['mtkit', 'translate', {str(toy_model)!r}, '-i', {str(src_file)!r},"
            " '--greedy']\n"
            "from mtkit.cli import main\n"
            "main()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=_env(), timeout=120)
    assert out.returncode == 0, out.stderr
    frozen, enabled = out.stderr.split("frozen ")[1].split()[:2]
    assert int(frozen) > 50_000 and enabled == "True"  # torch's modules and the model


def test_the_file_on_stdin_is_not_replaced_and_a_closed_stdin_is_one_line(toy_model, src_file,
                                                                         tmp_path):
    """`translate RUN -o f < f` replaced f, the source, unread (exit 0); with standard input
    closed (`<&-`), translate and score were AttributeError tracebacks."""
    source = tmp_path / "s.txt"
    shutil.copy(src_file, source)
    with open(source, "rb") as stdin:
        out = subprocess.run([sys.executable, "-m", "mtkit", "translate", str(toy_model),
                              "--greedy", "-o", str(source)], stdin=stdin,
                             capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stderr == (f"mtkit: error: -o {source}: is standard input, /dev/stdin; writing "
                          "there would replace it; give another file\n")
    assert source.read_bytes() == src_file.read_bytes()
    for args in (["translate", str(toy_model), "--greedy"], ["score", "-r", str(source), "-"]):
        out = subprocess.run([sys.executable, "-m", "mtkit", *args], capture_output=True,
                             text=True, timeout=120, preexec_fn=lambda: os.close(0))
        assert (out.returncode, out.stderr) == (2, "mtkit: error: standard input is closed; "
                                                   "give an input file or redirect it\n"), args


def test_outputs_may_not_replace_the_runs_other_checkpoints_nor_pose_as_gzip(toy_model,
                                                                             src_file, tmp_path):
    """`translate RUN/checkpoint_N.pt -o RUN/best.pt` replaced the run's best checkpoint with
    text; `-o out.de.gz` wrote plain text under a gzip name (gzip -d refused it); `score
    --run RUN/data` advised training into the data folder."""
    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    other = next(p for p in sorted(run.glob("checkpoint_*.pt")))
    best = (run / "best.pt").read_bytes()
    out = _cli("translate", other, "-i", src_file, "-o", run / "best.pt")
    assert out.exit_code == 2 and out.stderr.count("error") == 1, out.output
    assert f"-o {run / 'best.pt'}: is the run's best.pt" in out.stderr
    assert (run / "best.pt").read_bytes() == best
    out = _cli("translate", run, "-i", src_file, "-o", tmp_path / "out.de.gz")
    assert out.exit_code == 2 and "mtkit writes plain text, not gzip" in out.stderr
    assert not (tmp_path / "out.de.gz").exists()
    out = _cli("score", "--run", run / "data", "--split", "test")
    assert out.exit_code == 2
    assert f"{run / 'data'}: a run's prepared data, not the run directory; give {run}" in \
        out.stderr
