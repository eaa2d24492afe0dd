"""Results files and folders -> one tidy DataFrame: one row per case and run, one column per variable.

The edge of the report package: the claims, tables, figures and document read the frame (and the run list), not
results files (the GPU check's summary, bench.report.gpu_check, reads its one run's file itself). Files are parsed
with json.loads only (through bench.results.read_run), never pickle or eval. The columns are
the record's fields (bench.results.record.FIELDS) plus the run's and a few derived ones: nothing here lists shape
fields.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench.analysis.suspects import again_by_case
from bench.problem.columns import INT_COLUMNS as SHAPE_INT_COLUMNS
from bench.results import ResultsError, RunDocument, read_run
from bench.results.entry import Entry
from bench.results.meta import Calibration, RunMeta
from bench.results.record import FIELDS

# Columns the loader adds to the record's: the run's own, and what it derives from the record.
RUN_COLUMNS: dict[str, str] = dict(
    run_id="id of the run (one results file); several runs can share a frame",
    machine="CPU model on CPU runs, GPU name on CUDA runs",
    device="cpu / cuda",
    profile="sweep profile of the run (quick, default, heads, decode, full)",
)
DERIVED_COLUMNS: dict[str, str] = dict(
    group_size="query heads per KV head, Hq / Hkv",
    d_model="Hq x D (fixed across a heads sweep)",
    intensity="arithmetic intensity, flops / bytes (FLOP per byte)",
    flops_per_s="achieved FLOP/s, flops / median_s",
    warm_median_s="the warm mode's median, seconds (timings' warm): beside median_s where the headline is cold, the "
                  "same call with its inputs left in cache",
)
RUN_DETAIL_COLUMNS: dict[str, str] = dict(
    gemm_flops_per_s="the run's measured GEMM ceiling, FLOP/s (calibration)",
    copy_bytes_per_s="the run's measured memory-copy ceiling, bytes/s (calibration)",
    device_memory_bytes="memory of the device the run used (RAM on CPU, GPU memory on CUDA), bytes",
    llc_bytes="the device's last-level cache (CPU: cpu0's highest cache level; CUDA: its L2), bytes; empty where the "
              "run did not record it",
    dtype_gemm_flops_per_s="the run's measured GEMM ceiling in the row's dtype, FLOP/s (the main dtype's where that "
                           "dtype's was not measured)",
    run_datetime="when the run was written (ISO 8601)",
    source="the results file the row came from",
)
# The tidy columns, in order, with their meaning: the run's, then every record field (bench.results.record owns them,
# the
# shape's included), then what the loader derives. bench/REFERENCE.md's record fields list the record's part
# (generated from bench.results.record.FIELDS).
COLUMNS: dict[str, str] = RUN_COLUMNS | FIELDS | DERIVED_COLUMNS | RUN_DETAIL_COLUMNS

# shape fields that have a default, and so may be absent from files older than the field
_INT_RECORD = ("rounds", "calls_per_round", "threads", "flops", "bytes", "peak_mem_bytes", "model_mem_bytes",
               "kv_cache_bytes", "useful_flops", "executed_flops", "indexer_flops", "indexer_peak_mem_bytes",
               "cold_copies", "cold_set_bytes", "cache_bytes")
# integer shape columns come from the shape's own column list, so a new int axis is typed without an edit here
INT_COLUMNS = SHAPE_INT_COLUMNS + (
    "group_size", "d_model", *_INT_RECORD, "device_memory_bytes", "llc_bytes")
FLOAT_COLUMNS = ("median_s", "ci_low_s", "ci_high_s", "iqr_s", "first_call_s", "setup_s", "intensity", "flops_per_s",
                 "tflops", "tokens_per_s", "gb_per_s", "kv_bytes_per_s", "max_abs_err", "pct_gemm_ceiling",
                 "pct_copy_ceiling", "pct_spec_flops", "gemm_flops_per_s", "copy_bytes_per_s", "overhead_pct",
                 "pct_read_ceiling", "pct_spec_bandwidth", "joules_per_call", "tokens_per_joule", "watts", "density",
                 "indexer_s", "block_mask_build_s", "mask_build_s", "total_s", "dtype_gemm_flops_per_s",
                 "warm_median_s", "control_flops", "control_read")
# Without these a row cannot be placed on any figure or table: a file lacking them is rejected.
REQUIRED = ("case_id", "status", "backend", "variant", "batch", "n_heads", "n_kv_heads", "head_dim", "seq_q", "seq_kv",
            "dtype", "phase")


@dataclass(frozen=True)
class RunInfo:
    """A run as a report shows it: its RunMeta (what the run was and measured), and what the report adds: the id
    it goes by here (the meta's, made unique in the report), the file, the machine, its environment, its cases."""

    meta: RunMeta
    run_id: str
    source: str
    datetime: str | None
    machine: str
    device: str
    env: dict[str, Any]
    n_cases: int

    @property
    def profile(self) -> str | None:
        return self.meta.profile

    @property
    def complete(self) -> bool | None:
        return self.meta.complete

    @property
    def calibration(self) -> Calibration:
        return self.meta.calibration

    @property
    def models(self) -> dict[str, Any]:  # --model-config facts per model
        return self.meta.model_facts()

    @property
    def kv_measured(self) -> list[dict]:  # measured KV caches per preset and variant
        return self.meta.kv_caches()

    @property
    def questions(self) -> list[dict]:  # what the plan said of each question
        return self.meta.question_notes()


@dataclass
class Loaded:
    frame: pd.DataFrame
    runs: list[RunInfo] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # one line per bad input, naming it and what is wrong


def expand(paths: Iterable[str | Path]) -> tuple[list[Path], list[str]]:
    """Files as given; folders -> every *.json below them, skipping baselines/ and hidden entries."""
    files: list[Path] = []
    errors: list[str] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = [p for p in sorted(path.rglob("*.json"))
                     if not any(part == "baselines" or part.startswith(".") for part in p.relative_to(path).parts)]
            if not found:
                errors.append(f"{path}: folder holds no results files (*.json)")
            files.extend(found)
        elif path.exists():
            files.append(path)
        else:
            errors.append(f"{path}: no such file or folder")
    seen: set[Path] = set()
    unique = []
    for f in files:  # the same file reached twice (as itself and through its folder) loads once
        key = f.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique, errors


def _number(path: Path, case: str, name: str, value: Any) -> float | int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ResultsError(f"{path}: case {case!r}: field {name!r} is {value!r}, expected a number")
    return value


def _fill_from_samples(rec: dict, samples: tuple[float, ...]) -> None:
    """Stats the record left empty but its raw rounds can give (median, IQR, rounds)."""
    if rec.get("status") != "ok" or all(rec.get(k) is not None for k in ("median_s", "iqr_s", "rounds")):
        return  # nothing to fill (the engine's records): skip a percentile per case
    samples = [s for s in samples if isinstance(s, (int, float)) and not isinstance(s, bool)]
    if not samples:
        return
    q1, med, q3 = np.percentile(samples, [25, 50, 75])
    if rec.get("median_s") is None:
        rec["median_s"] = float(med)
    if rec.get("iqr_s") is None:
        rec["iqr_s"] = float(q3 - q1)
    if rec.get("rounds") is None:
        rec["rounds"] = len(samples)


def _row(path: Path, entry: Entry, run: dict, again: dict | None = None) -> dict:
    """again: the case's re-measurement where its first timing was stalled (bench.analysis.suspects): it replaces
    the stalled median and CI, and the case is flagged noisy."""
    rec = entry.record.to_dict() | dict(entry.unknown)  # a shape field the file predates holds its default
    warm = (rec.get("timings") or {}).get("warm") or {}
    rec["warm_median_s"] = warm.get("median_s") if isinstance(warm, dict) else None
    if again:
        rec |= {"median_s": again["again_s"], "ci_low_s": again.get("again_low_s"),
                "ci_high_s": again.get("again_high_s"), "noisy": True}
    case = str(rec.get("case_id"))
    missing = [k for k in REQUIRED if rec.get(k) is None]
    if missing:
        raise ResultsError(f"{path}: case {case!r} lacks {', '.join(missing)}")
    _fill_from_samples(rec, entry.samples)
    row: dict[str, Any] = {}
    for name, value in rec.items():
        if isinstance(value, (dict, list)):
            continue  # raw rounds stay in the results file; the frame holds one value per cell
        if name in INT_COLUMNS or name in FLOAT_COLUMNS:
            value = _number(path, case, name, value)
        row[name] = value
    for name in ("n_heads", "n_kv_heads", "head_dim", "seq_q", "seq_kv", "batch"):
        if not isinstance(row[name], int) or row[name] <= 0:
            raise ResultsError(f"{path}: case {case!r}: {name}={row[name]!r} is not a positive integer")
    row.update(run)
    row["device"] = rec.get("device") or run["device"]
    row["group_size"] = row["n_heads"] // row["n_kv_heads"]
    row["d_model"] = row["n_heads"] * row["head_dim"]
    for name in ("case_id", "status", "backend", "variant", "dtype", "phase", "mask", "pass", "timer"):
        if row.get(name) is not None:
            row[name] = str(row[name])  # text from a file stays text; render escapes it
    row["reason"] = str(row.get("reason") or "")
    flops, nbytes, median = row.get("flops"), row.get("bytes"), row.get("median_s")
    row["intensity"] = flops / nbytes if flops and nbytes else None
    ok = row["status"] == "ok" and median and median > 0
    if ok and not row.get("timing_mode"):  # a file from before cold CPU timing: its CPU headline was warm
        row["timing_mode"] = "cold" if row["device"] == "cuda" else "warm"
    row["flops_per_s"] = flops / median if ok and flops else None
    if row.get("tflops") is None and row["flops_per_s"]:
        row["tflops"] = row["flops_per_s"] / 1e12
    if row.get("gb_per_s") is None and ok and nbytes:
        row["gb_per_s"] = nbytes / median / 1e9
    return row


def read_results(path: str | Path, run_id: str | None = None) -> tuple[pd.DataFrame, RunInfo]:
    """One results file -> (tidy frame, run info); raises ResultsError naming the file and the problem."""
    return doc_frame(read_run(Path(path)), Path(path), run_id)


def doc_frame(doc: RunDocument, path: Path, run_id: str | None = None) -> tuple[pd.DataFrame, RunInfo]:
    """A run's document (read from `path`, or still being written there) -> (tidy frame, run info)."""
    meta = doc.meta
    env = {**(doc.fingerprint or {}), **{k: v for k, v in doc.environment.items() if v is not None}}
    calibration = meta.calibration
    device = str(env.get("device") or "cpu")
    machine = env.get("gpu_name") if device == "cuda" and env.get("gpu_name") else env.get("cpu_model")
    run_id = run_id or str(meta.run_id or path.stem)
    run = {
        "run_id": run_id, "machine": str(machine or "unknown machine"), "device": device,
        "profile": meta.profile,
        "gemm_flops_per_s": _number(path, "-", "gemm_flops_per_s", calibration.gemm_flops_per_s),
        "copy_bytes_per_s": _number(path, "-", "copy_bytes_per_s", calibration.copy_bytes_per_s),
        "device_memory_bytes": _number(path, "-", "device_memory_bytes", env.get("device_memory_bytes")),
        "llc_bytes": _number(path, "-", "llc_bytes", env.get("llc_bytes")),
        "run_datetime": str(doc.datetime) if doc.datetime else None, "source": str(path),
    }
    stalled = again_by_case(meta.suspects)
    rows = [(row := _row(path, entry, run, stalled.get(entry.case_id)))
            | {"dtype_gemm_flops_per_s": calibration.gemm(str(row["dtype"]))} for entry in doc.entries()]
    frame = tidy(rows)
    info = RunInfo(meta=meta, run_id=run_id, source=str(path), datetime=run["run_datetime"], machine=run["machine"],
                   device=device, env=env, n_cases=len(frame))
    return frame, info


def tidy(rows: list[dict]) -> pd.DataFrame:
    """Rows -> frame with the documented columns first (typed), any extra engine fields after them."""
    frame = pd.DataFrame(rows)
    for name in COLUMNS:
        if name not in frame:
            frame[name] = None
    extra = [c for c in frame.columns if c not in COLUMNS]
    frame = frame[list(COLUMNS) + extra]
    for name in INT_COLUMNS:
        # nullable integers: a missing value stays empty instead of turning 512 into 512.0
        frame[name] = pd.to_numeric(frame[name], errors="coerce").round().astype("Int64")
    for name in FLOAT_COLUMNS:
        frame[name] = pd.to_numeric(frame[name], errors="coerce").astype("float64")
    frame["noisy"] = frame["noisy"].astype("boolean")
    return frame.drop_duplicates(["run_id", "case_id"], keep="last").reset_index(drop=True)


def load_results(paths: Iterable[str | Path]) -> Loaded:
    """Any number of files and folders -> one frame; bad inputs are listed in .errors, good ones still load."""
    files, errors = expand(paths)
    frames: list[pd.DataFrame] = []
    runs: list[RunInfo] = []
    for path in files:
        try:
            frame, info = read_results(path)
            if any(r.run_id == info.run_id for r in runs):  # two files claiming one run id: keep both, apart
                frame, info = read_results(path, run_id=f"{info.run_id}@{path.name}")
        except ResultsError as err:
            errors.append(str(err))
            continue
        frames.append(frame)
        runs.append(info)
    order = sorted(range(len(runs)), key=lambda i: (runs[i].datetime or "", runs[i].run_id))  # oldest first
    runs = [runs[i] for i in order]
    frame = pd.concat([frames[i] for i in order], ignore_index=True) if frames else tidy([])
    return Loaded(frame=frame, runs=runs, errors=errors)
