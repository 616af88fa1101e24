"""Bad input and faults through the command line, as a careful user and a hostile one meet them.

Every case asserts the README's promise: exit code 2, one line on stderr naming the path, key
or flag and what was expected, no traceback, and the user's files unchanged. Disk-full and
read-only cases mount a small tmpfs (or remount it read-only), which needs root; elsewhere they
are skipped with that reason.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mtkit.train import loop
from tests.helpers import RECIPES, default_signals, run_cli

TOY = RECIPES / "toy.yaml"
FAST = ["--set", "train.max_time=null", "--set", "train.threads=1"]


_cli = run_cli


def _fails(result, *words: str) -> str:
    """Exit 2, one error line (the last on stderr; training prints its progress before it)
    starting `mtkit: error:` holding every word, no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.output, result.output
    assert sum("error" in line for line in lines) == 1, result.stderr
    err = lines[-1]
    assert err.startswith("mtkit: error: "), result.stderr
    for word in words:
        assert word in err, (word, err)
    return err


def _tree(root: Path) -> dict[str, str]:
    """Every file under `root` with its sha256: the user's files, to check they are untouched."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _toy_recipe(tmp_path: Path, body_extra: str = "", name: str = "toy") -> Path:
    """The toy recipe with absolute data paths, written into tmp_path."""
    text = TOY.read_text(encoding="utf-8").replace("toy/", f"{RECIPES / 'toy'}/")
    text = text.replace("name: toy ", f"name: {name} ", 1) + body_extra
    path = tmp_path / "recipe.yml"
    path.write_text(text, encoding="utf-8")
    return path


@contextlib.contextmanager
def _tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _read_only(where: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)


# --------------------------------------------------------------------------- 1. foreign folders


def test_a_run_name_of_dots_is_refused_and_the_folder_kept(tmp_path, monkeypatch):
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "data" / "mine.txt").write_text("precious\n")
    (project / "recipe.yaml").write_text("mine\n")
    before = _tree(project)
    recipe = _toy_recipe(tmp_path, name="..")
    monkeypatch.chdir(project / "data")  # runs/.. would be this folder
    _fails(_cli("prep", recipe), "name", "plain folder name")
    _fails(_cli("prep", recipe, "--set", "name=."), "name", "plain folder name")
    assert _tree(project) == before


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_prep_never_replaces_a_data_folder_it_did_not_write(tmp_path, force):
    run = tmp_path / "mine"
    (run / "data").mkdir(parents=True)
    (run / "data" / "corpus.txt").write_text("my corpus\n")
    before = _tree(run)
    _fails(_cli("prep", _toy_recipe(tmp_path), "--run-dir", run, *force),
           f"{run / 'data'}", "not written by mtkit")
    _fails(_cli("train", _toy_recipe(tmp_path), "--run-dir", run, *FAST),
           f"{run / 'data'}", "not written by mtkit")
    assert _tree(run) == before


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_prep_again_keeps_files_of_the_users_in_its_data_folder(tmp_path, force):
    """data/ is replaced as a whole when its data section changes: a file of the user's in
    it went with it (exit 0, nothing said)."""
    recipe, run = _toy_recipe(tmp_path), tmp_path / "run"
    assert _cli("prep", recipe, "--run-dir", run).exit_code == 0
    (run / "data" / "my_notes.txt").write_text("precious\n")
    before = _tree(run / "data")
    _fails(_cli("prep", recipe, "--run-dir", run, "--set", "data.spm.vocab_size=48", *force),
           f"{run / 'data'}", "did not write (my_notes.txt)")
    assert _tree(run / "data") == before
    (run / "data" / "my_notes.txt").unlink()
    assert _cli("prep", recipe, "--run-dir", run, "--set", "data.spm.vocab_size=48",
                *force).exit_code == 0
    (run / "data" / "manifest.json").unlink()  # a damaged data/ of the run: rebuilt
    assert _cli("prep", recipe, "--run-dir", run).exit_code == 0


def test_the_current_folder_as_run_dir_is_refused_when_it_holds_other_files(tmp_path,
                                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("mine\n")
    (tmp_path / "recipe.yaml").write_text("my own recipe\n")
    (tmp_path / "elsewhere").mkdir()
    recipe = _toy_recipe(tmp_path / "elsewhere")
    before = _tree(tmp_path)
    for run_dir in (".", ""):  # typer reads '' as the current folder
        _fails(_cli("prep", recipe, "--run-dir", run_dir), "not empty", "notes.txt")
    assert _tree(tmp_path) == before


def test_a_run_dir_that_is_a_file_is_refused(tmp_path):
    a_file = tmp_path / "run"
    a_file.write_text("x\n")
    _fails(_cli("prep", _toy_recipe(tmp_path), "--run-dir", a_file), str(a_file), "is a file")
    _fails(_cli("train", _toy_recipe(tmp_path), "--run-dir", a_file, *FAST), str(a_file),
           "is a file")
    assert a_file.read_text() == "x\n"


def test_a_command_that_fails_before_writing_leaves_no_run_folder(tmp_path):
    """A run folder the command made holds only its lock when it fails early (a data file
    missing, --resume of nothing): both go; a folder that was there stays."""
    recipe = tmp_path / "bad.yml"
    recipe.write_text(_toy_recipe(tmp_path).read_text().replace("train.src", "missing.src", 1))
    _fails(_cli("prep", recipe, "--run-dir", tmp_path / "new"), "missing.src")
    _fails(_cli("train", _toy_recipe(tmp_path), "--run-dir", tmp_path / "new2", "--resume",
                *FAST), "--resume")
    assert not (tmp_path / "new").exists() and not (tmp_path / "new2").exists()
    (tmp_path / "kept").mkdir()
    _fails(_cli("prep", recipe, "--run-dir", tmp_path / "kept"), "missing.src")
    assert (tmp_path / "kept").is_dir()


# --------------------------------------------------------------------------- 2. one writer


def test_a_lock_file_removed_as_it_is_locked_is_locked_again(tmp_path, monkeypatch):
    """A holder removes a run folder it made along with the lock when it wrote nothing else;
    a process that opened that lock file just before then locks a file no longer there, and
    must take the lock again on the one that is."""
    from mtkit.process import lock as run_mod

    run = tmp_path / "run"
    run.mkdir()
    lock = run / ".mtkit.lock"
    lock.write_text("")
    calls = []
    real = run_mod.fcntl.flock

    def flock(fd, op):
        calls.append(fd)
        if len(calls) == 1:  # the holder removes the file between our open and our lock
            os.unlink(lock)
        return real(fd, op)

    monkeypatch.setattr(run_mod.fcntl, "flock", flock)
    made, fd = run_mod._locked(run, lock)
    try:
        assert len(calls) == 2 and made == [lock]  # the lock file is ours now, not the folder
        assert os.fstat(fd).st_ino == os.stat(lock).st_ino
    finally:
        os.close(fd)


_HOLD = """
import sys, time
from mtkit.process.lock import run_lock
with run_lock(sys.argv[1], "train"):
    print("held", flush=True)
    time.sleep(120)
