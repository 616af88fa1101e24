"""The sentencepiece adapter's process-level settings."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import REPO, default_signals


@functools.cache
def _sentencepiece_loads_libgomp() -> bool:
    """Whether importing sentencepiece itself (not the module under test) maps a libgomp;
    sentencepiece 0.2.2 on a GPU machine's image did not: there is no OpenMP wait to set."""
    code = ("import sentencepiece; "
            "print(any('libgomp' in line for line in open('/proc/self/maps')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return out.stdout.strip() == "True"


def _import_spm_module(**env: str) -> subprocess.CompletedProcess:
    """Import mtkit.data.spm in a fresh interpreter (libgomp reads its settings once, when
    loaded) with libgomp's display of its settings on; report whether the variable leaked."""
    if not os.path.exists("/proc/self/maps"):
        pytest.skip("needs /proc/self/maps to see whether sentencepiece loads libgomp")
    if not _sentencepiece_loads_libgomp():
        pytest.skip("this sentencepiece build loads no libgomp: no OpenMP wait to set")
    code = "import os, mtkit.data.spm; print(os.environ.get('OMP_WAIT_POLICY'))"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, check=True, env={**base, "OMP_DISPLAY_ENV": "verbose", **env})


def test_sentencepiece_openmp_threads_wait_passively_and_the_setting_does_not_leak() -> None:
    """Spinning OpenMP threads kept a core busy during the trainer's single-threaded seed
    extraction; passive waiting (spin count 0) is set for sentencepiece's libgomp only."""
    out = _import_spm_module()
    assert "GOMP_SPINCOUNT = '0'" in out.stderr
    assert out.stdout.strip() == "None"  # torch's OpenMP, loaded later, keeps its default


def test_a_wait_policy_the_user_set_is_kept() -> None:
    out = _import_spm_module(OMP_WAIT_POLICY="active")
    assert "OMP_WAIT_POLICY = 'ACTIVE'" in out.stderr and out.stdout.strip() == "active"


@pytest.mark.parametrize(("field", "value", "said"), [
    ("character_coverage", 0.5, "data.spm.character_coverage: sentencepiece refuses 0.5 (it "
     "needs character_coverage >= 0.98"),
    ("input_sentence_size", 50, "data.spm.input_sentence_size: sentencepiece refuses 50 (it "
     "needs input_sentence_size <= 0 ||"),
])
def test_sentencepiece_limits_name_the_recipe_key(field, value, said) -> None:
    """Its own check was the message: 'INTERNAL: src/trainer_interface.cc(94) [...]'. (The
    limits are sentencepiece's version's, so the recipe does not fix them: a run trained with
    another version keeps loading.)"""
    import dataclasses

    from mtkit.config import SpmConfig
    from mtkit.data.spm import train_spm
    from mtkit.errors import ConfigError

    cfg = dataclasses.replace(SpmConfig(vocab_size=30), **{field: value})
    with pytest.raises(ConfigError) as e:
        train_spm([f"hello world {i} abc" for i in range(200)], cfg)
    assert str(e.value).startswith(said), str(e.value)


_SPM_LONG = """
import hashlib
from mtkit.config import SpmConfig
from mtkit.data import spm as adapter

class Trainer:  # a long call into C that releases Python's lock, as sentencepiece's does
    @staticmethod
    def train(**kwargs):
        hashlib.pbkdf2_hmac("sha256", b"x", b"y", 100_000_000)  # ~50 s

adapter.spm.SentencePieceTrainer = Trainer
print("start", flush=True)
adapter.train_spm(["a b"], SpmConfig(vocab_size=16))
print("trained", flush=True)
"""


def test_ctrl_c_stops_sentencepiece_training_at_once():
    """Python runs signal handlers between bytecodes of the main thread: a Ctrl-C during
    sentencepiece's training (minutes on a 2M sample) waited for all of it."""
    proc = subprocess.Popen([sys.executable, "-c", _SPM_LONG], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
    try:
        assert proc.stdout.readline().strip() == "start"
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        sent = time.perf_counter()
        out, err = proc.communicate(timeout=60)
        waited = time.perf_counter() - sent
    finally:
        proc.kill()
    assert "trained" not in out and "KeyboardInterrupt" in err, (out, err)
    # at once: well within the fake training's ~50 s, with room for busy cores
    assert proc.returncode == -signal.SIGINT and waited < 15.0, (proc.returncode, waited)
