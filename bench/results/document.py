"""Results files: one pytest-benchmark-compatible JSON per run, and the typed run document it holds.

Layout (pytest-benchmark's own keys, so `pytest-benchmark compare` reads it, plus one of ours):
  machine_info   pytest-benchmark's machine info; ours under machine_info["attnbench"] (environment)
  commit_info    pytest-benchmark's git info
  benchmarks     one entry per TIMED case: name, fullname, params, extra_info (the case's record, see
                 bench.results.record) and stats (pytest-benchmark's statistics of the timed rounds, raw per-round
                 seconds in stats["data"])
  datetime, version
  attnbench      RunMeta: {"schema", "run_id", "profile", "sweep_id", "complete", "axes", "cases",
                  "untimed": [entries of the cases that were not timed (unsupported, oom, error, incorrect):
                              same layout, "stats": null],
                  "calibration" / "calibration_end": {"gemm_flops_per_s", "copy_bytes_per_s", "read_bytes_per_s",
                                                      "gemm_flops_per_s_<dtype>"} (bench.measure.calibrate),
                  "fingerprint": {"device", "cpu_model", "gpu_name", "torch", "cuda", "threads"},
                  "models": {name: {...}} with --model-config, "kv_measured": [...] (bench.suite.plugin),
                  "baseline": {...} when pooled from several runs, "shards": [...] when merged,
                  "devices": [...] with bench run --devices,
                  "questions": [...] under a time budget: per question of the report, what the plan said of it
                  (bench.engine.agenda)}

Untimed cases live apart because pytest-benchmark drops a whole file when one of its entries has no statistics.
Every reader and writer goes through RunDocument (from_dict / to_dict); nothing else edits the raw keys. Readers get
each case as a frozen bench.results.entry.Entry (its Record and its rounds), never the file's dicts.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

from bench.errors import InputError
from bench.results.entry import Entry
from bench.results.meta import (  # RunMeta lives low (bench.results.meta): the report and compare hold it too
    SCHEMA,
    RunMeta,
)
from bench.results.status import STATUSES


class ResultsError(InputError):
    """A results file that cannot be used; the message names the file and what is wrong."""


@dataclass
class RunDocument:
    """One run: its entries (timed ones in pytest-benchmark's list, the others apart) and its metadata."""

    meta: RunMeta = field(default_factory=RunMeta)
    benchmarks: list[Entry] = field(default_factory=list)  # timed entries (pytest-benchmark's list in the file)
    untimed: list[Entry] = field(default_factory=list)  # the others (attnbench.untimed in the file)
    machine_info: dict = field(default_factory=dict)
    commit_info: dict = field(default_factory=dict)
    datetime: str | None = None
    version: str | None = None
    other: dict = field(default_factory=dict)  # top-level keys of other tools, kept as they were
    notes: list[str] = field(default_factory=list)  # what reading it tolerated (a torn journal line); not saved

    @classmethod
    def from_dict(cls, d: dict, owned: bool = False) -> RunDocument:
        """From the JSON layout (validate first with `validate` when it comes from outside).

        owned: `d` was just parsed and nothing else holds it, so its parts are taken as they are instead of
        copied (a full sweep's file is millions of objects: copying them was most of reading it)."""
        keep = (lambda v: v) if owned else copy.deepcopy
        meta = d.get("attnbench") or {}
        return cls(meta=RunMeta.from_dict(meta),
                   benchmarks=[Entry.from_dict(keep(e)) for e in d.get("benchmarks") or []],
                   untimed=[Entry.from_dict(keep(e)) for e in meta.get("untimed") or []],
                   machine_info=keep(d.get("machine_info") or {}),
                   commit_info=keep(d.get("commit_info") or {}), datetime=d.get("datetime"),
                   version=d.get("version"),
                   other={k: keep(v) for k, v in d.items() if k not in _TOP_KEYS})

    def to_dict(self) -> dict:
        return {"machine_info": self.machine_info, "commit_info": self.commit_info,
                "benchmarks": [e.to_dict() for e in self.benchmarks], "datetime": self.datetime,
                "version": self.version,
                "attnbench": self.meta.to_dict() | {"untimed": [e.to_dict() for e in self.untimed]}} | self.other

    def entries(self) -> list[Entry]:
        """Every case: the timed ones, then the untimed ones."""
        return self.benchmarks + self.untimed

    def add(self, entry: Entry) -> None:
        """File an entry where it belongs: timed (it has statistics) or untimed."""
        (self.benchmarks if entry.timed else self.untimed).append(entry)

    def replace_entries(self, entries: list[Entry]) -> None:
        self.benchmarks, self.untimed = [], []
        for entry in entries:
            self.add(entry)

    def case_ids(self) -> list[str]:
        return [e.case_id for e in self.entries()]

    @property
    def environment(self) -> dict:
        """Our environment record (machine_info["attnbench"]): versions, CPU, allocator, NVML."""
        env = self.machine_info.get("attnbench")
        return env if isinstance(env, dict) else {}

    @property
    def fingerprint(self) -> dict | None:
        return self.meta.fingerprint if isinstance(self.meta.fingerprint, dict) else None

    def control_gemm(self) -> float | None:
        """The in-run control: GEMM FLOP/s, the geometric mean of the start and end calibrations."""
        return self.meta.control_gemm()


_TOP_KEYS = {"machine_info", "commit_info", "benchmarks", "datetime", "version", "attnbench"}


def as_run(doc: RunDocument | dict) -> RunDocument:
    """A RunDocument from either form (tests and pytest-benchmark hand us dicts)."""
    return doc if isinstance(doc, RunDocument) else RunDocument.from_dict(doc)


def entries(doc: RunDocument | dict) -> list[Entry]:
    return as_run(doc).entries()


def json_safe(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null so every reader can parse the file."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def validate(doc: Any, label: str) -> None:
    """Raise ResultsError naming `label` when the JSON layout is not an attnbench results file."""
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise ResultsError(f"{label}: not a results file (no 'benchmarks' list)")
    meta = doc.get("attnbench")
    if not isinstance(meta, dict):
        raise ResultsError(f"{label}: a pytest-benchmark file from another project (no 'attnbench' section)")
    if meta.get("schema") != SCHEMA:
        raise ResultsError(f"{label}: results schema {meta.get('schema')!r}, this attnbench reads {SCHEMA}")
    if not isinstance(meta.get("untimed", []), list):
        raise ResultsError(f"{label}: 'attnbench.untimed' is not a list")
    for i, entry in enumerate(list(doc["benchmarks"]) + list(meta.get("untimed", []))):
        validate_entry(entry, f"{label}: case #{i}")


def validate_entry(entry: Any, label: str) -> None:
    info = entry.get("extra_info") if isinstance(entry, dict) else None
    if not isinstance(info, dict) or "case_id" not in info or info.get("status") not in STATUSES:
        raise ResultsError(f"{label} has no valid attnbench record (case_id, status)")
    if info["status"] == "ok" and not isinstance(entry.get("stats"), dict):
        raise ResultsError(f"{label} ({info['case_id']}) is ok but has no timing statistics")
