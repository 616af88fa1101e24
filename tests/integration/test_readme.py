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
