"""Recipes: every validation error by its message, overrides, relative paths, round trips."""

from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from mtkit.config import (
    DecodeConfig,
    FileSource,
    Recipe,
    dump_recipe,
    load_recipe,
    parse_duration,
    recipe_from_dict,
    recipe_from_yaml_text,
    split_corpora,
    updated_section,
)
from mtkit.errors import ConfigError
from tests.helpers import REPO

RECIPES = REPO / "recipes"
MINIMAL = {"data": {"train": {"src": "a.src", "tgt": "a.tgt"},
                    "valid": {"src": "v.src", "tgt": "v.tgt"}}}


def _with(**dotted: object) -> dict:
    """MINIMAL with dotted keys set, e.g. _with(**{"train.lr": 1})."""
    raw = copy.deepcopy(MINIMAL)
    for key, value in dotted.items():
        node = raw
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return raw


def _error(raw: dict) -> str:
    with pytest.raises(ConfigError) as e:
        recipe_from_dict(raw, source="r.yaml")
    return str(e.value)


@pytest.mark.parametrize(("dotted", "message"), [
    ({"train.lrr": 1}, "r.yaml: train.lrr: unknown key; did you mean `train.lr`?"),
    ({"data.spm.vocab_sise": 1},
     "r.yaml: data.spm.vocab_sise: unknown key; did you mean `data.spm.vocab_size`?"),
    ({"train.zzzz": 1}, "r.yaml: train.zzzz: unknown key; valid keys: seed, device,"),
    ({"train.lr": "abc"}, "r.yaml: train.lr: expected a number, got 'abc'"),
    ({"train.lr": True}, "r.yaml: train.lr: expected a number, got True"),
    ({"train.compile": "yes"}, "r.yaml: train.compile: expected true or false, got 'yes'"),
    ({"data.spm.vocab_size": 3},
     "r.yaml: data.spm.vocab_size: out of range: expected a value >= 16, got 3"),
    ({"data.spm.character_coverage": 0.0},
     "r.yaml: data.spm.character_coverage: out of range: expected a value > 0.0, got 0.0"),
    ({"data.spm.vocab_size": 10**20},  # sentencepiece failed to parse it
     "r.yaml: data.spm.vocab_size: out of range: expected a value <= 2147483647"),
    ({"data.clean.min_len": 10, "data.clean.max_len": 5},  # prep kept no pair, said later
     "r.yaml: data.clean.min_len: 10 is more than max_len (5): every pair would be dropped"),
    ({"train.seed": -1}, "r.yaml: train.seed: out of range: expected a value >= 0, got -1"),
    ({"train.seed": 2**64}, "r.yaml: train.seed: out of range: expected a value <= "),
    ({"train.lr": float("inf")}, "r.yaml: train.lr: expected a finite number, got inf"),
    ({"decode.alpha": 400}, "r.yaml: decode.alpha: out of range: expected a value <= 10.0"),
    ({"model.transformer.dropout": float("nan")},  # one problem, not one per bound
     "r.yaml: model.transformer.dropout: expected a finite number, got nan"),
    ({"model.transformer.dropout": 1.0},
     "r.yaml: model.transformer.dropout: out of range: expected a value < 1.0, got 1.0"),
    ({"model.arch": "lstm"},
     "r.yaml: model.arch: invalid choice 'lstm'; expected one of rnn, transformer"),
    ({"data.spm.model_type": "wordpiece"},
     "r.yaml: data.spm.model_type: invalid choice 'wordpiece'; expected one of unigram, bpe"),
    ({"model.transformer.heads": 3},
     "r.yaml: model.transformer.heads: d_model (256) must be divisible by heads (3)"),
    ({"data.spm.joint": False}, "r.yaml: model.transformer.share_embeddings: needs a joint "
     "vocabulary (data.spm.joint: true)"),
    ({"decode.nbest": 9}, "r.yaml: decode.nbest: cannot exceed beam_size (5)"),
    ({"train.average_last": 9},
     "r.yaml: train.average_last: cannot average more than keep_last (3) checkpoints"),
    ({"model.rnn.attention": "location"},
     "r.yaml: model.rnn.attention: `location` is Luong attention; use placement: luong"),
    ({"model.rnn.input_feeding": False}, "r.yaml: model.rnn.input_feeding: Bahdanau placement "
     "always feeds the context into the recurrence"),
    ({"decode.method": "greedy", "decode.nbest": 2},
     "r.yaml: decode.nbest: greedy search gives one hypothesis"),
    ({"data.train": None}, "r.yaml: data.train: missing: every recipe needs a `train` split"),
    ({"data.valid": None}, "r.yaml: data.valid: missing: every recipe needs a `valid` split"),
    ({"data.test": {"valid": {"src": "a", "tgt": "b"}}},
     "r.yaml: data.test.valid: test set names use letters, digits"),
    ({"data.test": {"..": {"src": "a", "tgt": "b"}}},  # wrote data/...src.txt
     "r.yaml: data.test...: test set names use letters, digits"),
    ({"data.train.src": {"url": "https://example.org/a.gz"}},
     "r.yaml: data.train.src.sha256: a URL source needs its sha256 checksum"),
    ({"data.train.src": {"url": "https://example.org/a.gz", "path": "a", "sha256": "0" * 64}},
     "r.yaml: data.train.src: expected exactly one of `path` or `url`"),
    ({"data.train.src": {"path": "a", "sha256": "AB"}},
     "r.yaml: data.train.src.sha256: expected 64 lowercase hex digits, got 'AB'"),
    ({"data.train.src": {"path": "a", "sha256": 0}},  # '000...0' unquoted: it said got '0'
     "r.yaml: data.train.src.sha256: expected 64 lowercase hex digits, got '0 (a number to "
     "YAML: quote the checksum)'"),
    ({"train.max_time": "10x"},
     "r.yaml: train.max_time: expected a duration such as 90s, 10m, 2h30m, got '10x'"),
    ({"train.max_time": 0}, "r.yaml: train.max_time: a budget of 0 stops training at once; null"),
    ({"train.max_time": "0m"}, "r.yaml: train.max_time: a budget of 0 stops training at once"),
    ({"train.device": "gpu"},
     "r.yaml: train.device: expected auto, cpu, cuda, cuda:N or mps, got 'gpu'"),
    ({"train.betas": [0.9, 1.5]}, "r.yaml: train.betas: expected two numbers in [0, 1)"),
    ({"train.betas": [0.9]}, "r.yaml: train.betas: expected a list of"),
    ({"name": "a b"}, "r.yaml: name: expected a plain folder name of letters, digits, "
     "'_', '-', '.' (not . or ..), got 'a b'"),
    ({"name": ".."}, "r.yaml: name: expected a plain folder name"),
    ({"name": "."}, "r.yaml: name: expected a plain folder name"),
    ({"decode.min_len": 30, "decode.max_len_b": 5, "decode.max_len_a": 1.5},
     "r.yaml: decode.min_len: 30 is more than the output limit for a one-token source"),
    ({"train": [1, 2]}, "r.yaml: train: expected a mapping, got [1, 2]"),
    ({"data.train": [{"src": "a", "tgt": "b"}, {"src": {"url": "https://example.org/c.gz"},
                                                 "tgt": "d"}]},
     "r.yaml: data.train[1].src.sha256: a URL source needs its sha256 checksum"),
    ({"data.valid": [{"src": "a", "tgt": "b", "sorce": "c"}]},
     "r.yaml: data.valid[0].sorce: unknown key; did you mean `data.valid[0].src`?"),
    ({"data.train": []}, "r.yaml: data.train: expected a corpus ({src, tgt}) or a non-empty "
     "list of them"),
    ({"data.train": "a.txt"}, "r.yaml: data.train: expected a mapping or a list of mappings"),
    ({"data.valid.align": "v.align"}, "r.yaml: data.valid.align: alignments are read for the "
     "training split only"),
    ({"train.guided_alignment.weight": 0.05}, "r.yaml: data.train.align: missing: "
     "train.guided_alignment.weight > 0 needs the word alignment of every training corpus"),
    ({"data.train.align": "a.align"}, "r.yaml: train.guided_alignment.weight: is 0 (off), but "
     "the training split names alignments"),
    ({"data.train": [{"src": "a", "tgt": "b", "align": "c"}, {"src": "d", "tgt": "e"}]},
     "r.yaml: data.train[1].align: missing: some training corpora name an alignment, so every "
     "one must"),
    ({"train.guided_alignment.readout": "next"}, "r.yaml: train.guided_alignment.readout: "
     "invalid choice 'next'; expected one of current, shift"),
    ({"train.guided_alignment.weight": -0.1}, "r.yaml: train.guided_alignment.weight: out of "
     "range: expected a value >= 0.0, got -0.1"),
    ({"train.guided_alignment.wieght": 1}, "r.yaml: train.guided_alignment.wieght: unknown "
     "key; did you mean `train.guided_alignment.weight`?"),
    ({"data.train.align": {"url": "https://example.org/a.align"}},
     "r.yaml: data.train.align.sha256: a URL source needs its sha256 checksum"),
    ({"data.train.align": "a", "train.guided_alignment.weight": 0.05, "model.arch": "rnn",
      "model.rnn.attention": "none"}, "r.yaml: train.guided_alignment.weight: "
     "model.rnn.attention is none: the model has no attention to guide"),
    ({"data.train.align": "a", "train.guided_alignment.weight": 0.05, "model.arch": "rnn",
      "train.guided_alignment.readout": "shift"}, "r.yaml: train.guided_alignment.readout: "
     "shift needs a Transformer"),
])
def test_each_error_names_key_and_expectation(dotted: dict, message: str) -> None:
    assert _error(_with(**dotted)).startswith(message)


