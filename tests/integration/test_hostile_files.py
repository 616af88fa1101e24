"""Files mtkit did not write stay untouched, and hostile or unbounded inputs cost little:
a data/ without its manifest, YAML alias bombs, checkpoints whose weights do not fit their
recipe, an export given to average, over-long align pairs, leftovers of killed commands, NUL
bytes in a corpus. Each through the CLI, as a user runs it."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from mtkit.config import load_recipe
from tests.helpers import RECIPES, run_cli

pytestmark = pytest.mark.usefixtures("one_thread")

TOY = RECIPES / "toy.yaml"


def _one_line(res, *needles: str) -> None:
    assert res.exit_code == 2, res.output
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.output, res.output
    for n in needles:
        assert n in res.stderr, res.stderr


@pytest.mark.parametrize("manifest", [None, "garbage", '{"format": 3}'])
def test_prep_keeps_a_users_file_when_the_manifest_is_lost(toy_run, tmp_path, manifest):
    run = tmp_path / "run"
    shutil.copytree(toy_run, run)
    (run / "data" / "manifest.json").unlink()
    if manifest is not None:
        (run / "data" / "manifest.json").write_text(manifest)
    (run / "data" / "notes.txt").write_text("mine\n")
    _one_line(run_cli("prep", TOY, "--run-dir", run), "notes.txt", "did not write")
    assert (run / "data" / "notes.txt").read_text() == "mine\n"
    (run / "data" / "notes.txt").unlink()  # prep's own names alone: prepared again
    assert run_cli("prep", TOY, "--run-dir", run).exit_code == 0


def _bomb(levels: int, key: str = "name") -> str:
    """A "billion laughs" recipe: each level aliases the one above nine times."""
    lines = ["l0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"l{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + f"\n{key}: *a{levels - 1}\n"


@pytest.mark.parametrize("key", ["name", "train"])
def test_alias_bombs_are_refused_fast_small_and_briefly(tmp_path, key):
    import time
    import tracemalloc

    from mtkit.config import load_recipe, recipe_from_yaml_text
    from mtkit.errors import ConfigError

    path = tmp_path / "bomb.yaml"
    for levels in (9, 7, 4):  # 387M, 4.8M and 6,561 leaves
        path.write_text(_bomb(levels, key))
        for load in (lambda: load_recipe(path),  # a recipe file; a checkpoint's or an export's
                     lambda: recipe_from_yaml_text(path.read_text(), source="ckpt")):
            tracemalloc.start()
            start = time.thread_time()  # CPU time: other jobs on the cores do not count
            with pytest.raises(ConfigError) as e:
                load()
            took, peak = time.thread_time() - start, tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            assert took < 1.0 and peak < 100e6, (levels, took, peak)
            assert len(str(e.value)) < 500, str(e.value)
    path.write_text(_bomb(9))
    _one_line(run_cli("prep", path, "--run-dir", tmp_path / "run"), "alias bomb")
    # in a process whose address space is capped at 200 MB (the bomb took 6 GB)
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (200 << 20,) * 2)\n"
            "from mtkit.config import load_recipe\nfrom mtkit.errors import ConfigError\n"
            "try:\n    load_recipe(sys.argv[1])\nexcept ConfigError as e:\n    print(e)")
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and "alias bomb" in proc.stdout, proc.stderr[-500:]


def test_an_exports_or_checkpoints_alias_bomb_is_one_line(toy_model, tmp_path):
    import torch

    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    state = torch.load(run / "last.pt", weights_only=True)
    state["recipe"] = _bomb(9)
    torch.save(state, run / "bomb.pt")
    src = run / "data" / "test.src.txt"
    _one_line(run_cli("translate", run / "bomb.pt", "-i", src), "alias bomb")
    pytest.importorskip("ctranslate2")
    export = tmp_path / "export"
    assert run_cli("export", run, "-o", export).exit_code == 0
    (export / "recipe.yaml").write_text(_bomb(9))
    _one_line(run_cli("translate", export, "-i", src), "alias bomb")


def test_resume_of_weights_that_do_not_fit_their_recipe_is_one_line(toy_model, tmp_path):
    import torch

    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    state = torch.load(run / "last.pt", weights_only=True)
    name = next(iter(state["model"]))
    state["model"][name] = torch.zeros(3, 5)  # another model's weight
    torch.save(state, run / "last.pt")
    message = "weights do not fit the model its recipe describes"
    res = run_cli("train", TOY, "--run-dir", run, "--resume", "--set", "train.max_time=null",
                  "--set", "train.valid_every=400")
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert res.stderr.splitlines()[-1].startswith("mtkit: error: ") and message in res.stderr
    assert f"size mismatch for {name}" in res.stderr
    _one_line(run_cli("translate", run / "last.pt", "-i", run / "data" / "test.src.txt"),
              message)


def test_average_of_an_export_says_it_is_one(toy_model, tmp_path):
    pytest.importorskip("ctranslate2")
    export = tmp_path / "export"
    assert run_cli("export", toy_model, "-o", export).exit_code == 0
    _one_line(run_cli("average", export, "-o", tmp_path / "avg.pt"),
              "an exported model (CTranslate2), not a run directory")


def test_align_refuses_a_pair_past_the_models_length(toy_model, tmp_path):
    """A 20,000-word pair took 563 s and 17.6 GB: forced alignment and translate-then-align
    refuse a line of more than data.max_len tokens (32 for the toy), naming it."""
    src = tmp_path / "long.src"
    src.write_text("sa gu\n" + " ".join(["sa"] * 20_000) + "\n")
    for args in (["-t", src], []):
        _one_line(run_cli("align", toy_model, "-s", src, *args, "--pharaoh", tmp_path / "p"),
                  f"-s {src}:2: 20000 tokens, more than the model's data.max_len (32)")
    assert not (tmp_path / "p").exists()


def test_leftovers_of_killed_commands_are_removed_by_the_next(toy_model, tmp_path):
    """kill -9 left `score --run`'s temporary translation and an export's half-built folder,
    and the next run of the same command kept them; a live writer's (locked) are kept."""
    import fcntl
    import os

    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    assert run_cli("score", "--run", run, "--split", "test").exit_code == 0
    translations = run / "translations"
    done = sorted(p.name for p in translations.iterdir())
    stale = [translations / f".{done[0]}.abc123_x.tmp", translations / f".{done[1]}.q1w2e3r4.tmp"]
    for p in stale:
        p.write_text("half")
    live = translations / f".{done[0]}.livewrit.tmp"
    live.write_text("being written")
    fd = os.open(live, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    mine = translations / f".{done[0]}.mine.tmp"  # not a name mtkit makes
    mine.write_text("mine")
    for p in translations.iterdir():  # the cached translation is stale: written again
        if p.suffix == ".key":
            p.write_text("{}")
    assert run_cli("score", "--run", run, "--split", "test").exit_code == 0
    assert not any(p.exists() for p in stale) and live.exists() and mine.exists()
    os.close(fd)
    pytest.importorskip("ctranslate2")
    half = tmp_path / ".export.k3j4h5g6.tmp"
    half.mkdir()
    (half / "model.bin").write_bytes(b"x" * 1000)
    assert run_cli("export", run, "-o", tmp_path / "export").exit_code == 0
    assert not half.exists() and (tmp_path / "export" / "model.bin").is_file()


def test_nul_bytes_in_a_corpus_are_counted_and_said(tmp_path):
    """NUL bytes became <unk> pieces silently: prep warns once per file, as for invalid
    UTF-8, and the manifest keeps the count."""
    import json

    data = tmp_path / "toy"
    shutil.copytree(RECIPES / "toy", data)
    shutil.copy(TOY, tmp_path / "toy.yaml")
    lines = (data / "train.src").read_bytes().split(b"\n")
    lines[4] = lines[4].replace(b" ", b"\0 ", 1)
    lines[9] = b"\0" + lines[9]
    (data / "train.src").write_bytes(b"\n".join(lines))
    res = run_cli("prep", tmp_path / "toy.yaml", "--run-dir", tmp_path / "run")
    assert res.exit_code == 0, res.output
    assert "train.src: NUL bytes on 2 lines (first: line 5), read as unknown pieces" in (
        res.stdout + res.stderr)
    man = json.loads((tmp_path / "run" / "data" / "manifest.json").read_text())
    assert [f["nul_lines"] for f in man["invalid_utf8"]] == [2]


DEEP = "[" * 1000 + "]" * 1000  # 2 KB, nested 1,000 levels deep


def test_a_deeply_nested_value_is_one_line_on_every_path(toy_model, tmp_path):
    """A value nested 1,000 brackets deep was a RecursionError traceback: in a recipe, a --set,
    a checkpoint's recipe (translate, --init-from, mtkit.load) and an export's recipe.yaml."""
    import torch

    import mtkit
    from mtkit.errors import ConfigError, MtkitError

    recipe = tmp_path / "deep.yaml"
    recipe.write_text(TOY.read_text().replace("betas: [0.9, 0.98]", f"betas: {DEEP}"))
    _one_line(run_cli("prep", recipe, "--run-dir", tmp_path / "r1"), "nested more than")
    _one_line(run_cli("prep", TOY, "--run-dir", tmp_path / "r2", "--set", f"train.betas={DEEP}"),
              "--set train.betas=", "nested more than")
    assert not (tmp_path / "r1").exists() and not (tmp_path / "r2").exists()
    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    state = torch.load(run / "last.pt", weights_only=True)
    state["recipe"] = state["recipe"].replace("  seed: 1\n", f"  seed: {DEEP}\n", 1)
    assert DEEP in state["recipe"]
    torch.save(state, run / "deep.pt")
    src = run / "data" / "test.src.txt"
    _one_line(run_cli("translate", run / "deep.pt", "-i", src), "deep.pt (its recipe)",
              "nested more than")
    _one_line(run_cli("train", TOY, "--run-dir", tmp_path / "child", "--init-from",
                      run / "deep.pt", "--set", "train.max_time=null"), "nested more than")
    with pytest.raises(ConfigError, match="nested more than") as e:
        mtkit.load(run / "deep.pt", device="cpu")
    assert "\n" not in str(e.value)
    pytest.importorskip("ctranslate2")
    export = tmp_path / "export"
    assert run_cli("export", toy_model, "-o", export).exit_code == 0
    text = (export / "recipe.yaml").read_text()
    (export / "recipe.yaml").write_text(text.replace("  seed: 1\n", f"  seed: {DEEP}\n", 1))
    _one_line(run_cli("translate", export, "-i", src), "recipe.yaml", "nested more than")
    with pytest.raises(MtkitError, match=r"recipe.yaml: line \d+ refused \(nested more than 50"):
        mtkit.load(export, device="cpu")


def test_init_from_another_architectures_weights_is_one_line(toy_model, tmp_path):
    """An RNN's weights under a Transformer recipe (a checkpoint put together by hand) was an
    AssertionError with a 3 KB list of keys; --resume said it in one line."""
    import torch

    from mtkit.models.build import build_model

    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    state = torch.load(run / "last.pt", weights_only=True)
    vocab = next(v.shape[0] for k, v in state["model"].items() if "embed" in k)
    rnn = load_recipe(TOY, ["model.arch=rnn"]).model
    state["model"] = build_model(rnn, vocab, vocab).state_dict()
    torch.save(state, run / "rnn.pt")
    res = run_cli("train", TOY, "--run-dir", tmp_path / "child", "--init-from", run / "rnn.pt",
                  "--set", "train.max_time=null", "--set", "train.max_updates=1")
    _one_line(res, "rnn.pt: weights do not fit the model its recipe describes")
    assert len(res.stderr) < 400, res.stderr
    assert not (tmp_path / "child").exists()  # refused before prep wrote anything
