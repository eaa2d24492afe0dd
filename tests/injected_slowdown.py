"""`python tests/injected_slowdown.py run ...`: `bench run` with every backend ~30% slower.

Test-only evidence for the regression check (CPU): after each call the backend keeps the core busy for
30% of that call's own duration, so every case, compute- or memory-bound, costs 1.3x its normal time. A
sweep made this way should be flagged as regressed against a normal one.
"""

from __future__ import annotations

import dataclasses
import sys
import time

from bench.backends import BACKENDS
from bench.cli import main

EXTRA = 0.3


def slowed(fn):
    def attention_and_more(q, k, v, *, causal, window):
        t0 = time.perf_counter()
        out = fn(q, k, v, causal=causal, window=window)
        until = time.perf_counter() + EXTRA * (time.perf_counter() - t0)
        while time.perf_counter() < until:  # extra work in proportion to the call's own
            pass
        return out

    return attention_and_more


if __name__ == "__main__":
    for name, backend in list(BACKENDS.items()):
        BACKENDS[name] = dataclasses.replace(backend, fn=slowed(backend.fn))
    sys.exit(main(sys.argv[1:]))