def test_a_split_is_one_corpus_or_a_list_of_them(tmp_path: Path) -> None:
    raw = _with(**{"data.train": [{"src": "a.en", "tgt": "a.de"},
                                  {"src": {"url": "https://example.org/b.en", "sha256": "1" * 64},
                                   "tgt": "b.de"}],
                   "data.test": {"t1": {"src": "t.en", "tgt": "t.de"},
                                 "t2": [{"src": "u.en", "tgt": "u.de"}]}})
    r = recipe_from_dict(raw, source="r.yaml", base=tmp_path)
    assert isinstance(r.data.train, tuple) and len(r.data.train) == 2
    assert r.data.train[0].src.path == str(tmp_path / "a.en")
    assert r.data.train[1].src.url == "https://example.org/b.en"
    assert [k for k, _ in split_corpora(r.data.train)] == ["[0]", "[1]"]
    assert [k for k, _ in split_corpora(r.data.test["t1"])] == [""]
    assert isinstance(r.data.test["t2"], tuple)
    # Saved and loaded again (recipe.yaml, checkpoints): the same recipe, lists stay lists.
    assert recipe_from_yaml_text(dump_recipe(r), source="saved") == r


def test_guided_alignment_recipe_round_trips(tmp_path: Path) -> None:
    raw = _with(**{"data.train": [{"src": "a", "tgt": "b", "align": "a.align"},
                                  {"src": "c", "tgt": "d", "align": {"path": "c.align.gz"}}],
                   "train.guided_alignment": {"weight": 0.05, "readout": "shift"}})
    r = recipe_from_dict(raw, source="r.yaml", base=tmp_path)
    assert r.data.train[0].align == FileSource(path=str(tmp_path / "a.align"))
    assert r.train.guided_alignment.enabled and r.train.guided_alignment.readout == "shift"
    assert recipe_from_yaml_text(dump_recipe(r), source="saved") == r
    assert not recipe_from_dict(MINIMAL).train.guided_alignment.enabled  # off by default