"""


def test_a_second_writer_is_refused_naming_the_holder_and_a_dead_one_blocks_nothing(tmp_path):
    run = tmp_path / "run"
    assert _cli("prep", _toy_recipe(tmp_path), "--run-dir", run).exit_code == 0
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(run)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = _tree(run)
        err = _fails(_cli("train", _toy_recipe(tmp_path), "--run-dir", run, *FAST),
                     str(run), "in use by mtkit train", f"pid {holder.pid}")
        assert "since" in err
        _fails(_cli("prep", _toy_recipe(tmp_path), "--run-dir", run, "--force"),
               f"pid {holder.pid}")
        assert _tree(run) == before
    finally:
        holder.send_signal(signal.SIGKILL)  # kill -9: no chance to clean up
        holder.wait()
    # The lock file is still there, naming the dead process; it blocks nothing.
    assert json.loads((run / ".mtkit.lock").read_text())["pid"] == holder.pid
    ok = _cli("train", _toy_recipe(tmp_path), "--run-dir", run, *FAST,
              "--set", "train.max_updates=2")
    assert ok.exit_code == 0, ok.output


# --------------------------------------------------------------------------- 3. score --run


def test_score_run_retranslates_a_checkpoint_copied_in_with_an_older_date(toy_model, tmp_path):
    import torch

    from mtkit.run import load_checkpoint, save_checkpoint

    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    first = _cli("score", "--run", run, "--split", "test", "-m", "bleu", "--json")
    assert first.exit_code == 0, first.output
    bleu = json.loads(first.stdout)["systems"][0]["scores"]["BLEU"]["score"]
    # Another model, saved as best.pt with a date older than the cached translation.
    state = load_checkpoint(run / "best.pt")
    gen = torch.Generator().manual_seed(0)
    state["model"] = {k: v + 0.5 * torch.randn(v.shape, generator=gen)
                      if v.is_floating_point() else v for k, v in state["model"].items()}
    (run / "best.pt").unlink()
    save_checkpoint(run / "best.pt", state)
    os.utime(run / "best.pt", (1_000_000_000, 1_000_000_000))
    again = _cli("score", "--run", run, "--split", "test", "-m", "bleu", "--json")
    assert again.exit_code == 0 and "mtkit: translated test" in again.stderr, again.stderr
    assert json.loads(again.stdout)["systems"][0]["scores"]["BLEU"]["score"] != bleu


# --------------------------------------------------------------------------- 4. validation


def test_an_empty_validation_split_is_refused_at_prep(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    recipe = _toy_recipe(tmp_path)
    text = recipe.read_text().replace(f"src: {RECIPES / 'toy'}/valid.src", f"src: {empty}")
    text = text.replace(f"tgt: {RECIPES / 'toy'}/valid.tgt", f"tgt: {empty}")
    recipe.write_text(text)
    _fails(_cli("prep", recipe, "--run-dir", tmp_path / "run"), str(empty), "data.valid.src",
           "empty")
    assert not (tmp_path / "run" / "data").exists()


def test_an_empty_training_split_is_named_as_such(tmp_path):
    """It was 'the training split is empty after cleaning', naming no file, where cleaning
    had dropped nothing."""
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    _fails(_cli("prep", _toy_recipe(tmp_path), "--run-dir", tmp_path / "run", "--set",
                f"data.train.src={empty}", "--set", f"data.train.tgt={empty}"),
           f"{empty}: the training split (data.train.src) is empty")
    assert not (tmp_path / "run" / "data").exists()


def test_a_failing_validation_saves_a_checkpoint_before_the_run_stops(tmp_path, monkeypatch):
    from mtkit.errors import DataError

    def broken(*args, **kwargs):
        raise DataError("validation references unreadable")

    monkeypatch.setattr(loop, "validate", broken)
    run = tmp_path / "run"
    _fails(_cli("train", _toy_recipe(tmp_path), "--run-dir", run, *FAST,
                "--set", "train.valid_every=3", "--set", "train.max_updates=10"),
           "validation references unreadable", "validation at update 3 failed",
           f"{run / 'checkpoint_3.pt'}", "--resume")
    assert (run / "last.pt").is_file() and (run / "checkpoint_3.pt").is_file()


# --------------------------------------------------------------------------- 5. -o is -i


def test_translate_refuses_to_write_over_its_input(toy_model, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("a b c\n")
    link = tmp_path / "link.txt"
    link.symlink_to(src)
    for out in (src, link):
        _fails(_cli("translate", toy_model, "-i", src, "-o", out), f"-o {out}",
               "is the input file")
    assert src.read_text() == "a b c\n"
    best = toy_model / "best.pt"
    before = best.read_bytes()
    _fails(_cli("translate", toy_model, "-i", src, "-o", best), "-o", "is the checkpoint of")
    _fails(_cli("translate", best, "-i", src, "-o", best), "-o", "is the checkpoint")
    assert best.read_bytes() == before
    spm = sorted((toy_model / "data").glob("*.model"))[0]
    _fails(_cli("translate", toy_model, "-i", src, "-o", spm), "-o", "is the run's data/")
    _fails(_cli("translate", best, "-i", src, "-o", toy_model / "recipe.yaml"), "-o",
           "is the run's recipe.yaml")


def test_align_refuses_to_write_over_its_inputs_or_one_output_twice(toy_model, tmp_path):
    src, tgt, gold = tmp_path / "a.en", tmp_path / "a.de", tmp_path / "gold"
    src.write_text("a b c\n")
    tgt.write_text("c b a\n")
    gold.write_text("0-2\n")
    mine = _tree(tmp_path)
    pairs = ["-s", src, "-t", tgt]
    _fails(_cli("align", toy_model, "-s", src, "--pharaoh", src), "--pharaoh", "the -s file")
    _fails(_cli("align", toy_model, *pairs, "--json", tgt), "--json", "the -t file")
    _fails(_cli("align", toy_model, *pairs, "--pharaoh", gold, "--gold", gold),
           "--pharaoh", "the --gold file")
    _fails(_cli("align", toy_model, *pairs, "--pharaoh", tmp_path / "x", "--json",
                tmp_path / "x"), "--pharaoh and --json name the same file")
    assert _tree(tmp_path) == mine
    # the run's own files, which the model is read from (only the checkpoint was refused)
    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    model = next((run / "data").glob("spm*.model"))
    kept = _tree(run)
    for flag, out, said in (("--pharaoh", model, f"the run's data/{model.name}"),
                            ("--json", run / "recipe.yaml", "the run's recipe.yaml"),
                            ("--json", run / "data" / "manifest.json",
                             "the run's data/manifest.json")):
        _fails(_cli("align", run, *pairs, flag, out), flag, said)
    _fails(_cli("align", toy_model, *pairs, "--reverse", run, "--pharaoh", model),
           "--pharaoh", f"the --reverse run's data/{model.name}")
    assert _tree(run) == kept


def test_an_output_file_goes_only_into_a_folder_that_exists(toy_model, tmp_path):
    src, tgt = tmp_path / "a.en", tmp_path / "a.de"
    src.write_text("a b c\n")
    tgt.write_text("c b a\n")
    shown = tmp_path / "a.png"  # a source file with an image's name
    shown.write_text("a b c\n")
    mine = _tree(tmp_path)
    missing, in_file = tmp_path / "typo" / "deeper", src / "x"
    _fails(_cli("translate", toy_model, "-i", src, "-o", missing / "o.de"),
           f"-o {missing / 'o.de'}: folder {missing} does not exist")
    _fails(_cli("translate", toy_model, "-i", src, "-o", in_file), "a parent of it is a file")
    _fails(_cli("translate", toy_model, "-i", src, "-o", in_file / "deeper"),
           "a parent of it is a file")  # not 'create it first', which cannot be done
    _fails(_cli("align", toy_model, "-s", src, "-t", tgt, "--pharaoh", missing / "a"),
           "--pharaoh", "does not exist")
    _fails(_cli("align", toy_model, "-s", src, "-t", tgt, "--json", missing / "a.json"),
           "--json", "does not exist")
    _fails(_cli("score", "-r", tgt, src, "--src", src, "--plot", missing / "p.png"),
           "--plot", "does not exist")
    _fails(_cli("score", "-r", tgt, src, "--src", shown, "--plot", shown), "--plot",
           "is the --src file")
    _fails(_cli("score", "-r", tgt, shown, "--src", src, "--plot", shown),
           f"--plot {shown}: is scored file 1 {shown};")
    dangling = tmp_path / "link.de"  # a link to a file in a folder that is not there
    dangling.symlink_to(missing / "o.de")
    mine = _tree(tmp_path)
    _fails(_cli("translate", toy_model, "-i", src, "-o", dangling),
           f"-o {dangling}: folder {missing} does not exist")
    assert _tree(tmp_path) == mine  # no folder made, nothing written


def test_self_attention_gives_no_links_or_aer(toy_model, tmp_path):
    src, tgt = tmp_path / "a.en", tmp_path / "a.de"
    src.write_text("a b c\n")
    tgt.write_text("c b a\n")
    for extra in (["--pharaoh", tmp_path / "links"], ["--gold", src]):
        _fails(_cli("align", toy_model, "-s", src, "-t", tgt, "--self-attention", "encoder",
                    *extra), "--self-attention", "cross-attention")
    assert not (tmp_path / "links").exists()
    done = _cli("align", toy_model, "-s", src, "-t", tgt, "--self-attention", "decoder",
                "--json", tmp_path / "m.json")
    assert done.exit_code == 0, done.output
    doc = json.loads((tmp_path / "m.json").read_text())
    # the matrices, named by their axes, and no links (it wrote links, method and threshold)
    (rec,) = doc["sentences"]
    assert rec["axes"] == ["key", "query"] and "links" not in rec
    assert rec["src_tokens"] == rec["tgt_tokens"] and "method" not in doc["settings"]
    _fails(_cli("align", toy_model, "-s", src, "-t", tgt, "--self-attention", "decoder",
                "--json", tmp_path / "m2.json", "--align-method", "threshold", "--threshold",
                "0.2"), "--align-method and --threshold make source-target links")


def _earlier_checkpoint(run: Path, out: Path | None = None) -> Path:
    """A stand-in for an earlier checkpoint of the toy run (it keeps one, best = last):
    best.pt's weights saved as update 399 (into `out`, else the run's checkpoint_399.pt),
    since average refuses one checkpoint twice."""
    from mtkit.run import load_checkpoint, save_checkpoint

    state = load_checkpoint(run / "best.pt")
    return save_checkpoint(out or run / "checkpoint_399.pt", {
        **state, "progress": {**state["progress"], "update": 399}})


def test_average_writes_only_a_new_file_or_over_a_checkpoint_beside_data(toy_model, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    text = run / "notes.txt"
    text.write_text("mine\n")
    pair = [run / "best.pt", _earlier_checkpoint(run)]
    _fails(_cli("average", *pair, "-o", text), "--output", "not a checkpoint")
    assert text.read_text() == "mine\n"
    with zipfile.ZipFile(run / "notes.zip", "w") as z:  # a zip, not a checkpoint
        z.writestr("a.txt", "mine")
    _fails(_cli("average", *pair, "-o", run / "notes.zip"), "--output", "not a checkpoint")
    assert zipfile.ZipFile(run / "notes.zip").namelist() == ["a.txt"]
    os.mkfifo(run / "pipe")  # not opened (it would block)
    _fails(_cli("average", *pair, "-o", run / "pipe"), "--output", "not a checkpoint")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for p in pair:
        shutil.copy(p, elsewhere / p.name)
    _fails(_cli("average", *(elsewhere / p.name for p in pair)), "where the average goes "
           "without --output", "no data/ folder")
    _fails(_cli("average", *pair, "-o", tmp_path / "avg.pt"), "--output", "no data/ folder")
    assert not (tmp_path / "avg.pt").exists()
    done = _cli("average", *pair, "-o", run / "avg.pt")
    assert done.exit_code == 0, done.output
    again = _cli("average", *pair, "-o", run / "avg.pt")  # a checkpoint may be replaced
    assert again.exit_code == 0, again.output


def test_average_of_a_run_in_training_names_the_trainer(toy_model, tmp_path):
    """Training prunes its numbered checkpoints: averaging its run meanwhile failed on a file
    gone ('checkpoint not found') or half written ('not a readable checkpoint')."""
    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    (run / ".mtkit.lock").unlink(missing_ok=True)
    assert _cli("average", run / "best.pt", _earlier_checkpoint(run), "-o", run / "a.pt"
                ).exit_code == 0
    assert not (run / ".mtkit.lock").exists()  # a folder never trained in: nothing made
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(run)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        _fails(_cli("average", run), f"{run}: in use by mtkit train (pid {holder.pid}")
        # checkpoints named one by one, in a run being trained, too
        _fails(_cli("average", run / "best.pt", run / "last.pt", "-o", run / "b.pt"),
               f"{run}: in use by mtkit train")
    finally:
        holder.kill()
        holder.wait()
    assert not (run / "averaged.pt").exists()


_READ = """
import sys, time
from mtkit.process.lock import run_read_lock
with run_read_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


