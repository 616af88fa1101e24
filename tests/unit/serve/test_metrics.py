"""mtkit.serve.metrics: the exposition leaves out `_created` series, and importing the module
leaves prometheus_client's process-wide switch alone."""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import mtkit.serve.metrics as m
from prometheus_client import CollectorRegistry, Counter, generate_latest
def created():
    r = CollectorRegistry()
    Counter("probe", "a probe", registry=r).inc()
    return b"probe_created" in generate_latest(r)
before = created()
body, _ = m.ServerMetrics(lambda: 0, lambda: 0).text()
print(before, b"_created" in body)
"""


def test_created_series_are_off_once_a_server_makes_its_metrics_not_on_import() -> None:
    # a fresh process: the switch is global, and other tests may have flipped it already
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["True", "False"]