def test_all_problems_reported_at_once() -> None:
    msg = _error(_with(**{"train.lrr": 1, "data.spm.vocab_size": 3, "model.arch": "x"}))
    lines = msg.splitlines()
    assert lines[0] == "3 problems in recipe:"
    assert sorted(lines[1:]) == sorted([
        "r.yaml: train.lrr: unknown key; did you mean `train.lr`?",
        "r.yaml: data.spm.vocab_size: out of range: expected a value >= 16, got 3",
        "r.yaml: model.arch: invalid choice 'x'; expected one of rnn, transformer",
    ])


def test_valid_recipe_types_and_yaml_float_strings() -> None:
    r = recipe_from_dict(_with(**{"train.lr": "1e-3", "train.betas": [0.9, 0.99]}))
    assert isinstance(r, Recipe)
    assert r.train.lr == pytest.approx(1e-3) and isinstance(r.train.lr, float)
    assert r.train.betas == (0.9, 0.99)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.train.lr = 1.0  # type: ignore[misc]


def _write(path: Path, raw: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: recipe file not found"):
        load_recipe(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("data:\n  train: [\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.yaml: line \d+ not valid YAML"):
        load_recipe(bad)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(ConfigError, match=r"bin\.yaml: not UTF-8 text"):
        load_recipe(binary)
    lst = tmp_path / "list.yaml"
    lst.write_text("- 1\n- 2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"list\.yaml: expected a mapping with sections"):
        load_recipe(lst)


def test_errors_name_the_recipe_path(tmp_path: Path) -> None:
    path = _write(tmp_path / "r.yaml", _with(**{"train.lrr": 1}))
    with pytest.raises(ConfigError, match=rf"^{path}: train\.lrr: unknown key"):
        load_recipe(path)


def test_base_60_numbers_are_text(tmp_path: Path) -> None:
    """YAML 1.1 read `1:30` as 90: a budget of 90 s, whichever of 1 h 30 or 1 min 30 was
    meant. As text, it is refused with the durations mtkit reads."""
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(MINIMAL) + "train:\n  max_time: 1:30\n")
    for given in ((path,), (_write(tmp_path / "m.yaml", MINIMAL), ["train.max_time=1:30"])):
        with pytest.raises(ConfigError, match=r"train\.max_time: expected a duration such as "
                           r"90s, 10m, 2h30m, got '1:30'"):
            load_recipe(*given)
    assert load_recipe(path.parent / "m.yaml", ["train.max_time=90"]).train.max_time == "90"


def test_overrides(tmp_path: Path) -> None:
    path = _write(tmp_path / "r.yaml", MINIMAL)
    r = load_recipe(path, ["train.lr=3e-4", "data.spm.vocab_size=16000",
                           "model.transformer.norm=post", "train.max_time=10m", "name=abc"])
    assert r.train.lr == pytest.approx(3e-4)
    assert r.data.spm.vocab_size == 16000
    assert r.model.transformer.norm == "post"
    assert r.train.max_time == "10m"
    assert r.name == "abc"
    # The file is untouched; overrides are validated like the file's own values.
    assert load_recipe(path).train.lr == pytest.approx(5e-4)
    with pytest.raises(ConfigError, match=r"train\.lrr: unknown key; did you mean `train\.lr`"):
        load_recipe(path, ["train.lrr=1"])
    with pytest.raises(ConfigError, match=r"^--set data\.spm\.vocab_size=2: "
                       r"data\.spm\.vocab_size: out of range"):
        load_recipe(path, ["data.spm.vocab_size=2"])
    with pytest.raises(ConfigError) as bad:  # each problem named by where it came from
        load_recipe(_write(tmp_path / "bad.yaml", {**MINIMAL, "foo": 1}),
                    ["zap.x=1", "train.lr=-1"])
    assert sorted(bad.value.args[0].splitlines()[1:]) == sorted([
        f"{tmp_path / 'bad.yaml'}: foo: unknown key; valid keys: name, data, model, train, decode",
        "--set zap.x=1: zap: unknown key; valid keys: name, data, model, train, decode",
        "--set train.lr=-1: train.lr: out of range: expected a value > 0.0, got -1.0"])
    with pytest.raises(ConfigError, match=r"--set 'train\.lr': expected KEY=VALUE"):
        load_recipe(path, ["train.lr"])
    with pytest.raises(ConfigError, match=r"`data\.train\.src` is not a section"):
        load_recipe(path, ["data.train.src.x=1"])
    with pytest.raises(ConfigError, match=r"train\.lr: expected a number, got \{'x': 1\}"):
        load_recipe(path, ["train.lr.x=1"])
    with pytest.raises(ConfigError, match=r"empty key part"):
        load_recipe(path, ["train..lr=1"])
    # what nothing would read is refused: the other architecture's section (a recipe file may
    # hold both sections, to switch with model.arch)
    with pytest.raises(ConfigError, match=r"^--set model\.rnn\.hidden_dim=512: model\.rnn\."
                       r"hidden_dim: model\.arch is transformer, which does not read model\.rnn"):
        load_recipe(path, ["model.rnn.hidden_dim=512"])
    # ... beside the other problems, not only once they are mended
    with pytest.raises(ConfigError, match=r"^2 problems in recipe:\n--set train\.lr=x: .*\n"
                       r"--set model\.rnn\.hidden_dim=512: model\.rnn\.hidden_dim: model\.arch "
                       r"is transformer"):
        load_recipe(path, ["train.lr=x", "model.rnn.hidden_dim=512"])
    rnn = load_recipe(path, ["model.arch=rnn", "model.rnn.hidden_dim=32"]).model
    assert rnn.rnn.hidden_dim == 32
    with pytest.raises(ConfigError, match=r"^--set model\.rnn=\{hidden_dim: 5\}: model\.rnn: "
                       r"model\.arch is transformer"):  # the whole section
        load_recipe(path, ["model.rnn={hidden_dim: 5}"])
    # a field missing in a section an override made is the override's doing; in the file's
    # own section, the file's
    with pytest.raises(ConfigError, match=r"^--set data\.test\.extra\.src=a: "
                       r"data\.test\.extra\.tgt: missing"):
        load_recipe(path, ["data.test.extra.src=a"])
    lacking = _write(tmp_path / "lacking.yaml", {**MINIMAL, "data": {
        **MINIMAL["data"], "test": {"t": {"src": "a"}}}})
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(lacking))}: data\.test\.t\.tgt: "
                       "missing"):
        load_recipe(lacking, ["data.test.t.src=b"])
    # a rule across sections names the key a --set gave (the file was blamed)
    with pytest.raises(ConfigError, match=r"^--set data\.train\.align=a\.align: train\."
                       r"guided_alignment\.weight: is 0 \(off\), but the training split names "
                       r"alignments \(data\.train\.align\)"):
        load_recipe(path, ["data.train.align=a.align"])
    # a test set name that is no longer a plain one (an older run's) still loads
    assert "_dev" in load_recipe(path, ["data.test._dev.src=a", "data.test._dev.tgt=b"]).data.test
    # one corpus of a list, named as problems name it
    two = _write(tmp_path / "two.yaml", {**MINIMAL, "data": {**MINIMAL["data"], "train": [
        {"src": "a.src", "tgt": "a.tgt"}, {"src": "b.src", "tgt": "b.tgt"}]}})
    r = load_recipe(two, ["data.train[1].tgt=c.tgt"])
    assert [Path(c.tgt.path).name for c in r.data.train] == ["a.tgt", "c.tgt"]
    with pytest.raises(ConfigError, match=r"`data\.train\[2\]` is no entry of a list"):
        load_recipe(two, ["data.train[2].src=x"])
    with pytest.raises(ConfigError, match=r"`data\.train` is not a section; it is a list: "
                       r"name an entry, `data\.train\[0\]`$"):
        load_recipe(two, ["data.train.src=x"])
    with pytest.raises(ConfigError, match=r"^--set data\.train\[0\]\.sha=1: data\.train\[0\]"
                       r"\.sha: unknown key"):
        load_recipe(two, ["data.train[0].sha=1"])
    # a rule across fields that an override broke is named by the override, not the file
    with pytest.raises(ConfigError, match=r"^--set model\.transformer\.d_model=33: "
                       r"model\.transformer\.heads: d_model \(33\) must be divisible"):
        load_recipe(path, ["model.transformer.d_model=33"])
    with pytest.raises(ConfigError, match=r"^--set data\.spm\.joint=false: model\.transformer"
                       r"\.share_embeddings: needs a joint vocabulary"):  # across sections
        load_recipe(path, ["data.spm.joint=false"])
    odd = _write(tmp_path / "odd.yaml", _with(**{"model.transformer.d_model": 33}))
    with pytest.raises(ConfigError, match=rf"^{odd}: model\.transformer\.heads: d_model"):
        load_recipe(odd, ["model.transformer.dropout=0.2"])
    decode = dataclasses.replace(DecodeConfig(), nbest=3)
    with pytest.raises(ConfigError, match=r"^--beam: decode\.nbest: cannot exceed beam_size"):
        updated_section(decode, {"beam_size": 2}, prefix="decode", source="r.yaml",
                        origins={"beam_size": "--beam"})
    # a command-line flag that sets a recipe field is named as the user typed it
    with pytest.raises(ConfigError, match=r"^--device tpu: train\.device: expected auto"):
        load_recipe(path, ["train.device=tpu"], flags={"train.device=tpu": "--device tpu"})


