"""Helpers shared by the test tiers: tiny models, synthetic batches, running the CLI.

Fixtures (seeds, the toy recipe and its prepared and trained runs, the Multi30k mirror) are in
conftest.py; the short training loop of the learning tests is tests/system/synthetic.py.
"""

from __future__ import annotations

import subprocess
import sys

import torch
from typer.testing import CliRunner

from mtkit.config import ModelConfig
from mtkit.data.batch import Batch, collate
from mtkit.models.base import Translator
from mtkit.models.build import build_model


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


def run_cli(*args: object, input: str | bytes | None = None, env: dict[str, str] | None = None):
    """`mtkit ARGS` in this process (typer's runner): exit_code, stdout, stderr separately."""
    from mtkit.cli import app

    return CliRunner().invoke(app, [str(a) for a in args], input=input, env=env)


def run_mtkit(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """`python -m mtkit ARGS` in a fresh process (the console script's own error handling)."""
    return subprocess.run([sys.executable, "-m", "mtkit", *args], capture_output=True,
                          text=True, timeout=timeout)
