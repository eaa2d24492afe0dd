"""This machine's ceilings, measured in the same run as the attention cases (a GPU's published ones:
bench.measure.spec_sheets).

- GEMM FLOP/s: the best of a few large shapes (GEMM_SHAPES), in each dtype the sweep uses
  (`gemm_flops_per_s_<dtype>`); `gemm_flops_per_s` is the device's main dtype (fp32 on CPU, bf16 on CUDA), the
  regression check's in-run control.
- copy bytes/s: a device-to-device copy, read + write counted (as attention's byte model counts reads and writes).
- read bytes/s: a sum over a buffer many times the L2, which only reads. A read-mostly kernel (decode reads the
  KV cache and writes one row) can beat the copy's figure, so decode is judged against this one.
Every figure is the headline timer's median (bench.measure.timer.measure). Each ceiling takes a few seconds at most
on any machine: a GEMM whose first call takes longer than CALL_LIMIT_S (bf16 on a CPU without bf16 units: a minute
for 2048^3) is measured on a smaller shape instead, and `Calibration.notes` says so. A dtype whose GEMM runs far
below fp32's is emulated by this CPU (`Calibration.emulated`): its cases are slow for want of hardware, not code.
The figures are a bench.results.meta.Calibration; the results file holds its to_dict().

For the test suite only: with ATTNBENCH_REUSE_CEILINGS=FILE set, the ceilings (and the presets' KV caches,
bench.models.kvcache.measured_presets) are measured once and kept in FILE, and every later run reads them back
(`reused`): tests/conftest.py sets it, so the suite's many `bench run`s do not each spend seconds measuring.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bench.measure.ceilings import Calibration
from bench.measure.stats import summarize
from bench.measure.timer import measure

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
MAIN_DTYPE = {"cpu": "fp32", "cuda": "bf16"}
GEMM_SHAPES = {  # (M, N, K): square and skinny-K shapes; the best is the ceiling
    "cpu": ((2048, 2048, 2048), (1024, 4096, 2048)),
    "cuda": ((8192, 8192, 8192), (16384, 8192, 4096), (4096, 4096, 16384)),
}
BUFFER_BYTES = {"cpu": 1 << 28, "cuda": 1 << 31}  # far above any L2 (and, on CPU, the L3)


BUDGET_S = 0.5  # timing budget of one ceiling's shape: its rounds stop here once the minimum is taken
CALL_LIMIT_S = 0.5  # a GEMM call slower than this is measured on a halved shape (each halving: 8x fewer FLOPs)
SMALLEST_GEMM = 256
EMULATED_BELOW = 0.25  # a dtype whose GEMM is under this share of fp32's has no hardware path here


def _time(fn, device: str) -> float:
    _, timing = measure(fn, device, case_budget_s=BUDGET_S)
    return summarize(timing.samples).median


def _one_call_s(fn, device: str) -> float:
    t0 = time.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def gemm_flops_per_s(device: str, dtype: str | None = None, shapes: tuple | None = None,
                     notes: list[str] | None = None) -> float:
    """The best FLOP/s over `shapes` (default GEMM_SHAPES) in `dtype` (default: the device's main dtype). Each shape
    is reached from a small one, doubling while a call stays under CALL_LIMIT_S, so a machine that is slow in this
    dtype never runs the big one (which `notes` then names)."""
    name = dtype or MAIN_DTYPE[device]
    best = 0.0
    for shape in shapes or GEMM_SHAPES[device]:
        m, n, k = _grown(shape, DTYPES[name], device)
        if (m, n, k) != tuple(shape) and notes is not None:
            notes.append(f"{name} GEMM: {'x'.join(map(str, shape))} would take over {CALL_LIMIT_S} s a call; "
                         f"measured at {m}x{n}x{k}")
        best = max(best, 2 * m * n * k / _time(_matmul(m, n, k, DTYPES[name], device), device))
    return best


def _grown(shape: tuple[int, int, int], dtype: torch.dtype, device: str) -> tuple[int, int, int]:
    """The largest halving of `shape` (at most `shape`) whose one call takes under CALL_LIMIT_S."""
    halvings = 0
    while min(shape) >> (halvings + 1) >= SMALLEST_GEMM:
        halvings += 1
    while halvings > 0:
        m, n, k = (d >> halvings for d in shape)
        if _one_call_s(_matmul(m, n, k, dtype, device), device) * 8 > CALL_LIMIT_S:  # the next size: 8x the work
            return m, n, k
        halvings -= 1
    return tuple(shape)


def _matmul(m: int, n: int, k: int, dtype: torch.dtype, device: str):
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    return lambda: a @ b


def copy_bytes_per_s(device: str) -> float:
    size = BUFFER_BYTES[device]
    src = torch.empty(size, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    return 2 * size / _time(lambda: dst.copy_(src), device)


def read_bytes_per_s(device: str) -> float:
    """A float32 sum over the buffer: every byte read once, one number written."""
    buf = torch.ones(BUFFER_BYTES[device] // 4, dtype=torch.float32, device=device)
    return buf.numel() * 4 / _time(lambda: buf.sum(), device)


REUSE_ENV = "ATTNBENCH_REUSE_CEILINGS"  # test-only: see the module's docstring


def reused(key: str, measure: Callable[[], Any]) -> Any:
    """measure(), or, with ATTNBENCH_REUSE_CEILINGS=FILE set (the tests only), what it returned the first time any
    process asked for `key`: kept in FILE (JSON, under a file lock, so concurrent runs measure it once). What is
    kept must be JSON: callers convert (calibrate keeps the Calibration's to_dict)."""
    path = os.environ.get(REUSE_ENV)
    if not path:
        return measure()
    from filelock import FileLock  # a dependency of torch's

    file = Path(path)
    with FileLock(f"{file}.lock"):
        kept = json.loads(file.read_text()) if file.exists() else {}
        if key not in kept:
            kept[key] = measure()
            tmp = file.with_name(f"{file.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(kept))
            tmp.replace(file)
        return json.loads(json.dumps(kept[key]))


def calibrate(device: str, dtypes: tuple[str, ...] = ()) -> Calibration:
    """The run's ceilings; dtypes: also a GEMM ceiling in each of these. With them: `notes` (what was measured
    otherwise than planned) and `emulated` (dtypes far below the main one's GEMM)."""
    if not os.environ.get(REUSE_ENV):
        return _calibrate(device, tuple(dtypes))
    kept = reused(f"calibrate {device} {','.join(dtypes)}", lambda: _calibrate(device, tuple(dtypes)).to_dict())
    return Calibration.from_dict(kept)


def _calibrate(device: str, dtypes: tuple[str, ...]) -> Calibration:
    main = MAIN_DTYPE[device]
    notes: list[str] = []
    gemm = gemm_flops_per_s(device, main, notes=notes)
    copy, read = copy_bytes_per_s(device), read_bytes_per_s(device)
    gemms = {main: gemm}
    # a CPU without bf16/fp16 matrix units takes seconds per GEMM in them: one shape there
    others = GEMM_SHAPES[device][:1] if device == "cpu" else None
    for dtype in dtypes:
        if dtype not in gemms:
            gemms[dtype] = gemm_flops_per_s(device, dtype, others, notes)
    emulated = [d for d in dtypes if d != main and device == "cpu" and gemms[d] < EMULATED_BELOW * gemm]
    return Calibration(gemm, copy, read, gemms, tuple(emulated), tuple(notes))