def test_relative_paths_resolve_against_the_recipe(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    raw = _with(**{"data.train.src": "corpus/a.src", "data.train.tgt": str(tmp_path / "abs.tgt"),
                   "data.valid.src": {"url": "https://example.org/v.src.gz", "sha256": "1" * 64},
                   "data.valid.tgt": {"url": "https://example.org/v.tgt.gz", "sha256": "0" * 64}})
    _write(tmp_path / "sub" / "r.yaml", raw)
    monkeypatch.chdir(tmp_path)  # the working directory must not matter
    r = load_recipe(Path("sub/r.yaml"))
    assert r.data.train.src == FileSource(path=str(tmp_path / "sub" / "corpus" / "a.src"))
    assert r.data.train.tgt.path == str(tmp_path / "abs.tgt")
    assert r.data.valid.src.url == "https://example.org/v.src.gz"
    assert r.data.valid.src.path is None
    assert r.data.valid.tgt.file_name == "v.tgt.gz"


def test_yaml_keys_given_twice_are_refused_merges_are_not(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    body = yaml.safe_dump(MINIMAL)
    recipe.write_text(body + "train:\n  lr: 1.0e-3\n  lr: 2.0e-3\n")
    with pytest.raises(ConfigError, match=r"r\.yaml: line \d+ not valid YAML \(key 'lr' is given "
                       r"twice in one mapping\)"):
        load_recipe(recipe)
    recipe.write_text(body + "train:\n  <<: {lr: 1.0e-3, seed: 5}\n  lr: 2.0e-3\n")
    r = load_recipe(recipe)  # a merged key overridden beside the merge: YAML's own rule
    assert r.train.lr == pytest.approx(2e-3) and r.train.seed == 5
    recipe.write_text(body + "[a, b]: 1\n")
    with pytest.raises(ConfigError, match=r"not valid YAML \(found unhashable key\)"):
        load_recipe(recipe)


def test_a_recipe_without_a_name_takes_its_file_name(tmp_path: Path) -> None:
    assert load_recipe(_write(tmp_path / "my-exp.v2.yaml", MINIMAL)).name == "my-exp.v2"
    # made a plain folder name (every nameless recipe of another file name shared runs/run/)
    assert load_recipe(_write(tmp_path / "x y.yaml", MINIMAL)).name == "x-y"
    assert load_recipe(_write(tmp_path / "...yaml", MINIMAL)).name == "run"  # nothing left
    assert load_recipe(_write(tmp_path / ".hidden.yaml", MINIMAL)).name == ".hidden"  # as was
    named = _write(tmp_path / "other.yaml", {**MINIMAL, "name": "abc"})
    assert load_recipe(named).name == "abc" and load_recipe(named, ["name=d"]).name == "d"


def test_plain_url_string_becomes_a_url_source() -> None:
    with pytest.raises(ConfigError, match=r"data\.train\.src\.sha256: a URL source needs"):
        recipe_from_dict(_with(**{"data.train.src": "https://example.org/a.gz"}))


def test_dump_round_trip(tmp_path: Path) -> None:
    r = load_recipe(_write(tmp_path / "r.yaml", MINIMAL), ["train.lr=1e-3"])
    again = recipe_from_yaml_text(dump_recipe(r), source="checkpoint")
    assert again == r


@pytest.mark.parametrize("name", ["en-de.yaml", "en-de-cpu.yaml", "en-de-rnn.yaml",
                                  "en-de-rnn-hard.yaml", "toy.yaml",
                                  "opus-mt-en-de-finetune.yaml"])
def test_shipped_recipes_load_and_every_key_has_a_comment(name: str) -> None:
    path = RECIPES / name
    r = load_recipe(path)
    assert r.data.train is not None and r.data.valid is not None
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip() and not line.lstrip().startswith("#"):
            assert " # " in line or "  #" in line, f"{name}:{i}: key without a comment: {line}"


def test_en_de_names_multi30k() -> None:
    r = load_recipe(RECIPES / "en-de.yaml")
    base = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
    assert r.data.train.src.url == base + "train.en.gz"
    assert r.data.valid.tgt.url == base + "val.de.gz"
    assert set(r.data.test) == {"test2016"}
    assert r.data.test["test2016"].src.url == base + "test_2016_flickr.en.gz"
    assert r.data.spm.joint and r.data.spm.vocab_size == 8000


def test_parse_duration() -> None:
    assert parse_duration("90s") == 90
    assert parse_duration("2h30m") == 9000
    assert parse_duration("45") == 45
    # a last number takes the next unit down, as people write times; spaces beside a unit
    assert [parse_duration(t) for t in ("1h30", "10m30", "90 s", "1h 30m")] == [
        5400, 630, 90, 5400]
    for bad in ("soon", "30 1", "1s30", "1:30"):
        with pytest.raises(ValueError, match="expected a duration"):
            parse_duration(bad)


def test_language_tags_are_checked_against_the_training_corpora(tmp_path: Path) -> None:
    two = [{"src": "a.en", "tgt": "a.de", "tag": "<2de>"},
           {"src": "a.de", "tgt": "a.en", "tag": "<2en>"}]
    r = recipe_from_dict(_with(**{"data.train": two, "data.valid": two, "data.tag": "<2de>",
                                  "data.spm.user_symbols": ["<x>", "<2en>"]}),
                         source="r.yaml", base=tmp_path)
    assert r.data.tags() == ["<2de>", "<2en>"]
    assert r.data.reserved_symbols() == ("<x>", "<2en>", "<2de>")
    assert recipe_from_yaml_text(dump_recipe(r), source="saved") == r
    message = _error(_with(**{"data.train": two, "data.valid": {"src": "v", "tgt": "w",
                                                                 "tag": "<2fr>"},
                              "data.tag": "<2it>", "data.spm.user_symbols": ["a b", "c", "c"]}))
    for part in ("data.valid.tag: '<2fr>' tags no training corpus; expected one of <2de>, <2en>",
                 "data.tag: '<2it>' tags no training corpus",
                 "data.spm.user_symbols[0]: expected a string without spaces, got 'a b'",
                 "data.spm.user_symbols: a symbol is listed twice"):
        assert part in message, message
    aligned = [{"src": "a.en", "tgt": "a.de", "align": "a.al", "tag": "<2de>"}]
    assert "data.train[0].tag: a corpus with word alignments (align) cannot have a tag" in \
        _error(_with(**{"data.train": aligned}))


def test_a_data_section_without_tags_hashes_as_before(tmp_path: Path) -> None:
    from mtkit.config import recipe_to_dict
    from mtkit.data.manifest import without_unset

    r = recipe_from_dict(_with(), source="r.yaml", base=tmp_path)
    d = without_unset(recipe_to_dict(r.data))
    assert "tag" not in d and "user_symbols" not in d["spm"]
    assert all("tag" not in c for c in [d["train"], d["valid"]] if isinstance(c, dict))
