"""`make demo`'s script, bench/demo.sh, on the toy model: its steps after training (prep up to
date, score --run, the five translations, align with a heatmap) run as written. A run
directory that holds a model is not trained again, so the script runs in seconds here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers import RECIPES, REPO


def test_demo_script_runs_its_steps_on_a_trained_run(toy_model: Path, tmp_path: Path):
    run = tmp_path / "run"
    shutil.copytree(toy_model, run)
    env = {**os.environ, "RECIPE": str(RECIPES / "toy.yaml"), "RUN": str(run), "SPLIT": "test",
           "PY": sys.executable, "MTKIT": f"{sys.executable} -m mtkit"}
    out = subprocess.run(["bash", str(REPO / "bench" / "demo.sh")], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "not training again" in out.stderr
    assert "Five translations of test" in out.stdout
    heatmap = run / "demo" / "heatmap" / "align-0000.png"
    assert f"heatmap: {heatmap}" in out.stdout
    assert heatmap.stat().st_size > 0
