"""The typed requests that flags become, and the layering rules the package tree keeps."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mtkit.cli.options import DecodeFlags, search_method
from mtkit.config import DecodeConfig
from mtkit.errors import ConfigError

PACKAGE = Path(__file__).resolve().parents[3] / "mtkit"


def test_a_flag_value_overrides_the_recipe_and_is_validated_like_a_recipe_field():
    cfg = DecodeFlags(beam_size=7, alpha=0.6).over(DecodeConfig(beam_size=4, nbest=2))
    assert (cfg.beam_size, cfg.alpha, cfg.nbest) == (7, 0.6, 2)
    with pytest.raises(ConfigError) as e:
        DecodeFlags(beam_size=0, length_penalty="long").over(DecodeConfig())
    lines = str(e.value).splitlines()  # every problem at once, each named by its flag
    assert lines[0].startswith("--beam (decode.beam_size): out of range")
    assert lines[1].startswith("--length-penalty (decode.length_penalty): invalid choice")


def test_a_problem_at_a_field_no_flag_set_is_named_by_the_flag_it_reads_or_its_source():
    # the recipe's nbest 3 does not fit the beam the flag asks for
    with pytest.raises(ConfigError, match=r"^--beam: decode\.nbest: cannot exceed "
                       r"beam_size \(2\)$"):
        DecodeFlags(beam_size=2).over(DecodeConfig(nbest=3))
    # ... nor the recipe's own beam, whatever other flag is given
    with pytest.raises(ConfigError, match=r"^command line: decode\.nbest: cannot exceed "
                       r"beam_size \(2\)$"):
        DecodeFlags(seed=3).over(DecodeConfig(nbest=3, beam_size=2))


def test_flags_the_resolved_decoding_would_ignore_are_named():
    flags = DecodeFlags(top_k=5, seed=3, alpha=0.5)
    cfg = flags.over(DecodeConfig(length_penalty="average"))
    assert flags.ignored(cfg) == [
        "--top-k, --seed: sampling options need --sample (decode.method is beam)",
        "--alpha is the GNMT penalty's exponent, or power's; the length penalty is average"]
    sampled = DecodeFlags(method="sample", top_k=5)
    assert sampled.ignored(sampled.over(DecodeConfig())) == []
    # outside beam search a penalty only rescores; where no score is shown it is ignored,
    # and an --alpha the penalty does not use is named once (it was named twice)
    greedy = DecodeFlags(method="greedy", length_penalty="average", alpha=0.5)
    assert greedy.ignored(greedy.over(DecodeConfig()), unseen_score="align does not show") == [
        "--alpha is the GNMT penalty's exponent, or power's; the length penalty is average",
        "--length-penalty: with greedy search the length penalty changes only the score, "
        "which align does not show"]
    assert greedy.ignored(greedy.over(DecodeConfig())) == [
        "--alpha is the GNMT penalty's exponent, or power's; the length penalty is average"]


def test_search_method_from_flags():
    assert search_method() is None
    assert search_method(beam=4) == "beam"
    assert search_method(greedy=True) == "greedy"
    assert search_method(sample=True) == "sample"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("rule", ["library->cli", "inference->train"])
def test_the_layering_rules_hold(rule):
    """Library modules never import mtkit.cli (only `python -m mtkit` starts it); inference
    never imports mtkit.train."""
    if rule == "library->cli":
        modules = [p for p in PACKAGE.rglob("*.py") if "cli" not in p.relative_to(PACKAGE).parts
                   and p.name != "__main__.py"]
        banned = "mtkit.cli"
    else:
        modules = [*(PACKAGE / "translation").rglob("*.py"), *(PACKAGE / "api").rglob("*.py"),
                   *(PACKAGE / "align").rglob("*.py"),
                   *(PACKAGE / "score").rglob("*.py"), *(PACKAGE / "export").rglob("*.py")]
        banned = "mtkit.train"
    assert len(modules) > 5
    offenders = {str(p.relative_to(PACKAGE)): sorted(n for n in _imports(p)
                                                     if n == banned or n.startswith(banned + "."))
                 for p in modules}
    assert {k: v for k, v in offenders.items() if v} == {}


def _named_options() -> set[str]:
    """The option fields library errors name (`Problem(...)`, `X.about(...)`
    with a literal first argument, and the `others` they mention), outside mtkit/cli."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        if "cli" in path.relative_to(PACKAGE).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called not in ("Problem", "about"):
                continue
            if node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value:
                names.add(node.args[0].value)
            for kw in node.keywords:
                if kw.arg == "others" and isinstance(kw.value, ast.Tuple):
                    names |= {e.value for e in kw.value.elts if isinstance(e, ast.Constant)}
    return names


