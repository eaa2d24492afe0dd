"""`python tests/injected_slowdown.py run ...`: `bench run` with every backend doing ~30% more work.

Test-only evidence for the regression check: each call also runs the same backend on the first 30% of
the query heads (rounded), so a sweep made this way should be flagged as regressed against a normal one.
"""

from __future__ import annotations

import dataclasses
import sys

from bench.backends import BACKENDS
from bench.cli import main

EXTRA = 0.3


def slowed(fn):
    def attention_and_more(q, k, v, *, causal, window):
        out = fn(q, k, v, causal=causal, window=window)
        m = max(1, round(EXTRA * q.shape[1]))
        fn(q[:, :m], k[:, :1], v[:, :1], causal=causal, window=window)  # extra work, result dropped
        return out

    return attention_and_more


if __name__ == "__main__":
    for name, backend in list(BACKENDS.items()):
        BACKENDS[name] = dataclasses.replace(backend, fn=slowed(backend.fn))
    sys.exit(main(sys.argv[1:]))
