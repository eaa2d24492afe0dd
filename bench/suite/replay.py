"""pytest-benchmark's timer during a replay of rounds our own timers measured.

The engine measures each case with its own timers (adaptive rounds, CUDA events, L2 flush), then hands
the per-round times to the pytest-benchmark fixture through `benchmark.pedantic(noop, rounds=n)` with
this clock (`--benchmark-timer=bench.suite.replay.clock`). In pedantic mode the fixture reads the timer
exactly twice per round, so each round's duration is exactly one recorded sample: the statistics
pytest-benchmark stores are the same measurement, not a second one.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

_pending: deque[float] = deque()
_round_open = False


def clock() -> float:
    global _round_open
    if not _pending:
        return time.perf_counter()
    if not _round_open:
        _round_open = True
        return 0.0
    _round_open = False
    return _pending.popleft()


@contextmanager
def replaying(samples: list[float]) -> Iterator[None]:
    global _round_open
    _pending.clear()
    _pending.extend(samples)
    _round_open = False
    try:
        yield
    finally:
        _pending.clear()
        _round_open = False


def noop() -> None:
    return None
