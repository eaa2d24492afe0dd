"""What reading and scheduling a trace costs as it grows: `python -m bench.traces.cost [--sizes N,...]`.

Each size: a CSV of that many requests (azure-conv's requests repeated, each copy starting where the last ended,
so the server's load stays the trace's own), written to a temporary folder; then the wall time and the peak of
Python's allocations (tracemalloc) of `replay` on it: reading, scheduling into steps and bucketing, in one pass.
The time should grow with the trace; the memory should not.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from pathlib import Path

from bench.traces.replay import _replay, replay
from bench.traces.requests import NAMED, read_requests


def write_trace(path: Path, n: int) -> None:
    """n requests: azure-conv's, repeated and shifted in time."""
    base = list(read_requests(NAMED["azure-conv"]))
    span = base[-1].arrival_s + 1.0
    with path.open("w") as f:
        f.write("prompt_tokens,output_tokens,arrival_s\n")
        for i in range(n):
            r = base[i % len(base)]
            f.write(f"{r.prompt},{r.output},{r.arrival_s + span * (i // len(base)):.6f}\n")


def measure(n: int, folder: Path) -> tuple[float, float, int]:
    """(seconds, peak MiB of Python allocations, steps) of replaying n requests."""
    path = folder / f"trace-{n}.csv"
    write_trace(path, n)
    _replay.cache_clear()
    tracemalloc.start()
    t0 = time.perf_counter()
    steps = replay(str(path)).steps
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    _replay.cache_clear()
    t0 = time.perf_counter()  # again without tracemalloc, which slows allocation-heavy code
    replay(str(path))
    return min(seconds, time.perf_counter() - t0), peak / 2**20, steps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.traces.cost", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,10000,100000", help="request counts (default 1000,10000,100000)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'requests':>9}  {'steps':>9}  {'seconds':>8}  {'peak MiB':>8}")
        for n in (int(x) for x in args.sizes.split(",")):
            seconds, peak, steps = measure(n, Path(tmp))
            print(f"{n:>9,}  {steps:>9,}  {seconds:>8.2f}  {peak:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
