"""The README's command lines that name `make demo`'s run (runs/en-de-multi30k on either
machine) run as written, in README order, on a toy run put in its place.

A line is taken from a fenced block (with its continuation lines) or an inline code span when
it runs `mtkit` on the demo's run; a line that also needs another run (`--reverse
runs/de-en-multi30k`) is left out, as `make demo` makes one run, and so is `mtkit serve`, a
server that runs until it is stopped (tests/integration/test_serve.py starts one). The files
the lines read (test.en, test.de, src.txt, tgt.txt, gold.align) are the toy's test split and
its true links; the toy's test split, `test`, stands for Multi30k's test2016."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mtkit.data.store import text_path
from mtkit.run import data_dir
from tests.helpers import REPO, train_toy

DEMO_RUN = "runs/en-de-multi30k"
NAMES_DEMO_RUN = re.compile(re.escape(DEMO_RUN) + r"(?![\w-])")
OTHER_RUN = re.compile(r"runs/(?!en-de-multi30k(?![\w-]))[\w.-]+")


def readme_demo_commands(text: str) -> list[str]:
    """The command lines of README `text` that run mtkit on the demo's run, in order, without
    their comments."""
    lines, fenced = [], False
    for raw in re.sub(r"\\\n\s*", "", text).splitlines():  # continuation lines joined
        if raw.startswith("```"):
            fenced = not fenced
            continue
        spans = [raw] if fenced else re.findall(r"`(mtkit [^`]+)`", raw)
        lines += [re.sub(r"\s+#.*$", "", span).strip() for span in spans]
    return [line for line in lines if re.search(r"(^|\| )mtkit ", line)
            and NAMES_DEMO_RUN.search(line) and not OTHER_RUN.search(line)
            and not line.startswith("mtkit serve ")]


@pytest.mark.parametrize("gpu", [False, True])
def test_make_demo_names_its_run_the_same_on_either_machine(gpu: bool, tmp_path: Path) -> None:
    """bench/demo.sh up to its first mtkit command, with a python that answers whether CUDA
    is there as asked and an mtkit that records its arguments and stops the script."""
    fake_py, fake_mtkit, said = tmp_path / "python", tmp_path / "mtkit", tmp_path / "said"
    fake_py.write_text(f'#!/bin/bash\ncase "$*" in *cuda.is_available*) exit {0 if gpu else 1};;'
                       f'\nesac\nexec {sys.executable} "$@"\n')
    fake_mtkit.write_text(f'#!/bin/bash\necho "$@" > {said}\nexit 3\n')
    for f in (fake_py, fake_mtkit):
        f.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("RECIPE", "RUN", "DEMO_TIME")}
    out = subprocess.run(["bash", str(REPO / "bench" / "demo.sh")], cwd=tmp_path,
                         env={**env, "PY": str(fake_py), "MTKIT": str(fake_mtkit)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 3, out.stderr
    recipe = "recipes/en-de.yaml" if gpu else "recipes/en-de-cpu.yaml"
    assert said.read_text().split() == ["prep", recipe, "--run-dir", DEMO_RUN]


def test_readme_lines_are_found() -> None:
    commands = readme_demo_commands((REPO / "README.md").read_text(encoding="utf-8"))
    kinds = {re.search(r"mtkit (\w+)", c)[1] for c in commands}
    assert kinds >= {"translate", "export", "score", "align", "average"}, commands
    assert not any("de-en-multi30k" in c for c in commands)


@pytest.fixture(scope="module")
def demo_folder(toy_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder as `make demo` leaves it: the run (the toy, with two numbered checkpoints
    under train.keep_last 3, as the CPU demo's ten minutes write) at runs/en-de-multi30k, and
    the files the README's lines read."""
    root = tmp_path_factory.mktemp("readme")
    run = train_toy(toy_run, root / DEMO_RUN, ["train.max_updates=40", "train.valid_every=20",
                                               "train.keep_last=3"])
    src = text_path(data_dir(run), "test", "src")
    tgt = text_path(data_dir(run), "test", "tgt")
    for name, path in (("test.en", src), ("src.txt", src), ("test.de", tgt), ("tgt.txt", tgt)):
        shutil.copyfile(path, root / name)
    # the toy's target is its source reversed: word i links to word n-1-i
    gold = [" ".join(f"{i}-{len(w) - 1 - i}" for i in range(len(w)))
            for w in (line.split() for line in src.read_text().splitlines())]
    (root / "gold.align").write_text("\n".join(gold) + "\n")
    _documents(root, src.read_text().splitlines()[:4])
    return root


