"""Shared fixtures: seeds, the toy recipe and its prepared run, the real Multi30k mirror.

The tiers: unit/<package>/ (one package of mtkit each), integration/ (the commands on the toy
run, faults, GPU), system/ (learning tests, marked slow: `make test-slow`), golden/ (golden
values and a stored format-1 run); tests/helpers.py holds what several tiers share.

Real-data fixtures read ``$MTKIT_DATA_MIRROR`` (default: ``../shared/data/multi30k`` beside the
repository) and skip cleanly when the files are not there. Prepared run directories are
session-scoped and shared: tests must not modify them (copy them first if they need to).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from mtkit.config import Recipe, load_recipe
from mtkit.data.prep import PrepReport, prepare
from tests.helpers import RECIPES, REPO, train_toy

MULTI30K_FILES = ("train.en.gz", "train.de.gz", "val.en.gz", "val.de.gz",
                  "test_2016_flickr.en.gz", "test_2016_flickr.de.gz")


@pytest.fixture(autouse=True)
def _seeded() -> None:
    """Every test starts from the same random state."""
    import torch

    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never write into the user's download cache."""
    monkeypatch.setenv("MTKIT_CACHE", str(tmp_path_factory.getbasetemp() / "mtkit-cache"))


@pytest.fixture(scope="session")
def mirror() -> Path:
    """The folder holding the real Multi30k files; skips the test when it is absent."""
    env = os.environ.get("MTKIT_DATA_MIRROR")
    path = Path(env) if env else REPO.parent / "shared" / "data" / "multi30k"
    missing = [f for f in MULTI30K_FILES if not (path / f).is_file()]
    if missing:
        pytest.skip(f"Multi30k mirror {path} lacks {', '.join(missing)}; set MTKIT_DATA_MIRROR")
    return path


@pytest.fixture(scope="session")
def toy_recipe_path() -> Path:
    return RECIPES / "toy.yaml"


@pytest.fixture(scope="session")
def toy_recipe(toy_recipe_path: Path) -> Recipe:
    return load_recipe(toy_recipe_path)


@pytest.fixture(scope="session")
def toy_run(toy_recipe: Recipe, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory with the toy recipe prepared (data/ and recipe.yaml). Read-only."""
    run_dir = tmp_path_factory.mktemp("toy-run")
    prepare(toy_recipe, run_dir)
    return run_dir


@pytest.fixture(scope="session")
def multi30k_run(mirror: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> tuple[Recipe, Path, PrepReport]:
    """recipes/en-de.yaml as shipped (8k joint unigram), prepared from the mirror. Read-only."""
    recipe = load_recipe(RECIPES / "en-de.yaml")
    run_dir = tmp_path_factory.mktemp("multi30k-run")
    return recipe, run_dir, prepare(recipe, run_dir, mirror=mirror)


@pytest.fixture(scope="session")
def multi30k_strict_run(mirror: Path, tmp_path_factory: pytest.TempPathFactory
                        ) -> tuple[Recipe, Path, PrepReport]:
    """Multi30k with a small BPE vocabulary and strict cleaning, so every rule drops pairs."""
    recipe = load_recipe(RECIPES / "en-de.yaml", [
        "data.spm.vocab_size=1000", "data.spm.model_type=bpe", "data.clean.max_len=25",
        "data.clean.min_len=4", "data.clean.max_ratio=1.5", "data.clean.dedup=true"])
    run_dir = tmp_path_factory.mktemp("multi30k-strict")
    return recipe, run_dir, prepare(recipe, run_dir, mirror=mirror)


@pytest.fixture(scope="session")
def toy_model(toy_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory with the toy Transformer trained for 400 updates (one validation), which
    reverses most test sentences exactly. Read-only: copy it before writing into it."""
    return train_toy(toy_run, tmp_path_factory.mktemp("toy-model") / "run",
                     ["train.max_updates=400", "train.valid_every=400"])


@pytest.fixture
def one_thread():
    """Tiny models are dominated by per-op overhead: a second thread buys little, and when the
    two cores are shared with other jobs it collapses (measured on the reversal GRU: 28 ms per
    update with one thread, 254 ms with two)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def terminal_signals():
    """Signals as under a terminal for the test, whatever the suite inherited
    (tests/helpers.py:terminal_signals)."""
    from tests.helpers import terminal_signals

    with terminal_signals():
        yield


@pytest.fixture(scope="session")
def two_way(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """recipes/toy-two-way.yaml (reverse with <rev>, copy with <copy>) prepared and trained
    for 600 updates (about 20 s): a model of two directions chosen by a language tag.
    Read-only."""
    import io

    from rich.console import Console

    from mtkit.train.session import train

    run = tmp_path_factory.mktemp("two-way") / "run"
    recipe = load_recipe(RECIPES / "toy-two-way.yaml",
                         ["train.max_time=null", "train.max_updates=600",
                          "train.valid_every=600"])
    prepare(recipe, run)
    train(recipe, run, console=Console(file=io.StringIO()))
    return run


@pytest.fixture(scope="session")
def lang_runs(toy_run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two toy runs labelled as different languages, en -> de and de -> fr (both the toy's
    reversal, 100 updates each from other seeds, so that their outputs differ; about 5 s
    each): what routing, pivoting and detection are tested on. Read-only."""
    base = tmp_path_factory.mktemp("lang-runs")
    return {f"{a}-{b}": train_toy(toy_run, base / f"{a}-{b}", [
        "train.max_updates=100", "train.valid_every=100", f"name=toy-{a}-{b}",
        f"data.src_lang={a}", f"data.tgt_lang={b}", f"train.seed={seed}"])
        for a, b, seed in (("en", "de", 1), ("de", "fr", 2))}