def test_every_option_a_library_error_names_is_a_flag_of_the_command_line():
    """The library names options by their fields and the CLI says them as flags
    (`flag_of`): a field without a flag of that name would tell a user to pass an option
    that does not exist."""
    import typer.main

    from mtkit.cli import app
    from mtkit.cli.options import flag_of

    group = typer.main.get_command(app)
    flags = {opt for cmd in group.commands.values() for p in cmd.params for opt in p.opts}
    names = _named_options()
    assert {"layer", "kind", "heatmap_dir", "resume", "device"} <= names  # the scan finds them
    assert {n: flag_of(n) for n in names if flag_of(n) not in flags} == {}


def test_errors_keep_their_class_and_name_options_as_fields_through_a_note():
    """`about` makes any error class; `with_note` (a validation that failed after a checkpoint
    was saved) keeps the problems, so the command line still names flags."""
    from mtkit.cli.options import flag_of
    from mtkit.errors import CheckpointError, DataError, OptionError

    option = OptionError.about("layer", "the model has 2 layers", value=3)
    assert isinstance(option, OptionError) and str(option) == "layer 3: the model has 2 layers"
    noted = option.with_note("checkpoint saved")
    assert isinstance(noted, OptionError)
    assert str(noted) == "layer 3: the model has 2 layers; checkpoint saved"
    assert noted.text(flag_of) == "--layer 3: the model has 2 layers; checkpoint saved"
    resume = CheckpointError.about("resume", "nothing to resume").with_note("fix it")
    assert type(resume) is CheckpointError and resume.text(flag_of) == (
        "--resume: nothing to resume; fix it")
    plain = DataError("bad line").with_note("fix it")
    assert type(plain) is DataError and plain.text(flag_of) == str(plain) == "bad line; fix it"


def test_every_decoding_option_is_a_flag_of_translate_with_the_fields_type_and_help():
    """The flags come from DecodeConfig's fields: a field added there is a flag of translate
    (and of align unless it samples), read back as that field."""
    import dataclasses

    import typer.main

    from mtkit.cli import app

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    translate, align = commands["translate"], commands["align"]
    flags = {opt: p for p in translate.params for opt in p.opts}
    align_flags = {opt for p in align.params for opt in p.opts}
    for f in dataclasses.fields(DecodeConfig):
        if f.name == "method":
            continue
        name = DecodeFlags.FLAGS[f.name]
        assert name in flags, name
        assert f.metadata["help"][1:] in flags[name].help and f"decode.{f.name}" in flags[name].help
        assert (name in align_flags) == (f.metadata["kind"] in ("search", "batching")), name
    assert {"--greedy", "--sample"} <= set(flags) and "--sample" not in align_flags
    parsed = DecodeFlags.parsed({"beam_size": 3, "greedy": False, "sample": False, "top_k": None})
    assert parsed.given() == {"method": "beam", "beam_size": 3} and parsed.switches == ()


def test_choice_narrows_to_a_literal_or_names_the_option():
    from typing import Literal

    from mtkit.errors import OptionError, choice

    assert choice("fmt", "a", Literal["a", "b"]) == "a"
    with pytest.raises(OptionError, match=r"^fmt: invalid choice 'c'; expected a or b$"):
        choice("fmt", "c", Literal["a", "b"])
    with pytest.raises(OptionError, match=r"expected one of a, b, c$"):
        choice("fmt", "d", Literal["a", "b", "c"])
