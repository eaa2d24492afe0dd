"""`python -m bench gpu-check [--dry-run] [--out DIR]`: everything a GPU machine must show, in one offline command.

Steps (each a subprocess with its own timeout, so one slow step cannot eat the machine's time):
1. the GPU through NVML (found by UUID): clocks, power, temperature, energy counter, clock-event reasons;
2. the shipped conformance check (`bench check`, bench.conformance) of every built-in backend on CUDA, in each dtype
   it claims, forward and backward, against the float64 reference: the installed package is all it needs;
3. the `gpu-check` sweep (bench/profiles.py; about 5 minutes on an H200), calibration included, into DIR;
4. its report (DIR/report) and NVML again;
5. a compact summary (printed and written to DIR/summary.txt): the ceilings against the anchors, the anchor
   shapes' TFLOP/s, decode's KV bandwidth against the read-only ceiling, SDPA's kernel choices, launch-bound and
   throttled cases, energy, and every backend that was unsupported with torch's reason.
--dry-run runs the same steps on the CPU at a tiny size (the `gpu-check` CPU profile, the naive backend's fp32
check), so the test suite keeps it working without a GPU. Needs only the installed attnbench and its dependencies
(torch, pytest, pytest-benchmark, pandas, matplotlib, scipy, nvidia-ml-py), from any folder: no repository checkout.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.errors import UsageError

help = ("run the GPU check (NVML, the conformance check of every backend, the gpu-check sweep, calibration) and print "
        "its summary")
# the folder holding the bench package (site-packages once installed): the steps' `python -m bench` imports this one
PACKAGE_PARENT = Path(__file__).resolve().parents[2]
DRY_CHECKS = (("naive", "fp32"),)  # (backend, dtypes) of the dry run; on CUDA every built-in backend, every dtype


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dry-run", action="store_true", help="the same steps on the CPU at a tiny size")
    p.add_argument("--out", type=Path, default=None, help="folder for the results, report and summary "
                   "(default: results/gpu-check-<time>)")
    p.add_argument("--tests-timeout", type=float, default=150.0, help="seconds for the correctness tests")
    p.add_argument("--sweep-timeout", type=float, default=330.0, help="seconds for the sweep (the results file "
                   "keeps every finished case)")


def _step(title: str, cmd: list[str], timeout: float) -> tuple[int | None, str]:
    """(exit code or None on timeout, the output's last line)."""
    print(f"== {title}: {' '.join(cmd)}", flush=True)
    path = os.pathsep.join(p for p in (str(PACKAGE_PARENT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "KINETO_LOG_LEVEL": "5", "PYTHONPATH": path}
    try:
        done = subprocess.run(cmd, env=env, timeout=timeout, capture_output=True, text=True)
    except subprocess.TimeoutExpired as err:
        tail = (err.stdout or b"")[-2000:]
        print(tail.decode(errors="replace") if isinstance(tail, bytes) else tail)
        return None, f"timed out after {timeout:g} s"
    print(done.stdout[-3000:], done.stderr[-2000:] if done.returncode not in (0, 1) else "", sep="", flush=True)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return done.returncode, lines[-1] if lines else ""


def nvml_line(reading: dict | None) -> str:
    if not reading:
        return "NVML: no reading (no library, no driver, or no device matching torch's UUID)"
    return (f"NVML {reading.get('name')}: SM {reading.get('sm_clock_mhz')}/{reading.get('sm_clock_max_mhz')} MHz, "
            f"mem {reading.get('mem_clock_mhz')}/{reading.get('mem_clock_max_mhz')} MHz, "
            f"{reading.get('power_w')}/{reading.get('power_limit_w')} W, {reading.get('temperature_c')} °C, "
            f"energy counter {reading.get('energy_mj')} mJ, clock-event reasons {reading.get('clock_event_reasons')} "
            f"(throttling: {', '.join(reading.get('throttle_reasons') or []) or 'none'})")


def _nvml_reading(device: str) -> dict | None:
    if device != "cuda":
        return None
    from bench.measure.nvml import Gpu

    gpu = Gpu.open(0)
    return gpu.reading() if gpu else None


def run(args: argparse.Namespace) -> int:
    import torch

    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("gpu-check needs a CUDA device that torch sees (or --dry-run, on the CPU)")
    out: Path = (args.out or Path("results") / f"gpu-check-{dt.datetime.now():%Y%m%d-%H%M%S}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    results = out / f"gpu-check-{device}.json"
    if results.exists():
        raise UsageError(f"{results} exists; give another --out")
    before = _nvml_reading(device)
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, device {device}"
          + (f" ({torch.cuda.get_device_name()})" if device == "cuda" else ""))
    print(nvml_line(before) if device == "cuda" else "NVML: not read on the CPU dry run")
    py = sys.executable
    tests = _conformance(device, DRY_CHECKS if args.dry_run else _all_backends(), args.tests_timeout)
    sweep = _step("sweep", [py, "-m", "bench", "run", "--profile", "gpu-check", "--device", device, "--out",
                            str(results)], args.sweep_timeout)
    report = _step("report", [py, "-m", "bench", "report", str(results), "--out", str(out / "report")], 60)
    after = _nvml_reading(device)
    from bench.report.gpu_check import summary_lines

    lines = [f"correctness: {_outcome(tests)}", f"sweep: {_outcome(sweep)}", f"report: {_outcome(report)}",
             f"before: {nvml_line(before)}", f"after: {nvml_line(after)}"]
    lines += summary_lines(results) if results.exists() else ["no results file: the sweep wrote nothing"]
    text = "\n".join(lines)
    (out / "summary.txt").write_text(text + "\n")
    print("== summary\n" + text + f"\n(written to {out / 'summary.txt'})")
    return 0 if tests[0] == 0 and sweep[0] == 0 else 1


def _all_backends() -> tuple[tuple[str, str | None], ...]:
    from bench.backends import BACKENDS

    return tuple((name, None) for name in BACKENDS)  # None: every dtype the backend claims


def _conformance(device: str, checks: tuple[tuple[str, str | None], ...], timeout: float) -> tuple[int | None, str]:
    """`bench check` of each backend in turn, within `timeout` seconds in all: each gets an even share of what is
    left, so one slow backend (FlexAttention compiles per shape) cannot starve the rest. (worst exit, per backend)"""
    start, codes, parts = time.monotonic(), [], []
    for i, (backend, dtypes) in enumerate(checks):
        share = (timeout - (time.monotonic() - start)) / (len(checks) - i)
        cmd = [sys.executable, "-m", "bench", "check", backend, "--device", device,
               *(["--dtype", dtypes] if dtypes else [])]
        code, last = _step(f"correctness: {backend}", cmd, max(share, 1.0))
        codes.append(code)
        parts.append(f"{backend} {last}")
    worst = None if None in codes else max(codes, default=0)
    return worst, "; ".join(parts)


def _outcome(step: tuple[int | None, str]) -> str:
    code, last = step
    return f"exit {code}: {last}" if code is not None else last
