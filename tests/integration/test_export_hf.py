"""`mtkit export --engine hf`: the folder transformers' `from_pretrained` loads computes what
mtkit computes (teacher-forced logits within 1e-5, the same greedy and beam output, the same
token ids); what no class holds is refused in one line with nothing written.

Tiny random models stand in for trained ones where exactness is the question (logits); the
trained toy model (conftest `toy_model`) where the search must agree.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from mtkit.cli import app
from mtkit.config import dump_recipe, load_recipe
from mtkit.data.batch import collate
from mtkit.data.spm import Tokenizer
from mtkit.data.store import text_path
from mtkit.models.build import build_model
from mtkit.models.vocab import BOS_ID, EOS_ID, PAD_ID
from mtkit.run import data_dir, load_model, save_checkpoint
from tests.helpers import RECIPES

transformers = pytest.importorskip(
    "transformers", reason="transformers is a test dependency: pip install -e '.[dev]'")

pytestmark = pytest.mark.usefixtures("one_thread")


def _cli(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def _random_run(base: Path, run: Path, sets: list[str], *, seed: int = 0) -> Path:
    """A run directory holding an untrained tiny model as best.pt on `base`'s prepared data,
    its weights perturbed so that no layer is trivial (norms included)."""
    shutil.copytree(base, run)
    small = [] if "model.arch=rnn" in sets else ["model.transformer.d_model=32",
                                                 "model.transformer.ffn_dim=48"]
    recipe = load_recipe(RECIPES / "toy.yaml", [*small, *sets])
    tok = Tokenizer.load(data_dir(run))
    torch.manual_seed(seed)
    model = build_model(recipe.model, tok.src_vocab_size, tok.tgt_vocab_size)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    save_checkpoint(run / "best.pt", {
        "recipe": dump_recipe(recipe), "model": model.state_dict(),
        "vocab": {"src": tok.src_vocab_size, "tgt": tok.tgt_vocab_size,
                  "sha256": tok.fingerprint()}})
    return run


def _export(run: Path, out: Path) -> Path:
    res = _cli("export", "--engine", "hf", run, "-o", out)
    assert res.exit_code == 0, res.output
    return out


def _load(out: Path):
    tok = transformers.AutoTokenizer.from_pretrained(out)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    return tok, model


@pytest.fixture(scope="module")
def toy_run_separate(tmp_path_factory) -> Path:
    """The toy data with separate source and target sentencepiece models."""
    from mtkit.data.prep import prepare

    run = tmp_path_factory.mktemp("toy-separate")
    prepare(load_recipe(RECIPES / "toy.yaml", ["data.spm.joint=false",
                                               "model.transformer.share_embeddings=false"]), run)
    return run


MARIAN = ["model.transformer.norm=post", "model.transformer.positions=sinusoidal_halves",
          "model.transformer.activation=swish"]
SEPARATE = ["model.transformer.share_embeddings=false", "data.spm.joint=false"]


@pytest.mark.parametrize(("sets", "architecture"), [
    ([], "BlenderbotForConditionalGeneration"),
    (["model.transformer.positions=learned", "model.transformer.activation=gelu"],
     "BlenderbotForConditionalGeneration"),
    (["model.transformer.positions=sinusoidal_halves", "model.transformer.scale_embeddings=false"],
     "BlenderbotForConditionalGeneration"),
    (MARIAN, "MarianMTModel"),
    ([*MARIAN, *SEPARATE], "MarianMTModel"),
], ids=["pre-sinusoidal-relu", "pre-learned-gelu", "pre-halves-unscaled", "post-marian",
        "post-marian-separate"])
def test_teacher_forced_logits_equal_mtkit(sets, architecture, toy_run, toy_run_separate,
                                           tmp_path):
    base = toy_run_separate if "data.spm.joint=false" in sets else toy_run
    run = _random_run(base, tmp_path / "run", sets, seed=len(sets))
    _, hf = _load(_export(run, tmp_path / "hf"))
    assert type(hf).__name__ == architecture
    model, _, tok = load_model(run)
    ddir = data_dir(run)
    srcs = tok.encode_src_lines(text_path(ddir, "test", "src").read_text().splitlines())
    tgts = tok.encode_tgt_lines(text_path(ddir, "test", "tgt").read_text().splitlines())
    b = collate(srcs, tgts, range(len(srcs)))  # sources end with EOS, padded
    mask = torch.arange(b.src.size(1))[None, :] < b.src_lens[:, None]
    with torch.no_grad():
        want = model(b.src, b.src_lens, b.tgt_in).logits
        got = hf(input_ids=b.src, attention_mask=mask.long(), decoder_input_ids=b.tgt_in).logits
    real = b.tgt_in != PAD_ID
    assert bool(real.all(1).any()) and not bool(real.all())  # padded rows and full rows
    torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=0)


def test_generate_gives_what_mtkit_translates(toy_model, tmp_path):
    """The trained toy model: greedy and beam output, and MarianTokenizer's ids and text."""
    out = _export(toy_model, tmp_path / "hf")
    tok, hf = _load(out)
    src = text_path(data_dir(toy_model), "test", "src")
    lines = src.read_text().splitlines()
    mt_tok = Tokenizer.load(data_dir(toy_model))
    batch = tok(lines, return_tensors="pt", padding=True)
    ids = [row[row != PAD_ID].tolist() for row in batch["input_ids"]]
    assert ids == [s + [EOS_ID] for s in mt_tok.encode_src_lines(lines)]
    for args, kwargs in [(["--greedy"], {"num_beams": 1}),
                         (["--beam", "4", "--length-penalty", "average"], {})]:
        want = _cli("translate", toy_model, *args, "-i", src)
        assert want.exit_code == 0, want.output
        with torch.no_grad():
            gen = hf.generate(**batch, **kwargs)
        assert tok.batch_decode(gen, skip_special_tokens=True) == want.stdout.splitlines()
    assert gen[:, 0].eq(BOS_ID).all()  # the decoder starts from <s>, as mtkit's does