def _documents(root: Path, lines: list[str]) -> None:
    """The documents the README's "Documents and markup" lines translate, made of `lines`."""
    a, b, c, d = lines
    (root / "page.html").write_text(f"<html><body><p>{a} <b>{b}</b></p><p>{c}</p></body>"
                                    "</html>\n")
    (root / "notes.md").write_text(f"# {a}\n\n{b} *{c}* `code`\n")
    (root / "talk.srt").write_text(f"1\n00:00:01,000 --> 00:00:02,000\n{a}\n\n"
                                   f"2\n00:00:02,000 --> 00:00:03,000\n{b}\n")
    (root / "talk.vtt").write_text(f"WEBVTT\n\n00:01.000 --> 00:02.000\n{c}\n")
    (root / "app.po").write_text(f'msgid ""\nmsgstr ""\n\nmsgid "{a} %s"\nmsgstr ""\n')
    (root / "app.xlf").write_text(
        '<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2"><file '
        'source-language="en" datatype="plaintext" original="x"><body><trans-unit id="1">'
        f"<source>{d}</source></trans-unit></body></file></xliff>\n")
    (root / "text.txt").write_text(f"{a}\n{b}\n\n{c}\n")
    import docx

    doc = docx.Document()
    doc.add_paragraph(d)
    doc.save(root / "report.docx")


