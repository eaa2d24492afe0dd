"""Baselines: one saved results file per machine, under results/baselines/<fingerprint-key>.json.

A machine is its fingerprint (FINGERPRINT_FIELDS); runs of different machines are not compared unless
normalized. A baseline may pool several runs ("passes") of one machine: the between-run noise that a single
run's rounds never show (on shared CPU machines some cases flip between two speeds from one process to the
next; see the README's Reference) is then visible to `compare`.
"""

from __future__ import annotations

import copy
import math
import statistics
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from pytest_benchmark.stats import Stats

from bench.errors import InputError
from bench.measure.environment import fingerprint_diff, fingerprint_key
from bench.results import ResultsError, RunDocument, as_run, read_run, write_atomic

DEFAULT_DIR = Path("results/baselines")

# Throughput fields are inversely proportional to the median time: rescaled when passes are pooled.
_PER_SECOND_FIELDS = ("tflops", "tokens_per_s", "gb_per_s", "pct_gemm_ceiling", "pct_copy_ceiling", "pct_spec_flops")


class BaselineError(InputError):
    """A baseline that cannot be saved or found: exit code 2."""


def current_fingerprint(device: str) -> dict[str, str | int | None]:
    """This machine as results files record it (attnbench.fingerprint): the six things that must match for two
    runs' times to be comparable. gpu_name only for cuda runs: a CPU run does not depend on the GPU."""
    import torch  # lazy: reading and comparing results needs no torch

    from bench.measure.environment import fingerprint  # the engine writes the same function's answer

    if device not in ("cpu", "cuda"):
        raise BaselineError(f"device {device!r}: use cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise BaselineError("device cuda: torch sees no CUDA device here")
    return fingerprint(device)


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _stats(samples: list[float], iterations: int) -> dict:
    """pytest-benchmark's own stats entry for the pooled rounds (Stats.as_dict plus the raw data and iterations, as
    its Metadata.as_dict(include_data=True) writes them): exactly its keys, so `pytest-benchmark compare` reads a
    baseline like any file it wrote itself; its q1/q3/iqr are those summarize() gives a plain run's record (up
    to float rounding)."""
    stats = Stats()
    for sample in samples:
        stats.update(sample)  # already per call: Stats does not divide by iterations (Metadata.update does)
    out = stats.as_dict()
    out["data"] = list(samples)
    out["iterations"] = iterations
    return out


def _pool(entries: list[dict], gemms: list[float | None]) -> dict:
    """One benchmark entry from the same case in several passes: rounds pooled, pass boundaries kept."""
    ok_pairs = [(e, g) for e, g in zip(entries, gemms, strict=True)
                if e["extra_info"]["status"] == "ok" and (e.get("stats") or {}).get("data")]
    ok = [e for e, _ in ok_pairs]
    statuses = [e["extra_info"]["status"] for e in entries]
    if len(ok) != len(entries):
        # flaky across passes: keep a non-ok pass so that the same failure later is not read as ok -> oom
        out = copy.deepcopy(next(e for e in entries if e["extra_info"]["status"] != "ok"))
        if len(set(statuses)) > 1:
            out["extra_info"]["reason"] = f"status differs across baseline passes: {', '.join(statuses)}"
        return out
    out = copy.deepcopy(ok[0])
    info, old_median = out["extra_info"], ok[0]["extra_info"].get("median_s")
    samples = [s for e in ok for s in e["stats"]["data"]]
    out["stats"] = _stats(samples, int(ok[0]["stats"].get("iterations") or 1))
    median = out["stats"]["median"]
    info.update(median_s=median, rounds=len(samples), iqr_s=out["stats"]["iqr"], ci_low_s=None, ci_high_s=None,
                pass_rounds=[len(e["stats"]["data"]) for e in ok],
                pass_gemm=[g for _, g in ok_pairs])  # each pass's own in-run control (bench.regress.compare)
    if isinstance(old_median, (int, float)) and old_median > 0 and median > 0:
        for name in _PER_SECOND_FIELDS:
            if isinstance(info.get(name), (int, float)):
                info[name] = info[name] * old_median / median
    mems = [e["extra_info"].get("peak_mem_bytes") for e in ok]
    if all(isinstance(m, (int, float)) for m in mems):
        info["peak_mem_bytes"] = max(mems)  # the highest pass: memory noise must not fail a later run
    return out


def merge_passes(docs: list[RunDocument | dict], labels: list[str] | None = None) -> RunDocument:
    """One baseline document from one or more runs of the same machine and sweep."""
    docs = [as_run(d) for d in docs]
    labels = labels or [f"run #{i + 1}" for i in range(len(docs))]
    first = docs[0].fingerprint
    if first is None:
        raise BaselineError(f"{labels[0]}: no machine fingerprint recorded; cannot file it under a machine")
    for doc, label in zip(docs, labels, strict=True):
        if doc.meta.complete is False:
            raise BaselineError(f"{label}: the run is incomplete; a baseline must cover its whole sweep")
        diffs = fingerprint_diff(first, doc.fingerprint)
        if diffs:
            raise BaselineError(f"{label}: another machine than {labels[0]}: " + "; ".join(diffs).replace(
                "(baseline)", "(first)").replace("(current)", "(this)"))
    merged = copy.deepcopy(docs[0])
    by_case: dict[str, list[dict]] = {}
    gemm_of: dict[str, list[float | None]] = {}
    for doc in docs:
        for entry in doc.entries():
            cid = entry["extra_info"]["case_id"]
            by_case.setdefault(cid, []).append(entry)
            gemm_of.setdefault(cid, []).append(doc.control_gemm())
    merged.replace_entries([_pool(entries, gemm_of[cid]) if len(docs) > 1 else copy.deepcopy(entries[0])
                            for cid, entries in by_case.items()])
    gemms = [d.meta.calibration.get("gemm_flops_per_s") for d in docs]
    if len(docs) > 1 and all(isinstance(g, (int, float)) and math.isfinite(g) for g in gemms):
        merged.meta.calibration["gemm_flops_per_s"] = statistics.median(gemms)
    merged.meta.baseline = {"passes": len(docs), "run_ids": [d.meta.run_id for d in docs],
                            "saved": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    return merged


def save(paths: list[str | Path], directory: str | Path = DEFAULT_DIR) -> Path:
    """Store the run(s) as this fingerprint's baseline, replacing the previous one; returns the file."""
    docs = [read_run(p) for p in paths]
    merged = merge_passes(docs, [str(p) for p in paths])
    target = Path(directory) / f"{fingerprint_key(merged.fingerprint)}.json"
    write_atomic(target, merged)
    return target


def find(fingerprint: dict, directory: str | Path = DEFAULT_DIR) -> Path | None:
    path = Path(directory) / f"{fingerprint_key(fingerprint)}.json"
    return path if path.is_file() else None


@dataclass(frozen=True)
class Stored:
    """A baseline file as `baseline show` lists it; error is set when the file cannot be read."""

    path: Path
    fingerprint: dict | None = None
    profile: str | None = None
    n_cases: int = 0
    passes: int = 1
    run_ids: tuple[str, ...] = ()
    saved: str | None = None
    error: str | None = None


def stored(directory: str | Path = DEFAULT_DIR) -> list[Stored]:
    out = []
    for path in sorted(Path(directory).glob("*.json")):
        try:
            doc = read_run(path)
        except ResultsError as err:
            out.append(Stored(path, error=str(err)))
            continue
        info = doc.meta.baseline or {}
        run_ids = tuple(str(r) for r in info.get("run_ids") or [doc.meta.run_id])
        out.append(Stored(path, doc.fingerprint, doc.meta.profile, len(doc.entries()),
                          int(info.get("passes") or 1), run_ids, info.get("saved")))
    return out


def closest(fingerprint: dict, directory: str | Path = DEFAULT_DIR) -> tuple[Path, list[str]] | None:
    """The stored baseline of the same device differing in the fewest fields (for --normalize on CI runners)."""
    candidates = [(len(fingerprint_diff(s.fingerprint, fingerprint)), s) for s in stored(directory)
                  if s.error is None and isinstance(s.fingerprint, dict)
                  and s.fingerprint.get("device") == fingerprint.get("device")]
    if not candidates:
        return None
    _, best = min(candidates, key=lambda c: (c[0], str(c[1].path)))
    return best.path, fingerprint_diff(best.fingerprint, fingerprint)