def _front_matter(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def test_model_card_carries_the_runs_scores(toy_model, tmp_path):
    """Front matter the Hub reads, and the test scores `score --run` made with this
    checkpoint, signatures included; without them the card says how to add them."""
    run = Path(shutil.copytree(toy_model, tmp_path / "run"))
    bare = _front_matter((_export(run, tmp_path / "bare") / "README.md").read_text())
    assert bare["language"] == ["src", "tgt"] and "model-index" not in bare
    scored = _cli("score", "--run", run, "--split", "test", "--greedy", "--json",
                  "--metrics", "bleu")
    assert scored.exit_code == 0, scored.output
    report = json.loads(scored.stdout)
    card = (_export(run, tmp_path / "hf") / "README.md").read_text()
    meta = _front_matter(card)
    assert meta["pipeline_tag"] == "translation" and "license" not in meta
    result = meta["model-index"][0]["results"][0]
    assert result["dataset"]["name"] == "test"
    bleu = report["systems"][0]["scores"]["BLEU"]["score"]
    assert result["metrics"][0] == {"type": "bleu", "value": round(bleu, 2), "name": "BLEU"}
    assert report["signatures"]["BLEU"] in card
    assert "| test | greedy |" in card


@pytest.mark.parametrize(("sets", "field"), [
    (["model.arch=rnn"], "model.arch"),
    (SEPARATE, "model.transformer.share_embeddings"),
    (["model.transformer.norm=post"], "model.transformer.positions"),
    (["model.transformer.norm=post", "model.transformer.positions=learned"],
     "model.transformer.positions"),
])
def test_what_no_class_holds_is_refused_in_one_line(sets, field, toy_run, toy_run_separate,
                                                    tmp_path):
    base = toy_run_separate if "data.spm.joint=false" in sets else toy_run
    run = _random_run(base, tmp_path / "run", sets)
    res = _cli("export", "--engine", "hf", run, "-o", tmp_path / "hf")
    assert res.exit_code == 2
    assert len(res.output.strip().splitlines()) == 1 and field in res.output
    assert not (tmp_path / "hf").exists()


def test_quantization_is_refused_for_hf(toy_run, tmp_path):
    res = _cli("export", "--engine", "hf", "--quantize", "int8", toy_run, "-o", tmp_path / "hf")
    assert res.exit_code == 2 and "--quantize int8" in res.output
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "hf").exists()


def test_translate_names_an_hf_export_in_one_line(toy_run, tmp_path):
    run = _random_run(toy_run, tmp_path / "run", [])
    out = _export(run, tmp_path / "hf")
    again = _export(run, out)  # a previous export is filled in place
    res = _cli("translate", again, "-i", text_path(data_dir(run), "test", "src"))
    assert res.exit_code == 2 and "a Hugging Face export" in res.output
    assert len(res.output.strip().splitlines()) == 1


def _weights(run: Path) -> dict[str, torch.Tensor]:
    from mtkit.run import load_checkpoint

    return load_checkpoint(run / "best.pt")["model"]


@pytest.mark.parametrize("separate", [False, True], ids=["shared", "separate"])
def test_import_of_the_export_gives_the_same_weights(separate, toy_run, toy_run_separate,
                                                     tmp_path):
    from mtkit.hf.importer import import_model

    sets = [*MARIAN, *SEPARATE] if separate else MARIAN
    run = _random_run(toy_run_separate if separate else toy_run, tmp_path / "run", sets)
    import_model(str(_export(run, tmp_path / "hf")), tmp_path / "back")
    want, got = _weights(run), _weights(tmp_path / "back")
    assert want.keys() == got.keys()
    if separate:
        # A source vocabulary of its own has no start symbol in Marian's layout: the
        # importer gives mtkit's source BOS row (no source holds BOS) Marian's pad row, and
        # its PAD row zeros. Those two rows aside, every tensor comes back as it was.
        rows = [i for i in range(want["src_embed.tokens.weight"].size(0))
                if i not in (PAD_ID, BOS_ID)]
        for name in ("src_embed.tokens.weight",):
            want[name], got[name] = want[name][rows], got[name][rows]
    for name in want:
        assert torch.equal(want[name], got[name]), name


def test_an_imported_marian_exports_back_to_itself(tmp_path):
    """A MarianMTModel imported and exported: the export generates what the original does,
    and importing it again gives the first import's weights."""
    from mtkit.hf.importer import import_model
    from tests.marian import build_marian, toy_lines

    folder = build_marian(tmp_path / "marian", shared=True, activation="swish", seed=3).path
    import_model(str(folder), tmp_path / "imported")
    out = _export(tmp_path / "imported", tmp_path / "hf")
    assert json.loads((out / "config.json").read_text())["architectures"] == ["MarianMTModel"]
    import_model(str(out), tmp_path / "again")
    first, second = _weights(tmp_path / "imported"), _weights(tmp_path / "again")
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    lines = toy_lines(("the", "cat", "sat", "on", "mat", "dog", "runs"), 30, seed=5)
    texts = []
    for path in (folder, out):
        tok, model = _load(path)
        batch = tok(lines, return_tensors="pt", padding=True)
        with torch.no_grad():
            gen = model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=20)
        texts.append(tok.batch_decode(gen, skip_special_tokens=True))
    assert texts[0] == texts[1] and len(set(texts[0])) > 5
