"""What recording one finished case costs as a run grows: `python -m bench.results.record_cost [--sizes N,...]`.

before: the results file rewritten whole after every case (bench.results.write_atomic of the run so far: what the
        store did before the journal); after: one line appended to the journal (bench.results.store.ResultsStore.add).
Each size: a run already holding that many cases (realistic entries: every record field, 30 raw rounds), then the
median wall time of recording a few more. The journal's cost must not grow with the run; the rewrite's does.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import tempfile
import time
from pathlib import Path

from bench.problem.columns import shape_fields
from bench.problem.masks import CAUSAL
from bench.problem.shapes import AttentionShape
from bench.results import Entry, ResultsStore, RunDocument, RunMeta, write_atomic
from bench.results.record import RECORD_FIELDS

STAT_KEYS = ("min", "max", "mean", "stddev", "median", "iqr", "q1", "q3", "ld15iqr", "hd15iqr", "ops", "total")


def entry(i: int, rounds: int = 30) -> Entry:
    """A timed case as the engine files it: pytest-benchmark's entry, our record as extra_info."""
    rng = random.Random(i)
    data = [1e-3 * (1 + rng.uniform(-0.05, 0.05)) for _ in range(rounds)]
    record = {name: rng.random() for name in RECORD_FIELDS}
    record.update(shape_fields(AttentionShape(1, i + 1, i + 1, 8, 2, 64, mask=CAUSAL)))
    record.update(case_id=f"sdpa/gqa/b1-hq8-hkv2-q{i + 1}-kv{i + 1}-d64/fp32/causal/prefill/fwd/cpu", status="ok",
                  reason="", backend="sdpa", phase="prefill", device="cpu", noisy=False, gpu_before=None,
                  gpu_after=None)
    stats = {k: rng.random() * 1e-3 for k in STAT_KEYS} | {"rounds": rounds, "iterations": 1, "outliers": "1;2",
                                                            "iqr_outliers": 1, "stddev_outliers": 2, "data": data}
    name = f"test_attention[{record['case_id']}]"
    return Entry.from_dict({
        "group": "prefill fwd fp32 causal", "name": name, "fullname": f"bench/suite/test_attention.py::{name}",
        "params": {"case": record["case_id"]}, "param": record["case_id"], "extra_info": record,
            "options": {"disable_gc": False, "timer": "bench.suite.replay.clock", "min_rounds": 5,
                        "max_time": 1.0, "min_time": 5e-06, "warmup": False}, "stats": stats})


def _median_ms(record_one, first: int, repeats: int) -> float:
    times = []
    for i in range(first, first + repeats):
        case = entry(i)
        t0 = time.perf_counter()
        record_one(case)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def cost(n: int, folder: Path, repeats: int = 5) -> tuple[float, float]:
    """(before, after): median milliseconds to record one more case into a run of n cases."""
    done = [entry(i) for i in range(n)]
    meta = RunMeta(run_id="cost", profile="full", sweep_id="cost", cases=n + repeats)

    old = RunDocument(meta=meta, machine_info={"node": "x"})
    old.replace_entries(done)
    old_path = folder / f"before-{n}.json"

    def rewrite(e: Entry) -> None:
        old.add(e)
        write_atomic(old_path, old)

    store = ResultsStore.new(folder / f"after-{n}.json", RunMeta(run_id="cost", profile="full", sweep_id="cost"),
                             {"node": "x"}, {}, "5.3.1", "now")
    for e in done:
        store.doc.add(e)  # the run so far; its journal lines are not what is measured
    gc.collect()
    gc.freeze()  # as the engine does once a run starts: the collector does not rescan the run's long-lived objects
    before = _median_ms(rewrite, n, repeats)
    after = _median_ms(store.add, n, repeats)
    store.finish(complete=False)
    gc.unfreeze()
    return before, after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000", help="run sizes in cases, comma-separated")
    parser.add_argument("--repeats", type=int, default=5, help="cases recorded (and timed) per size")
    args = parser.parse_args()
    print(f"{'cases':>7}  {'before: rewrite file':>22}  {'after: journal line':>21}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            before, after = cost(n, Path(tmp), args.repeats)
            print(f"{n:>7}  {before:>19.2f} ms  {after:>18.2f} ms", flush=True)


if __name__ == "__main__":
    main()
