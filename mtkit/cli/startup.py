"""A command's start-up without the cyclic garbage collector.

Loading a model imports torch and builds the model: some 250,000 Python objects that live as
long as the process. While they are made, the collector runs again and again and scans all of
them, finding next to nothing (185 objects freed in an `import torch`). With it paused,
`import torch` took 0.1-0.4 s less and `mtkit translate`'s whole start-up 0.3-0.5 s less (of
about 3 s, 2 cores, issue 14). It is switched back on, as it was, when loading ends, also on
an error, so a long run collects as usual."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cyclic garbage collector off; afterwards it is as before."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
