"""Results files: one pytest-benchmark-compatible JSON per run, written atomically after every case.

Layout (pytest-benchmark's own keys, so `pytest-benchmark compare` reads it, plus one of ours):
  machine_info   pytest-benchmark's machine info; ours under machine_info["attnbench"] (environment)
  commit_info    pytest-benchmark's git info
  benchmarks     one entry per TIMED case: name, fullname, params, extra_info (our record, see
                 RECORD_FIELDS) and stats (pytest-benchmark's statistics of the timed rounds, raw
                 per-round seconds in stats["data"])
  datetime, version
  attnbench      {"schema": SCHEMA, "run_id", "profile", "sweep_id", "complete",
                  "untimed": [entries of the cases that were not timed (unsupported, oom, error,
                              incorrect): same shape, "stats": null],
                  "calibration": {"gemm_flops_per_s", "copy_bytes_per_s"},   (this machine's ceilings)
                  "fingerprint": {"device", "cpu_model", "gpu_name", "torch", "cuda", "threads"}}

Case record values: status in STATUSES; phase prefill | decode; pass fwd | fwd+bwd; mask none | causal |
window:<w> (and the int field window); dtype fp32 | bf16 | fp16; device cpu | cuda; seconds and bytes.
case_id = "<backend>/<variant>/b<B>-hq<Hq>-hkv<Hkv>-q<Sq>-kv<Skv>-d<D>/<dtype>/<mask>/<phase>/<pass>/<device>".
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

SCHEMA = 1
STATUSES = ("ok", "unsupported", "oom", "error", "incorrect")

# Fields of every case record (benchmarks[i]["extra_info"]); documented in the README's results schema.
RECORD_FIELDS = (
    "case_id", "status", "reason", "backend", "variant", "n_heads", "n_kv_heads", "seq_q", "seq_kv", "batch",
    "head_dim", "dtype", "mask", "window", "phase", "pass", "device", "flops", "bytes", "tflops",
    "tokens_per_s", "gb_per_s", "peak_mem_bytes", "model_mem_bytes", "max_abs_err", "pct_gemm_ceiling",
    "pct_copy_ceiling", "pct_spec_flops", "median_s", "ci_low_s", "ci_high_s", "iqr_s", "rounds", "noisy",
    "first_call_s", "timer", "calls_per_round", "kv_cache_bytes", "kv_bytes_per_s", "threads",
)


class ResultsError(ValueError):
    """A results file that cannot be used; the message names the file and what is wrong."""


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null so every reader can parse the file."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def write_atomic(path: str | Path, doc: dict) -> None:
    """Write to a temp file in the same folder, fsync, then rename: readers see the old or the new file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(_clean(doc), f, indent=1, allow_nan=False)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a results file is as readable as any other
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_run(path: str | Path) -> dict:
    """Load and validate one results file; raises ResultsError naming the file and the problem."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such file") from None
    except OSError as err:
        raise ResultsError(f"{path}: cannot read ({err.strerror})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise ResultsError(f"{path}: not valid JSON ({err.msg} at line {err.lineno}); truncated or corrupt?") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise ResultsError(f"{path}: not a results file (no 'benchmarks' list)")
    meta = doc.get("attnbench")
    if not isinstance(meta, dict):
        raise ResultsError(f"{path}: a pytest-benchmark file from another project (no 'attnbench' section)")
    if meta.get("schema") != SCHEMA:
        raise ResultsError(f"{path}: results schema {meta.get('schema')!r}, this attnbench reads {SCHEMA}")
    if not isinstance(meta.get("untimed", []), list):
        raise ResultsError(f"{path}: 'attnbench.untimed' is not a list")
    for i, entry in enumerate(entries(doc)):
        info = entry.get("extra_info") if isinstance(entry, dict) else None
        if not isinstance(info, dict) or "case_id" not in info or info.get("status") not in STATUSES:
            raise ResultsError(f"{path}: case #{i} has no valid attnbench record (case_id, status)")
        if info["status"] == "ok" and not isinstance(entry.get("stats"), dict):
            raise ResultsError(f"{path}: case {info['case_id']} is ok but has no timing statistics")
    return doc


def entries(doc: dict) -> list[dict]:
    """Every case entry of a run: the timed ones (pytest-benchmark's list), then the untimed ones.

    Untimed cases live apart because pytest-benchmark drops a whole file when one of its entries has
    no statistics; keeping them out of 'benchmarks' keeps `pytest-benchmark compare` working.
    """
    return list(doc["benchmarks"]) + list(doc.get("attnbench", {}).get("untimed", []))


def records(doc: dict) -> list[dict]:
    """The case records of a run, each with its raw round times (seconds) as 'samples'."""
    out = []
    for entry in entries(doc):
        rec = dict(entry["extra_info"])
        stats = entry.get("stats") or {}
        rec["samples"] = list(stats.get("data") or [])
        out.append(rec)
    return out