def test_a_writer_refused_while_average_reads_names_the_average(toy_model, tmp_path):
    """The lock file's record names its last writer, long gone when only a reader (average)
    holds the lock: a train started meanwhile named that dead trainer's pid."""
    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    (run / ".mtkit.lock").write_text('{"command": "train", "pid": 99999999, "host": "h", '
                                     '"started": "2026-01-01 00:00:00"}')
    reader = subprocess.Popen([sys.executable, "-c", _READ, str(run)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert reader.stdout.readline().strip() == "held"
        err = _fails(_cli("train", RECIPES / "toy.yaml", "--run-dir", run, "--resume"),
                     f"{run}: in use by mtkit average")
        assert "99999999" not in err
    finally:
        reader.kill()
        reader.wait()


def test_average_refuses_one_checkpoint_twice_in_a_copied_run(toy_model, tmp_path):
    """In a run copied by `cp -r` (or scp), best.pt and the checkpoint_N.pt it linked to are
    two files: averaged as two checkpoints, that one counted twice, said 'averaged 3'."""
    run = tmp_path / "run"
    shutil.copytree(toy_model, run)  # copies: no links kept
    twin = run / "checkpoint_400.pt"
    assert not (run / "best.pt").samefile(twin)
    _fails(_cli("average", run / "best.pt", twin, "-o", run / "a.pt"),
           f"{twin}: the same checkpoint as {run / 'best.pt'} (saved at update 400 of one run)")
    assert not (run / "a.pt").exists()


def test_average_refuses_checkpoints_whose_weights_mean_other_things(toy_model, tmp_path):
    """relu and gelu weights of the same shapes, other sentencepiece models of the same sizes,
    a tokenizer beside -o that is not theirs, one file under two names (best.pt is a link to
    a checkpoint_N.pt), and -o over last.pt (then `train --resume` was a KeyError traceback):
    each was averaged without a word."""
    from mtkit.run import load_checkpoint, save_checkpoint

    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    best = run / "best.pt"
    state = load_checkpoint(best)
    assert "activation: relu" in state["recipe"]
    save_checkpoint(run / "gelu.pt", {**state, "recipe": state["recipe"].replace(
        "activation: relu", "activation: gelu")})
    def saved_at(update: int) -> dict:  # another checkpoint of the run (not best's twin)
        return {"progress": {**state["progress"], "update": update}}

    save_checkpoint(run / "drop.pt", {**state, "recipe": state["recipe"].replace(
        "act_dropout: 0.0", "act_dropout: 0.3"), **saved_at(398)})  # dropout: same meaning
    assert "seed: 1\n" in state["recipe"]
    save_checkpoint(run / "seed.pt", {**state, "recipe": state["recipe"].replace(
        "seed: 1\n", "seed: 7\n", 1)})  # another run: two such averaged to BLEU 0
    other = {**state["vocab"], "sha256": "0" * 64}
    save_checkpoint(run / "vocab.pt", {**state, "vocab": other})
    save_checkpoint(run / "vocab2.pt", {**state, "vocab": other, **saved_at(397)})
    os.link(best, run / "again.pt")
    _fails(_cli("average", best, run / "gelu.pt", "-o", run / "a.pt"), "gelu.pt",
           "model.transformer.activation differs")
    _fails(_cli("average", best, run / "vocab.pt", "-o", run / "a.pt"), "vocab.pt",
           "other sentencepiece models")
    _fails(_cli("average", best, run / "seed.pt", "-o", run / "a.pt"), "seed.pt: its run "
           f"started from train.seed 7, {best}'s from 1", "average checkpoints of one run")
    _fails(_cli("average", run / "vocab.pt", run / "vocab2.pt", "-o", run / "a.pt"),
           "the data/ folder beside the output holds other sentencepiece models")
    _fails(_cli("average", best, run / "again.pt", "-o", run / "a.pt"), "again.pt",
           "the same file")
    for name in ("last.pt", "best.pt"):
        _fails(_cli("average", run / "gelu.pt", run / "drop.pt", "-o", run / name), name,
               "which an average is not")
    # a numbered name: `average --last` then averaged the average with real checkpoints
    _fails(_cli("average", run / "gelu.pt", run / "drop.pt", "-o", run / "checkpoint_9.pt"),
           "checkpoint_9.pt", "the name of the run's numbered checkpoints")
    old = {k: v for k, v in state["vocab"].items() if k != "sha256"}  # before sha256 was kept
    save_checkpoint(run / "old.pt", {**state, "vocab": old, **saved_at(396)})
    assert not (run / "a.pt").exists()
    assert _cli("average", best, run / "drop.pt", run / "old.pt", "-o",
                run / "a.pt").exit_code == 0
    shutil.copy(run / "a.pt", run / "last.pt")  # as `average -o last.pt` used to write
    _fails(_cli("train", run / "recipe.yaml", "--run-dir", run, "--resume"), "last.pt",
           "holds a model only")


# --------------------------------------------------------------------------- 6. write failures


def test_outputs_that_name_folders_or_paths_under_files(toy_model, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("a b c\n")
    a_file = tmp_path / "file.txt"
    a_file.write_text("mine\n")
    _fails(_cli("translate", toy_model, "-i", src, "-o", tmp_path), str(tmp_path), "is a folder")
    _fails(_cli("translate", toy_model, "-i", src, "-o", a_file / "out.txt"),
           str(a_file / "out.txt"), "a parent of it is a file")
    _fails(_cli("align", toy_model, "-s", src, "--heatmap", a_file), "file.txt",
           "exists and is not a folder")
    _fails(_cli("align", toy_model, "-s", src, "--heatmap", a_file / "maps"), "file.txt",
           "is a file, not a folder")
    # said before the checkpoints are read (the copy would be refused as best.pt's twin)
    other = shutil.copy(toy_model / "best.pt", tmp_path / "other.pt")
    _fails(_cli("average", toy_model / "best.pt", other, "-o", tmp_path),
           str(tmp_path), "is a folder")
    assert a_file.read_text() == "mine\n"


def test_a_mirror_folder_that_is_not_there_is_said_before_any_download(tmp_path):
    for command in ("prep", "train"):
        _fails(_cli(command, _toy_recipe(tmp_path), "--run-dir", tmp_path / "run", "--mirror",
                    tmp_path / "nowhere"), "--mirror", "nowhere: no such folder")
    assert not (tmp_path / "run").exists()


def test_a_folder_where_a_file_is_read_is_named_a_folder(toy_model, tmp_path):
    _fails(_cli("translate", toy_model, "-i", tmp_path), str(tmp_path), "is a folder")
    _fails(_cli("prep", tmp_path, "--run-dir", tmp_path / "run"), "is a folder",
           "recipe file")
    recipe = tmp_path / "bad.yml"
    (tmp_path / "train.src").mkdir()
    recipe.write_text(_toy_recipe(tmp_path).read_text().replace(
        str(RECIPES / "toy" / "train.src"), str(tmp_path / "train.src"), 1))
    _fails(_cli("prep", recipe, "--run-dir", tmp_path / "run"), "is a folder",
           "data.train.src")


def test_a_damaged_sentencepiece_model_is_named(toy_model, tmp_path, capfd):
    """A damaged model file was a traceback from sentencepiece's parser ('INTERNAL:
    src/sentencepiece_processor.cc(109) [model_proto->ParseFromArray...]')."""
    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    model = next((run / "data").glob("spm*.model"))
    src = tmp_path / "in.txt"
    src.write_text("a b\n")
    for damage in (b"garbage\n", b""):  # an empty file parses: a model of no pieces
        model.write_bytes(damage)
        for args in (["translate", run, "-i", src], ["align", run, "-s", src, "--print"],
                     ["score", "--run", run, "--split", "test"],
                     ["export", run, "-o", tmp_path / "ex"]):
            _fails(_cli(*args), str(model), "not a sentencepiece model",
                   "run `mtkit prep --force`")
            assert "Model is not initialized" not in capfd.readouterr().err  # its own log


def test_a_damaged_array_of_prep_names_the_remedy_not_pickle(toy_model, tmp_path):
    """Zeros over an offsets file (same size, so prep finds the data up to date): numpy's
    message said to load it with allow_pickle, i.e. to run code from a damaged file."""
    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    offsets = run / "data" / "train.src.offsets.npy"
    offsets.write_bytes(bytes(offsets.stat().st_size))
    err = _fails(_cli("train", RECIPES / "toy.yaml", "--run-dir", run, "--resume"),
                 str(offsets), "not a valid .npy file", "run `mtkit prep --force`")
    assert "pickle" not in err


@pytest.mark.parametrize("compress", [False, True])
def test_inputs_read_from_pipes(toy_model, tmp_path, compress):
    """`-i <(zcat f)` and `-s <(...)` were refused as 'input file not found' (only regular
    files passed), and reading a pipe twice (peek at the gzip magic, then open it again)
    would have lost its first bytes; a pipe that has delivered one byte is waited for."""
    text = b"a b c\nd e\n"
    want = _cli("translate", toy_model, "--greedy", input=text.decode()).stdout

    def piped(data: bytes) -> Path:
        fifo = tmp_path / f"fifo{len(list(tmp_path.iterdir()))}"
        os.mkfifo(fifo)

        def write() -> None:  # one byte first, as a slow producer may: gzip's magic is two
            out = gzip.compress(data) if compress else data
            with open(fifo, "wb", buffering=0) as f:
                f.write(out[:1])
                time.sleep(0.3)
                f.write(out[1:])

        threading.Thread(target=write, daemon=True).start()
        return fifo

    got = _cli("translate", toy_model, "--greedy", "-i", piped(text))
    assert got.exit_code == 0 and got.stdout == want, got.output
    (tmp_path / "t.txt").write_text("a b\nd\n")
    links = _cli("align", toy_model, "-s", piped(text), "-t", tmp_path / "t.txt", "--pharaoh",
                 "-")
    assert links.exit_code == 0 and len(links.stdout.splitlines()) == 2, links.output


def test_disk_full_while_training_names_the_last_complete_checkpoint(toy_run, tmp_path):
    with _tmpfs(tmp_path / "small", "3m") as disk:
        run = disk / "run"
        shutil.copytree(toy_run, run)  # ~0.2 MB of data; each checkpoint is ~2.1 MB
        err = _fails(_cli("train", _toy_recipe(tmp_path), "--run-dir", run, *FAST,
                          "--set", "train.valid_every=2", "--set", "train.keep_last=2",
                          "--set", "train.max_updates=8"),
                     "cannot write (No space left on device)", "last complete checkpoint is",
                     "checkpoint_2.pt")
        assert str(run) in err
        assert not list(run.glob(".*.tmp"))  # no half-written file left behind


def test_disk_full_during_prep_is_one_line(tmp_path):
    with _tmpfs(tmp_path / "tiny", "48k") as disk:
        _fails(_cli("prep", _toy_recipe(tmp_path), "--run-dir", disk / "run"),
               str(disk / "run"), "No space left on device")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_full_or_closed_standard_output_is_one_line(toy_model, tmp_path):
    """A write to /dev/full (-o or `>`) and a closed stdout (`>&-`) were tracebacks, exit 1."""
    src = tmp_path / "in.txt"
    src.write_text("sa gu\nmir pel\n")
    _fails(_cli("translate", toy_model, "-i", src, "-o", "/dev/full"), "/dev/full",
           "cannot write (No space left on device)")
    base = [sys.executable, "-m", "mtkit", "translate", str(toy_model), "-i", str(src)]
    with open("/dev/full", "w") as full:
        done = subprocess.run(base, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr == (
        "mtkit: error: standard output: cannot write (No space left on device)\n")
    done = subprocess.run(base, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=120, preexec_fn=lambda: os.close(1))
    assert done.returncode == 2 and done.stderr == (
        "mtkit: error: standard output is closed; give -o FILE or redirect it\n")
    out = tmp_path / "out.txt"  # with -o a closed stdout is no matter, and no file gets fd 1
    done = subprocess.run([*base, "-o", str(out)], stdout=subprocess.DEVNULL, text=True,
                          stderr=subprocess.PIPE, timeout=120, preexec_fn=lambda: os.close(1))
    assert done.returncode == 0, done.stderr
    assert len(out.read_text().splitlines()) == 2


def _signal_once_writing(proc: subprocess.Popen, folder: Path, files: int,
                         sig: signal.Signals) -> str:
    """Send `sig` to `proc` (started with -X faulthandler) once its output's temporary has
    made `folder` hold `files` entries; its standard error once it has ended. Still alive 60 s
    later, it is made to print every thread's stack (SIGABRT), and the test fails with them."""
    try:
        deadline = time.monotonic() + 60
        while len(list(folder.iterdir())) < files and proc.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(sig)
        try:
            return proc.communicate(timeout=60)[1]
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            pytest.fail(f"alive 60 s after {sig.name}:\n{proc.communicate(timeout=30)[1]}")
    finally:
        proc.kill()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_terminated_command_leaves_no_temporary(toy_model, tmp_path, sig):
    """SIGTERM and SIGHUP killed translate outright: no message, and `.out.txt.XXXX.tmp`
    left beside the output."""
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("sa pel gu mir nel lop ke wi\n" * 20000)
    out.write_text("precious\n")
    proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-m", "mtkit", "translate",
                             str(toy_model), "-i", str(src), "-o", str(out), "--beam", "5"],
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals)
    err = _signal_once_writing(proc, tmp_path, 3, sig)
    assert proc.returncode == 128 + sig, err
    assert err.endswith(f"mtkit: terminated ({sig.name})\n"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.txt"]
    assert out.read_text() == "precious\n"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_thread_that_never_ends_does_not_keep_a_stopped_command_alive(toy_model, tmp_path,
                                                                        sig):
    """A `translate` sent SIGTERM once said "terminated" and was still alive 60 s later: the
    interpreter's exit waits for every thread that is not a daemon (a thread pool's workers
    among them), and one could not end. Here a thread never ends: the stopped command still
    exits at once, with its code, its message and its clean-up."""
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("sa pel gu mir nel lop ke wi\n" * 20000)
    code = ("import sys, threading\n"
            "threading.Thread(target=threading.Event().wait, name='stuck').start()\n"
            f"sys.argv = ['mtkit', 'translate', {str(toy_model)!r}, '-i', {str(src)!r}, '-o',"
            f" {str(out)!r}, '--beam', '5']\n"
            "from mtkit.cli import main\n"
            "main()\n")
    proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-c", code],
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals)
    err = _signal_once_writing(proc, tmp_path, 2, sig)
    assert proc.returncode == 128 + sig, err
    said = "mtkit: interrupted" if sig == signal.SIGINT else f"mtkit: terminated ({sig.name})"
    assert err.endswith(said + "\n"), err
    assert [p.name for p in tmp_path.iterdir()] == ["in.txt"]


def test_read_only_run_folder(toy_model, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("a b c\n")
    with _tmpfs(tmp_path / "ro", "16m") as disk:
        run = disk / "run"
        shutil.copytree(toy_model, run)
        earlier = _earlier_checkpoint(run)
        _read_only(disk)
        before = _tree(run)
        recipe = _toy_recipe(tmp_path)
        _fails(_cli("train", recipe, "--run-dir", run, "--resume", *FAST), str(run),
               "Read-only file system")
        _fails(_cli("prep", recipe, "--run-dir", run, "--force"), str(run),
               "Read-only file system")
        _fails(_cli("score", "--run", run, "--split", "test"), str(run / "translations"),
               "Read-only file system")
        _fails(_cli("average", run / "best.pt", earlier), str(run / "averaged.pt"),
               "Read-only file system")
        _fails(_cli("translate", run, "-i", src, "-o", run / "out.txt"), str(run / "out.txt"),
               "Read-only file system")
        assert _tree(run) == before


# --------------------------------------------------------------------------- 7, 8. recipes


@pytest.mark.parametrize(("text", "words"), [
    ("", ["data.train: missing"]),
    ("name: x\n", ["data.train: missing", "data.valid: missing"]),
    ("name: x\nmodel: {arch: rnn}\n", ["data.train: missing"]),
    ("name: x\ndata:\n  train: {src: a.txt}\n  valid: {src: a.txt, tgt: b.txt}\n",
     ["data.train.tgt: missing"]),
    ("name: x\ndata:\n  spm:\n    vocab_size: 500\n    vocab_size: 400\n",
     ["line 5 not valid YAML (key 'vocab_size' is given twice in one mapping)"]),
])
def test_recipe_mistakes_are_reported_by_the_config(tmp_path, text, words):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(text)
    result = _cli("prep", recipe, "--run-dir", tmp_path / "run")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "AssertionError" not in result.stderr and result.stderr.startswith("mtkit: error:")
    for word in words:
        assert f"{recipe}: {word}" in result.stderr
    assert not (tmp_path / "run").exists()


def test_every_recipe_problem_is_reported_in_one_run(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: ..\ndata:\n  train: {src: a, tgt: b}\n  valid: {src: a, tgt: b}\n"
                      "  spm: {joint: false}\nmodel:\n  transformer: {heads: 3, dropout: 2}\n"
                      "train: {device: gpu, lr: -1}\n")
    result = _cli("prep", recipe)
    assert result.exit_code == 2
    for key in ("name", "model.transformer.dropout", "model.transformer.heads", "train.lr",
                "train.device", "model.transformer.share_embeddings"):
        assert f"{recipe}: {key}: " in result.stderr, (key, result.stderr)
    assert result.stderr.startswith("mtkit: error: 6 problems in recipe:")


# --------------------------------------------------------------------------- 9 - 15


def test_a_trainer_removes_checkpoint_temporaries_left_by_kill_9(toy_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(toy_run, run)
    stale = [run / ".checkpoint_200.pt.k2j4h_x9.tmp", run / ".last.pt.link.tmp"]
    for p in stale:
        p.write_bytes(b"half a checkpoint")
    mine = [run / ".my-notes.tmp", run / ".best.pt.my-copy.tmp", run / ".averaged.pt.old.tmp"]
    for p in mine:  # a user's, named like a checkpoint's temporary but not mkstemp's
        p.write_text("not mtkit's\n")
    ok = _cli("train", _toy_recipe(tmp_path), "--run-dir", run, *FAST,
              "--set", "train.max_updates=2")
    assert ok.exit_code == 0, ok.output
    assert not any(p.exists() for p in stale)
    assert all(p.read_text() == "not mtkit's\n" for p in mine)


def test_invalid_utf8_gets_the_same_warning_from_every_command(toy_model, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"a b c\nd \xff e\nf g\n")
    warning = (f"mtkit: warning: {bad}: invalid UTF-8 on 1 line (first: line 2), replaced "
               "with U+FFFD")
    translated = _cli("translate", toy_model, "-i", bad, "--greedy")
    aligned = _cli("align", toy_model, "-s", bad, "-t", bad, "--pharaoh", tmp_path / "a.txt")
    scored = _cli("score", "-r", bad, bad)
    for result in (translated, aligned, scored):
        assert result.exit_code == 0, result.output
        assert warning in result.stderr.splitlines(), result.stderr
    assert len(translated.stdout.splitlines()) == 3


def test_bf16_on_a_cpu_says_it_trains_in_fp32(toy_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(toy_run, run)
    ok = _cli("train", _toy_recipe(tmp_path), "--run-dir", run, *FAST,
              "--set", "train.max_updates=2", "--set", "train.precision=bf16")
    assert ok.exit_code == 0, ok.output
    note = "train.precision bf16 applies to CUDA only: on cpu this run trains in fp32"
    assert note in (run / "train.log").read_text() and note in ok.stderr


def test_the_last_line_of_training_says_how_long_and_where_the_best_model_is(toy_run,
                                                                             tmp_path):
    run = tmp_path / "run"
    shutil.copytree(toy_run, run)
    ok = _cli("train", _toy_recipe(tmp_path), "--run-dir", run, *FAST,
              "--set", "train.max_updates=4", "--set", "train.valid_every=2")
    assert ok.exit_code == 0, ok.output
    assert "toy: training a Transformer model, " in ok.stderr  # "an RNN model" for an rnn
    last = ok.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"stopped \(max_updates\) at update 4, epoch 1, after 0:00:\d\d of training; "
        rf"best bleu \d+\.\d\d at update [24] \({re.escape(str(run / 'best.pt'))}\); "
        rf"checkpoints in {re.escape(str(run))}", last), last


def test_a_nonfinite_abort_without_a_checkpoint_gives_advice_that_works(tmp_path, monkeypatch):
    from mtkit.train import step
    from mtkit.train.loss import LossSums

    real = step.label_smoothed_nll

    def nan(logits, target, **kw):
        sums = real(logits, target, **kw)
        return LossSums(sums.loss * float("inf"), sums.nll)

    monkeypatch.setattr(step, "label_smoothed_nll", nan)
    err = _fails(_cli("train", _toy_recipe(tmp_path), "--run-dir", tmp_path / "run", *FAST,
                      "--set", "train.max_nonfinite=2"),
                 "2 non-finite losses in a row", "no checkpoint was written",
                 "train again")
    assert "--resume" not in err


def test_no_downloaded_line_for_a_file_that_fails_its_checksum(tmp_path, monkeypatch):
    monkeypatch.setenv("MTKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MTKIT_DATA_MIRROR", raising=False)
    remote = tmp_path / "remote.src"
    remote.write_text("a b\n")
    recipe = _toy_recipe(tmp_path)
    text = recipe.read_text().replace(
        f"src: {RECIPES / 'toy'}/train.src",
        f"src: {{url: {remote.as_uri()}, sha256: {'f' * 64}}}")
    recipe.write_text(text)
    result = _cli("prep", recipe, "--run-dir", tmp_path / "run")
    _fails(result, "checksum mismatch")
    assert "downloaded remote.src" not in result.stderr


def test_jsonl_nbest_entries_carry_their_alignments(toy_model, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text((RECIPES / "toy" / "test.src").read_text().splitlines()[0] + "\n")
    result = _cli("translate", toy_model, "-i", src, "--format", "jsonl", "--nbest", "3",
                  "--align")
    assert result.exit_code == 0, result.output
    rec = json.loads(result.stdout)
    assert len(rec["nbest"]) == 3 and all("alignment" in h for h in rec["nbest"])
    assert rec["nbest"][0]["alignment"] == rec["alignment"]


def test_min_len_beyond_the_length_limit_is_refused(toy_model, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("a b\n")
    _fails(_cli("translate", toy_model, "-i", src, "--min-len", "50", "--max-len-b", "5"),
           "--min-len", "output limit")


def test_fault_helpers_can_fail(tmp_path):
    """The helpers above must notice a changed file and a multi-line error."""
    f = tmp_path / "x"
    f.write_text("a")
    before = _tree(tmp_path)
    f.write_text("b")
    assert _tree(tmp_path) != before
    with pytest.raises(AssertionError):
        _fails(_cli("prep", tmp_path / "r.yaml"), "no such words here")


def test_a_run_whose_data_was_deleted_is_still_mtkit_s(toy_model, tmp_path):
    """An older run (its recipe.yaml without mtkit's header line) that lost its data/ is still
    recognised by its checkpoints, and prep rebuilds the data; a fake best.pt is not."""
    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    shutil.rmtree(run / "data")
    (run / "recipe.yaml").write_text("name: toy\n")
    assert _cli("prep", _toy_recipe(tmp_path), "--run-dir", run).exit_code == 0
    assert (run / "data" / "manifest.json").is_file()
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "best.pt").write_bytes(b"not a checkpoint")
    _fails(_cli("prep", _toy_recipe(tmp_path), "--run-dir", fake), "not empty", "best.pt")
    assert (fake / "best.pt").read_bytes() == b"not a checkpoint"
