"""A case's results entry: the frozen `Entry` every reader gets, and the one builder of it.

In the file an entry is pytest-benchmark's layout, {"group", "name", "fullname", "params", "param", "extra_info",
"options", "stats"}, so `pytest-benchmark compare` reads our files: extra_info is the case's record
(bench.results.record.Record.to_dict), stats is `Stats.as_dict()` of the timed rounds (seconds per call) plus the raw
rounds
as "data" and "iterations", or None for a case that was not timed. That layout lives only in Entry.to_dict and
Entry.from_dict; readers use the typed fields (entry.record.median_s, entry.samples, entry.pass_rounds). Every
writer of entries (the engine, bench ab's sides, pooled baselines) builds them here.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_benchmark.stats import Stats

from bench.results.record import RECORD_FIELDS, Record

TEST_NAME = "test_attention"  # the parametrized benchmark of bench.suite: entries keep its node ids
TEST_FILE = "bench/suite/test_attention.py"
# Throughput fields are inversely proportional to the median time: rescaled when rounds are pooled.
PER_SECOND_FIELDS = ("tflops", "tokens_per_s", "gb_per_s", "pct_gemm_ceiling", "pct_copy_ceiling",
                     "pct_read_ceiling", "pct_spec_flops", "kv_bytes_per_s")
# extra_info keys beside the record's own: a pooled baseline's passes, bench ab's slices
POOLING_KEYS = ("pass_rounds", "pass_gemm", "pass_control", "pass_read", "ab_slices")
_ENTRY_KEYS = frozenset({"group", "name", "fullname", "params", "param", "extra_info", "options", "stats"})
_KNOWN_INFO = frozenset(RECORD_FIELDS) | frozenset(POOLING_KEYS)


@dataclass(frozen=True)
class Slice:
    """One slice of a case that bench ab timed: its ABBA block and its raw rounds (seconds per call)."""

    block: int
    rounds: tuple[float, ...]


@dataclass(frozen=True)
class Entry:
    """One case of a run, as stored: its record and its timed rounds.

    stats is pytest-benchmark's statistics exactly as the file holds them (written once, never recomputed on
    reading), None when the case was not timed. A baseline pooled from several runs keeps each pass's round count
    and in-run controls (pass_rounds; pass_gemm, the run's GEMM; pass_control and pass_read, the case's own probes:
    bench.regress.compare scales each pass by its own); an A/B side
    keeps its slices (bench.regress.ab). extra_info keys this version does not know (another version's fields) are
    kept as read, so rewriting a file loses nothing.
    """

    record: Record
    stats: Mapping[str, Any] | None = None
    name: str = ""
    fullname: str = ""
    group: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    pass_rounds: tuple[int, ...] = ()
    pass_gemm: tuple[float | None, ...] = ()
    pass_control: tuple[float | None, ...] = ()
    pass_read: tuple[float | None, ...] = ()
    ab_slices: tuple[Slice, ...] = ()
    unknown: Mapping[str, Any] = field(default_factory=dict)  # extra_info keys of other versions
    other: Mapping[str, Any] = field(default_factory=dict)  # the entry's keys of other tools

    @property
    def case_id(self) -> str:
        return self.record.case_id

    @property
    def status(self) -> str | None:
        return self.record.status

    @property
    def timed(self) -> bool:
        """Whether it has statistics: the file keeps it among pytest-benchmark's benchmarks, else apart."""
        return bool(self.stats)

    @property
    def samples(self) -> tuple[float, ...]:
        """The raw timed rounds, seconds per call (empty when not timed)."""
        return tuple((self.stats or {}).get("data") or ())

    @property
    def iterations(self) -> int:
        return int((self.stats or {}).get("iterations") or 1)

    def to_dict(self) -> dict[str, Any]:
        info = self.record.to_dict()
        if self.pass_rounds:
            info |= {"pass_rounds": list(self.pass_rounds), "pass_gemm": list(self.pass_gemm),
                     "pass_control": list(self.pass_control), "pass_read": list(self.pass_read)}
        if self.ab_slices:
            info["ab_slices"] = [{"block": s.block, "rounds": list(s.rounds)} for s in self.ab_slices]
        return {"group": self.group, "name": self.name, "fullname": self.fullname,
                "params": {"case": self.case_id}, "param": self.case_id, "extra_info": info | dict(self.unknown),
                "options": dict(self.options), "stats": dict(self.stats) if self.stats else None} | dict(self.other)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Entry:
        """From the file's layout (bench.results.validate_entry checks it first when it comes from outside)."""
        info = d["extra_info"]
        rounds = info.get("pass_rounds")
        pass_rounds = tuple(int(n) for n in rounds) if _numbers(rounds) else ()
        pass_gemm, pass_control, pass_read = (_per_pass(info.get(key), len(pass_rounds))
                                              for key in ("pass_gemm", "pass_control", "pass_read"))
        slices = tuple(Slice(int(s["block"]), tuple(float(x) for x in s["rounds"]))
                       for s in info.get("ab_slices") or [])
        return cls(record=Record.from_dict(info), stats=d.get("stats") or None, name=d.get("name") or "",
                   fullname=d.get("fullname") or "", group=d.get("group"), options=d.get("options") or {},
                   pass_rounds=pass_rounds, pass_gemm=pass_gemm, pass_control=pass_control, pass_read=pass_read,
                   ab_slices=slices,
                   unknown=unknown_fields(info),
                   other={k: v for k, v in d.items() if k not in _ENTRY_KEYS})


def unknown_fields(info: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of a record (extra_info, or another revision's worker answer) that this version does not know."""
    return {k: v for k, v in info.items() if k not in _KNOWN_INFO}


def _per_pass(values: Any, passes: int) -> tuple[float | None, ...]:
    """A number (or None) per pass; all None when the list is missing or does not match the passes."""
    if not (isinstance(values, list) and len(values) == passes):
        return (None,) * passes
    return tuple(v if isinstance(v, (int, float)) and not isinstance(v, bool) else None for v in values)


def _numbers(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(n, int) and not isinstance(n, bool) for n in value)


def stats_of(samples: list[float] | tuple[float, ...]) -> Stats:
    """pytest-benchmark's statistics of rounds that are already seconds per call."""
    stats = Stats()
    for sample in samples:
        stats.update(sample)
    return stats


def stats_entry(stats: Stats, iterations: int = 1) -> dict[str, Any]:
    """The "stats" of an entry, exactly as pytest-benchmark's Metadata.as_dict(include_data=True) writes it."""
    return stats.as_dict() | {"data": list(stats.data), "iterations": iterations}


def group_of(record: Record) -> str:
    """pytest-benchmark's group of a case: cases that differ only in backend compare side by side."""
    s = record.shape
    assert s is not None, "a case's record"
    return f"{record.phase} {record.pass_} {s.dtype} {s.mask.label} q{s.seq_q} kv{s.seq_kv} d{s.head_dim}"


def case_entry(record: Record, samples: list[float] | None = None, *, name: str | None = None,
               group: str | None = None, ab_slices: tuple[Slice, ...] = ()) -> Entry:
    """The entry of one case: timed when it has samples (status ok), else with no statistics."""
    name = name or f"{TEST_NAME}[{record.case_id}]"
    return Entry(record=record, stats=stats_entry(stats_of(samples)) if samples else None, name=name,
                 fullname=f"{TEST_FILE}::{name}", group=group,
                 options={"timer": record.timer or None, "warmup": False}, ab_slices=ab_slices)


def pooled_entry(entry: Entry, samples: list[float], peak_mem_bytes: float | None = None, *,
                 pass_rounds: tuple[int, ...] = (), pass_gemm: tuple[float | None, ...] = (),
                 pass_control: tuple[float | None, ...] = (), pass_read: tuple[float | None, ...] = (),
                 **fields: Any) -> Entry:
    """`entry` with `samples` as its rounds (several passes or slices of one case pooled): the statistics and the
    median-derived fields follow the pooled median; the single run's CI no longer applies. fields: record fields
    to set as well (noisy=...)."""
    stats = stats_entry(stats_of(samples), entry.iterations)
    median, old = stats["median"], entry.record.median_s
    changes = dict(fields)
    if isinstance(old, (int, float)) and old > 0 and median > 0:
        for name in PER_SECOND_FIELDS:
            value = getattr(entry.record, name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                changes[name] = value * old / median
    changes |= {"median_s": median, "rounds": len(samples), "iqr_s": stats["iqr"], "ci_low_s": None,
                "ci_high_s": None}
    if peak_mem_bytes is not None:
        changes["peak_mem_bytes"] = peak_mem_bytes
    return dataclasses.replace(entry, record=dataclasses.replace(entry.record, **changes), stats=stats,
                               pass_rounds=tuple(pass_rounds), pass_gemm=tuple(pass_gemm),
                               pass_control=tuple(pass_control) or (None,) * len(pass_rounds),
                               pass_read=tuple(pass_read) or (None,) * len(pass_rounds))


def median_of(values: list[Any]) -> float | None:
    numbers = [v for v in values if isinstance(v, (int, float))]
    return statistics.median(numbers) if numbers else None
