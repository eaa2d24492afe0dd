"""The one builder of a case's results entry: pytest-benchmark's layout, its statistics from its own `Stats`.

An entry is {"group", "name", "fullname", "params", "param", "extra_info", "options", "stats"}: what
pytest-benchmark writes for one benchmark, so `pytest-benchmark compare` reads our files. extra_info is the case's
record (bench.record); stats is `Stats.as_dict()` of the timed rounds (seconds per call) plus the raw rounds as
"data" and "iterations", or None for a case that was not timed. Every writer of entries (the engine, bench ab's
sides, pooled baselines) builds them here.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from pytest_benchmark.stats import Stats

TEST_NAME = "test_attention"  # the parametrized benchmark of bench.suite: entries keep its node ids
TEST_FILE = "bench/suite/test_attention.py"
# Throughput fields are inversely proportional to the median time: rescaled when rounds are pooled.
PER_SECOND_FIELDS = ("tflops", "tokens_per_s", "gb_per_s", "pct_gemm_ceiling", "pct_copy_ceiling",
                     "pct_read_ceiling", "pct_spec_flops", "kv_bytes_per_s")


def stats_of(samples: list[float]) -> Stats:
    """pytest-benchmark's statistics of rounds that are already seconds per call."""
    stats = Stats()
    for sample in samples:
        stats.update(sample)
    return stats


def stats_entry(stats: Stats, iterations: int = 1) -> dict[str, Any]:
    """The "stats" of an entry, exactly as pytest-benchmark's Metadata.as_dict(include_data=True) writes it."""
    return stats.as_dict() | {"data": list(stats.data), "iterations": iterations}


def group_of(record: Mapping[str, Any]) -> str:
    """pytest-benchmark's group of a case: cases that differ only in backend compare side by side."""
    return (f"{record['phase']} {record['pass']} {record['dtype']} {record['mask']} q{record['seq_q']} "
            f"kv{record['seq_kv']} d{record['head_dim']}")


def case_entry(record: Mapping[str, Any], samples: list[float] | None = None, *, name: str | None = None,
               group: str | None = None) -> dict[str, Any]:
    """The entry of one case: timed when it has samples (status ok), else with "stats": None."""
    case_id = record["case_id"]
    name = name or f"{TEST_NAME}[{case_id}]"
    entry = {"group": group, "name": name,
             "fullname": f"{TEST_FILE}::{name}", "params": {"case": case_id}, "param": case_id,
             "extra_info": dict(record), "options": {"timer": record.get("timer") or None, "warmup": False},
             "stats": None}
    if samples:
        entry["stats"] = stats_entry(stats_of(samples))
    return entry


def pooled_entry(entry: dict[str, Any], samples: list[float], peak_mem_bytes: float | None = None,
                 **fields: Any) -> dict[str, Any]:
    """`entry` with `samples` as its rounds (several passes or slices of one case pooled): the statistics and the
    median-derived fields follow the pooled median; the single run's CI no longer applies."""
    out = dict(entry)
    record = dict(entry["extra_info"])
    stats = stats_of(samples)
    out["stats"] = stats_entry(stats, int((entry.get("stats") or {}).get("iterations") or 1))
    median, old = out["stats"]["median"], record.get("median_s")
    if isinstance(old, (int, float)) and old > 0 and median > 0:
        for name in PER_SECOND_FIELDS:
            if isinstance(record.get(name), (int, float)):
                record[name] = record[name] * old / median
    record.update(median_s=median, rounds=len(samples), iqr_s=out["stats"]["iqr"], ci_low_s=None, ci_high_s=None,
                  **fields)
    if peak_mem_bytes is not None:
        record["peak_mem_bytes"] = peak_mem_bytes
    out["extra_info"] = record
    return out


def median_of(values: list[Any]) -> float | None:
    numbers = [v for v in values if isinstance(v, (int, float))]
    return statistics.median(numbers) if numbers else None
