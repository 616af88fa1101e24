"""Helpers shared by the test tiers: tiny models, synthetic batches, running the CLI, a
`mtkit serve` process.

The repository's paths (REPO, RECIPES) and train_toy are here for every test module to import;
fixtures (seeds, the toy recipe and its prepared and trained runs, the Multi30k mirror) are in
conftest.py; the short training loop of the learning tests is tests/system/synthetic.py.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from typer.testing import CliRunner

from mtkit.config import ModelConfig, load_recipe
from mtkit.data.batch import Batch, collate
from mtkit.models.base import Translator
from mtkit.models.build import build_model

REPO = Path(__file__).resolve().parents[1]
RECIPES = REPO / "recipes"


def tiny_model(cfg: ModelConfig, src_vocab: int, tgt_vocab: int | None = None, *,
               seed: int = 0, eval: bool = True) -> Translator:
    """`build_model` from a fixed seed (tgt_vocab defaults to src_vocab), in eval mode."""
    torch.manual_seed(seed)
    model = build_model(cfg, src_vocab, src_vocab if tgt_vocab is None else tgt_vocab)
    return model.eval() if eval else model


def reversal_batch(n: int, vocab: int, g: torch.Generator, *, lo: int = 3,
                   hi: int = 12) -> Batch:
    """n random sentences of lo..hi ids (4..vocab-1, so no special id) and, as targets, each
    sentence reversed: the copy-like task whose right answer and alignment are known."""
    lens = torch.randint(lo, hi + 1, (n,), generator=g).tolist()
    src = [torch.randint(4, vocab, (k,), generator=g).tolist() for k in lens]
    return collate(src, [s[::-1] for s in src], range(n))


SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def default_signals() -> None:
    """`preexec_fn` of a process a test signals: SIGINT, SIGTERM and SIGHUP take their default
    action, as under a terminal, however the suite was started (a background job of a script
    starts with SIGINT ignored, `nohup` with SIGHUP ignored, and an ignored signal stays
    ignored in every child)."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


@contextmanager
def terminal_signals() -> Iterator[None]:
    """This process's SIGINT, SIGTERM and SIGHUP as Python sets them up under a terminal
    (Ctrl-C raises KeyboardInterrupt, the others their default action) for the block, then
    as they were."""
    saved = {sig: signal.getsignal(sig) for sig in SIGNALS}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def wait_for_training(run, proc: subprocess.Popen, timeout: float = 180) -> None:
    """Wait until the training `proc` into `run` has logged an update to metrics.jsonl (or has
    ended): the point where a signal meets a run under way."""
    deadline = time.monotonic() + timeout
    metrics = run / "metrics.jsonl"
    while not (metrics.exists() and '"train"' in metrics.read_text()) and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)


class TrainClock:
    """The training loop's clock, advanced only by the test: `per_update` seconds an update
    (a number, or a function of the update's number), and what the test adds to `now`, so
    that a time budget's verdict does not depend on how fast the machine runs the updates.
    `install` it with the test's monkeypatch."""

    def __init__(self, per_update: float | Callable[[int], float]) -> None:
        self.now = 0.0
        self.per_update = per_update if callable(per_update) else lambda _: per_update

    def monotonic(self) -> float:
        return self.now

    def install(self, monkeypatch) -> None:
        from mtkit.train import loop

        after = loop.Trainer._after_update

        def timed(trainer):
            self.now += self.per_update(trainer.p.update)
            return after(trainer)

        monkeypatch.setattr(loop, "time", self)  # the loop reads only time.monotonic
        monkeypatch.setattr(loop.Trainer, "_after_update", timed)


def run_cli(*args: object, input: str | bytes | None = None, env: dict[str, str] | None = None):
    """`mtkit ARGS` in this process (typer's runner): exit_code, stdout, stderr separately.
    The arguments go through what the console script does to them first (`train --resume`'s
    optional value)."""
    from mtkit.cli import _optional_resume, app

    return CliRunner().invoke(app, _optional_resume([str(a) for a in args]), input=input,
                              env=env)


def run_mtkit(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """`python -m mtkit ARGS` in a fresh process (the console script's own error handling)."""
    return subprocess.run([sys.executable, "-m", "mtkit", *args], capture_output=True,
                          text=True, timeout=timeout)


class Server:
    """A `mtkit serve` process and a client for it."""

    def __init__(self, proc: subprocess.Popen, url: str, log: list[str]) -> None:
        self.proc, self.url, self.log = proc, url, log
        import httpx

        self.client = httpx.Client(base_url=url, timeout=60)

    def logged(self, pattern: str, timeout: float = 60) -> bool:
        """Whether a line of the server's log matches `pattern`, waiting up to `timeout`
        seconds: a thread reads its stderr, so a line the server wrote may not be here yet."""
        deadline = time.monotonic() + timeout
        while not any(re.match(pattern, line) for line in list(self.log)):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def post(self, path: str, body: object = None, **kwargs):
        return self.client.post(path, json=body, **kwargs) if body is not None else (
            self.client.post(path, **kwargs))


@contextmanager
def serving(*args: object, launch: tuple[str, ...] = ("-m", "mtkit")) -> Iterator[Server]:
    """`mtkit serve ARGS --port 0` until the block ends (then SIGTERM, and it must exit 0);
    `launch`: how python starts mtkit (`-c CODE` for a script that runs its CLI)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, *launch, "serve", *map(str, args),
                             "--port", "0", "--threads", "1"], stderr=subprocess.PIPE,
                            text=True, env=env)
    log: list[str] = []
    url = None
    for line in proc.stderr:  # the first line says where it listens
        log.append(line)
        if m := re.search(r"at (http://\S+) \(Ctrl-C", line):
            url = m.group(1)
            break
    assert url is not None, "".join(log)
    threading.Thread(target=lambda: log.extend(proc.stderr), daemon=True).start()
    server = Server(proc, url, log)
    try:
        deadline = time.monotonic() + 60
        while server.client.get("/ready").status_code != 200:
            assert time.monotonic() < deadline and proc.poll() is None, "".join(log)
            time.sleep(0.05)
        yield server
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, "".join(log)


@contextmanager
def headless_chromium() -> Iterator[object]:
    """A selenium driver of Debian's headless chromium (the caller skips where
    `shutil.which("chromium")` or `"chromedriver"` finds none)."""
    import shutil

    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900"):
        options.add_argument(arg)
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def train_toy(toy_run: Path, run: Path, overrides: list[str]) -> Path:
    """Train the toy recipe (with `overrides`) into `run`, reusing toy_run's prepared data."""
    import io
    import shutil

    from rich.console import Console

    from mtkit.train.session import train

    shutil.copytree(toy_run, run)
    recipe = load_recipe(RECIPES / "toy.yaml", ["train.max_time=null", *overrides])
    train(recipe, run, console=Console(file=io.StringIO()))
    return run