def test_readme_lines_on_the_demos_run_run_as_written(demo_folder: Path) -> None:
    commands = readme_demo_commands((REPO / "README.md").read_text(encoding="utf-8"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
           f"{os.environ.get('PATH', '')}", "OMP_NUM_THREADS": "1"}
    for command in commands:
        as_run = command.replace("--split test2016", "--split test")
        out = subprocess.run(["bash", "-c", f"set -o pipefail; {as_run}"], cwd=demo_folder,
                             env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, (command, out.stderr[-2000:])


# --------------------------------------------------------------------------- every block

def readme_blocks(text: str) -> list[tuple[str, str]]:
    """The README's fenced blocks: (info string, body), in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)


# How each fenced block of the README is kept true, by a pattern of its first line(s). `demo`:
# its mtkit lines run as written on the demo's run (above); `run`: run as written in a
# scratch folder (`mtkit train` lines with TINY added), below; `python`: run in the demo's
# folder; `flags`: its mtkit lines name real commands, flags and recipe keys (below: a block
# that trains Multi30k for minutes, needs another machine, a network or a running server);
# `error`: the error it shows is the one mtkit gives; `listing`: what it lists exists;
# `yaml`: it loads as a recipe's data section; `external`: no mtkit command line, but another
# program's use of mtkit's output, whose behaviour its own test checks: the server's
# curl and httpx requests (tests/integration/test_serve*.py, test_serve_documents.py), the
# Hugging Face export read by transformers (test_export_hf.py), `load_many` over runs of
# other directions (test_load_many.py), the proxy's settings
# (test_serve_edges.py: the limits they back up). Every block's `pip install 'mtkit[...]'`
# names extras pyproject.toml has.
BLOCKS: list[tuple[str, str]] = [
    (r"mtkit prep RECIPE +raw text", "listing"),
    (r"make demo +#", "flags"),
    (r"mtkit train recipes/en-de.yaml --set train.lr=3e-4", "flags"),
    (r"mtkit: error: 2 problems in recipe:", "error"),
    (r"data:", "yaml"),
    (r"MTKIT_DATA_MIRROR=\S+ mtkit prep recipes/en-de.yaml$", "flags"),
    (r"mtkit train recipes/en-de.yaml +# prep if needed", "flags"),
    (r"# on every node", "flags"),
    (r"mtkit train recipes/en-de-finetune.yaml --init-from", "flags"),
    (r"mtkit translate runs/en-de-multi30k -i test.en -o hyp.de --beam 5$", "demo"),
    (r"mtkit translate runs/en-de-multi30k -i test.en -o hyp.de --precision int8", "demo"),
    (r"head -3 test.en \| mtkit translate runs/en-de-multi30k --prefix", "demo"),
    (r"mtkit translate runs/en-de-multi30k -i test.en --terms", "demo"),
    (r"mtkit translate runs/en-de-multi30k -i page.html", "demo"),
    (r"page = tr.translate_document", "python"),
    (r"curl -s localhost:8000/translate ", "external"),
    (r"pip install 'mtkit\[ctranslate2\]'", "demo"),
    (r"mtkit export runs/en-de-multi30k --engine hf", "demo"),
    (r"from transformers import", "external"),
    (r"import mtkit\n\ntr = mtkit.load", "python"),
    (r"import mtkit\n\nmodels = mtkit.load_many", "external"),
    (r"pip install 'mtkit\[serve\]'", "flags"),
    (r"curl -s localhost:8000/v1/translate", "external"),
    (r"import httpx", "external"),
    (r"limit_conn_zone ", "external"),
    (r"pip install 'mtkit\[serve,detect\]'", "flags"),
    (r"mtkit score -r test.de sys1.de", "demo"),
    (r"mtkit tune-length runs/en-de-multi30k", "demo"),
    (r"mtkit align runs/en-de-multi30k -s test.en -t test.de --print$", "demo"),
    (r"mtkit train recipes/toy.yaml --run-dir runs/toy-guided", "run"),
    (r"pip install eflomal", "flags"),
    (r"MTKIT_DATA_MIRROR=\S+ mtkit train recipes/en-de.yaml --run-dir runs/en-de$", "flags"),
    (r"mtkit train recipes/en-de-rnn-hard.yaml", "flags"),
    (r"mtkit train recipes/toy-two-way.yaml", "run"),
    (r"mtkit import Helsinki-NLP/opus-mt-en-de", "flags"),
    (r"mtkit train recipes/opus-mt-en-de-finetune.yaml", "flags"),
    (r"mtkit export runs/opus-mt-en-de-finetune", "flags"),
    (r"mtkit/errors.py", "listing"),
]
TINY = ["--set", "train.max_updates=4", "--set", "train.max_time=null", "--set",
        "train.valid_every=2", "--threads", "1"]


def _blocks_of(kind: str) -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return [body for _, body in readme_blocks(text) if _kind(body) == kind]


def _kind(body: str) -> str:
    kinds = [kind for pattern, kind in BLOCKS if re.match(pattern, body, re.M)]
    assert len(kinds) == 1, (body.splitlines()[0], kinds)
    return kinds[0]


def test_every_readme_block_is_kept_true_by_a_test() -> None:
    """A block added to the README is classified here, and a pattern that no longer finds its
    block fails: so every block is covered by a check of its kind."""
    blocks = readme_blocks((REPO / "README.md").read_text(encoding="utf-8"))
    assert len(blocks) >= 39
    bodies = [body for _, body in blocks]
    for body in bodies:
        _kind(body)
    for pattern, _ in BLOCKS:
        assert any(re.match(pattern, b, re.M) for b in bodies), f"no README block for {pattern!r}"
    demo = set(readme_demo_commands((REPO / "README.md").read_text(encoding="utf-8")))
    for body in _blocks_of("demo"):
        lines = readme_demo_commands(f"```\n{body}```\n")
        assert lines and set(lines) <= demo, body


def _mtkit_lines(body: str) -> list[list[str]]:
    """The arguments of each mtkit command of a block (continuation lines joined, comments
    and what comes before `mtkit` dropped)."""
    import shlex

    out = []
    for line in re.sub(r"\\\n\s*", "", body).splitlines():
        line = re.sub(r"\s+#.*$", "", line)
        found = re.search(r"(?:^|\| |-m |\S+=\S+ )mtkit (\w[\w-]*)(.*)$", line)
        if found and not line.startswith("mtkit/") and not line.startswith("mtkit: "):
            words = shlex.split(re.sub(r"<\([^)]*\)", "FILE", found[2]))
            out.append([found[1], *words[:words.index("|") if "|" in words else None]])
    return out


def test_every_readme_mtkit_line_names_real_commands_flags_and_recipe_keys() -> None:
    """Each mtkit line of every block (those that cannot run here too): its command exists,
    each flag is in the command's --help, and a recipe it trains or prepares loads with its
    --set overrides."""
    from mtkit.config import load_recipe
    from tests.helpers import run_cli

    text = (REPO / "README.md").read_text(encoding="utf-8")
    helps: dict[str, str] = {}
    checked = 0
    for body in (b for _, b in readme_blocks(text) if _kind(b) not in ("listing", "error")):
        for args in _mtkit_lines(body):
            command = args[0]
            if command not in helps:
                res = run_cli(command, "--help", env={"COLUMNS": "200"})
                assert res.exit_code == 0, (command, res.output)
                helps[command] = res.output
            for flag in (a.split("=")[0] for a in args[1:] if re.match(r"--?[a-z]", a)):
                assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", helps[command]), (
                    command, flag)
            if command in ("train", "prep") and args[1].endswith(".yaml"):
                sets = [v.replace("$PWD", str(REPO)) for k, v in zip(args, args[1:],
                                                                      strict=False)
                        if k == "--set"]
                load_recipe(REPO / args[1], sets)
            checked += 1
    assert checked >= 60, checked
    project = (REPO / "pyproject.toml").read_text()  # (tomllib: Python 3.11 on)
    section = project.split("[project.optional-dependencies]")[1].split("\n[")[0]
    extras = set(re.findall(r"^([\w-]+) = \[", section, re.M))
    wanted = {e for group in re.findall(r"pip install 'mtkit\[([\w,]+)\]'", text)
              for e in group.split(",")}
    assert wanted and wanted <= extras, wanted - extras


def test_readme_blocks_that_run_here_run_as_written(tmp_path: Path) -> None:
    """The `run` blocks in a scratch folder holding the recipes, each `mtkit train` line with
    TINY added (a few updates: what is checked is that the lines work together)."""
    shutil.copytree(REPO / "recipes", tmp_path / "recipes")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
           f"{os.environ.get('PATH', '')}", "OMP_NUM_THREADS": "1"}
    for body in _blocks_of("run"):
        for line in re.sub(r"\\\n\s*", "", body).splitlines():
            line = re.sub(r"\s+#.*$", "", line)
            if line.startswith("mtkit train "):
                line += " " + " ".join(TINY)
            out = subprocess.run(["bash", "-c", f"set -o pipefail; {line}"], cwd=tmp_path,
                                 env=env, capture_output=True, text=True, timeout=300)
            assert out.returncode == 0, (line, out.stderr[-2000:])


def test_readme_python_blocks_run_on_the_demos_run(demo_folder: Path) -> None:
    for body in _blocks_of("python"):
        code = body if body.startswith("import mtkit") else (
            'import mtkit\ntr = mtkit.load("runs/en-de-multi30k")\n' + body)
        out = subprocess.run([sys.executable, "-c", code], cwd=demo_folder,
                             capture_output=True, text=True, timeout=300,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert out.returncode == 0, (body, out.stderr[-2000:])


def test_readme_error_block_is_what_mtkit_says(tmp_path: Path) -> None:
    from tests.helpers import run_cli

    (body,) = _blocks_of("error")
    recipe = tmp_path / "recipes" / "my.yaml"
    recipe.parent.mkdir()
    recipe.write_text((REPO / "recipes" / "toy.yaml").read_text().replace(
        "\n  lr:", "\n  lrr:", 1).replace("arch: transformer", "arch: rnn", 1))
    os.chdir(tmp_path)
    try:
        res = run_cli("train", "recipes/my.yaml", "--set", "model.rnn.cell=lstn")
    finally:
        os.chdir(REPO)
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == body.strip().splitlines()


def test_readme_listings_name_what_exists() -> None:
    from tests.helpers import run_cli

    commands, layout = (_blocks_of("listing") + ["", ""])[:2]
    listed = re.findall(r"^mtkit (\w[\w-]*) ", commands, re.M)
    out = run_cli("--help", env={"COLUMNS": "200"}).output
    assert listed and all(re.search(rf"│ {c} ", out) for c in listed), listed
    paths = re.findall(r"^(\S+)\s", layout, re.M)
    assert len(paths) > 15 and all((REPO / p).exists() for p in paths), [
        p for p in paths if not (REPO / p).exists()]


def test_readme_yaml_blocks_are_data_sections() -> None:
    """Each `data:` block, put in the toy recipe, is a valid recipe (nothing is read)."""
    import yaml

    from mtkit.config import recipe_from_yaml_text

    toy = yaml.safe_load((REPO / "recipes" / "toy.yaml").read_text())
    for body in _blocks_of("yaml"):
        # the README shortens checksums ("d79cfa99..."); the rest is as written
        data = yaml.safe_load(re.sub(r"sha256: [0-9a-f]+\.\.\.", "sha256: " + "a" * 64, body))
        assert set(data) == {"data"}, body
        recipe = {**toy, "data": {**toy["data"], **data["data"]}}
        recipe_from_yaml_text(yaml.safe_dump(recipe), source="README")
