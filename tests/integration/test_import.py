"""`mtkit import` on a tiny random MarianMTModel (tests/marian.py), and every command on the
imported run as on any run: translate (beam, n-best, sampling, prefix, terms, --align), align,
the server, a CTranslate2 export (int8 too), an ensemble, and fine-tuning with --init-from and
data.spm.from_run, whose run then scores and tunes its length. Bad folders: one line, exit 2,
nothing written."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch
import yaml

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from mtkit.run import data_dir, load_model  # noqa: E402
from tests.helpers import run_cli, serving  # noqa: E402
from tests.marian import WORDS_SRC, WORDS_TGT, build_marian, toy_lines  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
LINES = toy_lines(WORDS_SRC, 12, 5)


@pytest.fixture(scope="module")
def marian(tmp_path_factory) -> Path:
    return build_marian(tmp_path_factory.mktemp("hf") / "opus-mt-toy").path


@pytest.fixture(scope="module")
def imported(marian: Path, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("runs") / "imported"
    res = run_cli("import", marian, "-o", run)
    assert res.exit_code == 0, res.output
    assert f"mtkit: imported {marian} into {run}" in res.stderr
    assert "license: cc-by-4.0" in res.stderr
    return run


@pytest.fixture(scope="module")
def src_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("text") / "src.txt"
    path.write_text("\n".join(LINES) + "\n")
    return path


def _translate(run: Path | str, *args: object, lines: list[str] = LINES) -> list[str]:
    res = run_cli("translate", run, "--threads", "1", "--max-len-a", "0", "--max-len-b", "20",
                  *args, input="\n".join(lines) + "\n")
    assert res.exit_code == 0, res.output
    return res.stdout.splitlines()


def test_the_run_directory_is_ordinary_and_says_where_it_came_from(imported, marian) -> None:
    assert sorted(p.name for p in imported.iterdir()) == [
        "best.pt", "data", "origin.json", "recipe.yaml"]
    text = (imported / "recipe.yaml").read_text()
    assert text.splitlines()[1].startswith(f"# Imported by `mtkit import` from the folder {marian}")
    recipe = yaml.safe_load(text)
    tf = recipe["model"]["transformer"]
    assert (tf["activation"], tf["norm"], tf["positions"], tf["scale_embeddings"]) == (
        "swish", "post", "sinusoidal_halves", True)
    # the folder's generation defaults: 4 beams, max_length 60 (the start token, 58, the end)
    assert {k: recipe["decode"][k] for k in ("method", "beam_size", "max_len_a", "max_len_b",
                                             "length_penalty")} == {
        "method": "beam", "beam_size": 4, "max_len_a": 0.0, "max_len_b": 58,
        "length_penalty": "average"}
    assert json.loads((imported / "origin.json").read_text())["generation_not_mapped"] == {}
    origin = json.loads((imported / "origin.json").read_text())
    assert origin["folder"] == str(marian) and origin["license"] == "cc-by-4.0"
    assert set(origin["files"]) >= {"config.json", "model.safetensors", "source.spm",
                                    "target.spm", "vocab.json"}
    import hashlib

    assert origin["files"]["vocab.json"] == hashlib.sha256(
        (marian / "vocab.json").read_bytes()).hexdigest()


def test_translate_beam_nbest_sampling_prefix_terms_and_align(imported, tmp_path) -> None:
    greedy = _translate(imported, "--greedy")
    beam = _translate(imported, "--beam", "4", "--length-penalty", "average")
    assert len(greedy) == len(beam) == len(LINES)
    nbest = _translate(imported, "--beam", "4", "--nbest", "3", "--format", "jsonl")
    assert all(len(json.loads(line)["nbest"]) == 3 for line in nbest)
    assert _translate(imported, "--sample", "--seed", "3") == _translate(
        imported, "--sample", "--seed", "3")
    prefixes = tmp_path / "prefix.txt"
    first_words = [g.split(" ")[0] if g.strip() else "" for g in greedy]
    prefixes.write_text("\n".join(first_words) + "\n")
    prefixed = _translate(imported, "--greedy", "--prefix", prefixes)
    assert all(p.startswith(w) for p, w in zip(prefixed, first_words, strict=True))
    terms = tmp_path / "terms.tsv"
    terms.write_text("cat\tKatze\n")
    with_terms = _translate(imported, "--greedy", "--terms", terms,
                            lines=["the cat sat on the mat"])
    assert "Katze" in with_terms[0]
    aligned = _translate(imported, "--greedy", "--align")
    assert all(" ||| " in line for line in aligned)


def test_align_writes_links_and_heatmaps_for_a_chosen_layer_and_head(imported, tmp_path):
    src, tgt = tmp_path / "s.txt", tmp_path / "t.txt"
    src.write_text("\n".join(LINES[:3]) + "\n")
    tgt.write_text("\n".join(toy_lines(WORDS_TGT, 3, 9)) + "\n")
    res = run_cli("align", imported, "-s", src, "-t", tgt, "--pharaoh", tmp_path / "links.txt",
                  "--heatmap", tmp_path / "maps", "--layer", "0", "--head", "1")
    assert res.exit_code == 0, res.output
    links = (tmp_path / "links.txt").read_text().splitlines()
    assert len(links) == 3 and all("-" in line for line in links)
    assert len(list((tmp_path / "maps").glob("*.png"))) == 3


def test_an_ensemble_of_the_model_with_itself_translates_as_the_model(imported) -> None:
    one = _translate(imported, "--greedy")
    assert _translate(imported / "best.pt", imported / "best.pt", "--greedy") == one


def test_the_server_translates_as_the_command(imported) -> None:
    want = _translate(imported, "--greedy")
    with serving(imported) as server:
        res = server.post("/v1/translate", {"text": LINES, "method": "greedy",
                                            "max_len_a": 0, "max_len_b": 20})
        assert res.status_code == 200, res.text
        assert [t["text"] for t in res.json()["translations"]] == want


def test_ctranslate2_export_float32_and_int8(imported, tmp_path) -> None:
    pytest.importorskip("ctranslate2")
    want = _translate(imported, "--greedy")
    res = run_cli("export", imported, "-o", tmp_path / "ct2")
    assert res.exit_code == 0, res.output
    assert _translate(tmp_path / "ct2", "--greedy") == want
    # the export's README Python runs, detokenizing as Marian's tokenizer does. (Its plain
    # beam call may rank outputs that run to the engine's limit otherwise than `mtkit
    # translate DIR`, which searches those again to each sentence's limit: not compared.)
    code = (tmp_path / "ct2" / "README.md").read_text().split("```python\n")[1].split("```")[0]
    assert '.replace("\\u2581", " ").strip()' in code
    (tmp_path / "input.txt").write_text("\n".join(LINES) + "\n")
    import subprocess
    import sys

    ran = subprocess.run([sys.executable, "-c", code.replace("THIS_DIR", str(tmp_path / "ct2"))],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert len(ran.stdout.splitlines()) == len(LINES)
    res = run_cli("export", imported, "-o", tmp_path / "ct2-int8", "--quantize", "int8")
    assert res.exit_code == 0, res.output
    assert len(_translate(tmp_path / "ct2-int8", "--greedy")) == len(LINES)


def _corpus(folder: Path) -> dict[str, dict[str, str]]:
    """Toy parallel text (the target: the source's words in German, in order)."""
    table = dict(zip(WORDS_SRC, WORDS_TGT, strict=False))
    out = {}
    for name, n, seed in (("train", 200, 1), ("valid", 20, 2), ("test", 20, 3)):
        src = toy_lines(WORDS_SRC, n, seed)
        tgt = [" ".join(table.get(w, w) for w in line.split()) for line in src]
        (folder / f"{name}.en").write_text("\n".join(src) + "\n")
        (folder / f"{name}.de").write_text("\n".join(tgt) + "\n")
        out[name] = {"src": str(folder / f"{name}.en"), "tgt": str(folder / f"{name}.de")}
    return out


def _recipe(imported: Path, files: dict[str, dict[str, str]], name: str) -> dict:
    """A recipe of the user's corpus, its vocabulary and architecture the imported run's."""
    saved = yaml.safe_load((imported / "recipe.yaml").read_text())
    return {"name": name,
            "data": {"src_lang": "en", "tgt_lang": "de", "train": files["train"],
                     "valid": files["valid"], "test": {"test": files["test"]},
                     "spm": {**saved["data"]["spm"], "from_run": str(imported)},
                     "max_len": saved["data"]["max_len"]},
            "model": saved["model"],
            "train": {"device": "cpu", "threads": 1, "batch_tokens": 400, "max_updates": 6,
                      "valid_every": 3, "warmup": 1, "lr": 1e-4, "label_smoothing": 0.1,
                      "tensorboard": "off"},
            "decode": {"method": "beam", "beam_size": 2, "max_len_a": 0.0, "max_len_b": 20}}


def test_an_imported_run_prepared_with_test_sets_scores_them(imported, tmp_path) -> None:
    run = tmp_path / "scored"
    shutil.copytree(imported, run)
    path = tmp_path / "eval.yaml"
    recipe = _recipe(run, _corpus(tmp_path), "scored")
    path.write_text(yaml.safe_dump(recipe))
    res = run_cli("prep", path, "--run-dir", run)
    assert res.exit_code == 0, res.output
    res = run_cli("score", "--run", run, "--split", "test", "--greedy", "--threads", "1")
    assert res.exit_code == 0, res.output
    assert "BLEU" in res.stdout and (run / "best.pt").read_bytes() == (
        imported / "best.pt").read_bytes()
    res = run_cli("tune-length", run, "--threads", "1")  # the imported decode section: beam
    assert res.exit_code == 0, res.output


def test_fine_tuning_an_imported_model_then_scoring_and_tuning_its_length(imported, tmp_path):
    path = tmp_path / "child.yaml"
    path.write_text(yaml.safe_dump(_recipe(imported, _corpus(tmp_path), "child")))
    child = tmp_path / "child"
    res = run_cli("train", path, "--run-dir", child, "--init-from", imported)
    assert res.exit_code == 0, res.output
    # the child's data is encoded with the imported vocabulary, the table included
    assert (data_dir(child) / "pieces.json").read_bytes() == (
        data_dir(imported) / "pieces.json").read_bytes()
    parent, kid = load_model(imported).model, load_model(child / "last.pt").model
    moved = [n for n, p in kid.state_dict().items()
             if not torch.equal(p, parent.state_dict()[n])]
    assert moved  # it trained from the imported weights ...
    first = next(iter(kid.state_dict()))
    assert (kid.state_dict()[first] - parent.state_dict()[first]).abs().max() < 0.05  # ... not anew
    res = run_cli("score", "--run", child, "--split", "test", "--greedy", "--threads", "1")
    assert res.exit_code == 0, res.output
    assert "BLEU" in res.stdout
    res = run_cli("tune-length", child, "--threads", "1")
    assert res.exit_code == 0, res.output


# --------------------------------------------------------------------------- bad folders


class _Runs:
    """A pickle that runs code when unpickled (what torch's weights-only loader refuses)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _broken(marian: Path, tmp_path: Path, how: str) -> Path:
    folder = tmp_path / f"broken-{how}"
    shutil.copytree(marian, folder)
    if how == "missing":
        (folder / "vocab.json").unlink()
    elif how == "foreign":
        config = json.loads((folder / "config.json").read_text())
        config.update(model_type="bart", architectures=["BartForConditionalGeneration"])
        (folder / "config.json").write_text(json.dumps(config))
    elif how == "pickle":
        (folder / "model.safetensors").unlink()
        with open(folder / "pytorch_model.bin", "wb") as f:
            pickle.dump({"model.shared.weight": _Runs(tmp_path / "ran")}, f)
    return folder


@pytest.mark.parametrize(("how", "says"), [
    ("missing", "missing vocab.json"),
    ("foreign", "a 'bart' model (BartForConditionalGeneration); mtkit imports MarianMTModel"),
    ("pickle", "pytorch_model.bin: refused: it is a pickle that would run code"),
])
def test_a_bad_folder_is_one_line_exit_2_and_nothing_written(marian, tmp_path, how, says):
    folder = _broken(marian, tmp_path, how)
    out = tmp_path / "out"
    res = run_cli("import", folder, "-o", out)
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mtkit: error: ") and says in lines[0], lines
    assert not out.exists() and not (tmp_path / "ran").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.import-")]


def test_pytorch_model_bin_of_plain_tensors_imports_as_safetensors_does(marian, imported,
                                                                          tmp_path) -> None:
    from safetensors.torch import load_file

    folder = tmp_path / "bin"
    shutil.copytree(marian, folder)
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    res = run_cli("import", folder, "-o", tmp_path / "out")
    assert res.exit_code == 0, res.output
    ours, theirs = (load_model(p).model.state_dict() for p in (tmp_path / "out", imported))
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)


def test_an_existing_folder_is_never_replaced(marian, tmp_path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep")
    res = run_cli("import", marian, "-o", out)
    assert res.exit_code == 2 and "exists and is not an empty folder" in res.stderr
    assert (out / "notes.txt").read_text() == "keep"


def test_a_hub_id_without_the_network_says_how_to_do_without(tmp_path) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")}
    res = subprocess.run([sys.executable, "-m", "mtkit", "import", "Helsinki-NLP/opus-mt-en-de",
                          "-o", str(tmp_path / "out")], capture_output=True, text=True,
                         env=env, timeout=120)
    assert res.returncode == 2, res.stderr
    line = res.stderr.strip()
    assert "\n" not in line and "cannot be downloaded from the Hugging Face Hub" in line
    assert "import a local folder" in line and not (tmp_path / "out").exists()


def test_a_hub_id_without_huggingface_hub_names_the_extra(tmp_path, monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails
    res = run_cli("import", "Helsinki-NLP/opus-mt-en-de", "-o", tmp_path / "out")
    assert res.exit_code == 2, res.output
    line = res.stderr.strip()
    assert "\n" not in line and "pip install 'mtkit[hf]'" in line
    assert "import a local folder" in line and not (tmp_path / "out").exists()
