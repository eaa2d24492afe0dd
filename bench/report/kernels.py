"""The report's kernel section: which kernel each sdpa backend ran per shape family and dtype, and how much
of a warm call each backend spends outside its kernels; and the measured ceilings beside the spec sheet's.

Reads the tidy frame's `sdpa_kernel`, `overhead_pct` and `launch_bound` columns (bench.results.record documents them).
"""

from __future__ import annotations

from collections import Counter

import pandas as pd

from bench.measure.spec_sheets import spec_sheet
from bench.problem.case import FAMILY_FIELDS
from bench.report.units import fmt_bandwidth, fmt_flops
from bench.results.meta import Calibration

FAMILY = ["device", *FAMILY_FIELDS]  # per device, then the report's family (bench.problem.case)


def _kernel_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Ok rows of every backend that reports the sdpa kernel it ran (the column is empty for the others)."""
    return df[(df["status"] == "ok") & df["sdpa_kernel"].notna()]


def _lengths(group: pd.DataFrame) -> str:
    lengths = sorted(set(group["seq_kv"].astype(int)))
    return f"{lengths[0]}–{lengths[-1]}" if len(lengths) > 1 else str(lengths[0])


def sdpa_agreed(df: pd.DataFrame) -> list[str]:
    """One sentence per (device, backend) that ran one and the same kernel in every case, e.g. "sdpa ran its flash
    kernel in all 66 cases": a table of identical rows would say no more."""
    out = []
    for (device, backend), group in _kernel_rows(df).groupby(["device", "backend"], sort=True):
        kernels = group["sdpa_kernel"].unique()
        if len(kernels) == 1:
            out.append(f"{backend} ran its {kernels[0]} kernel in all {len(group)} cases ({device}, every shape "
                       f"family and dtype, lengths {_lengths(group)}).")
    return out


def sdpa_choices(df: pd.DataFrame) -> list[list[str]]:
    """[device, backend, shape family, dtype, kernel(s) x cases, sequence lengths] per family, for the backends whose
    kernel choice differs between cases (the others are one sentence each: sdpa_agreed)."""
    ok = _kernel_rows(df)
    varied = ok.groupby(["device", "backend"])["sdpa_kernel"].transform("nunique") > 1
    rows = []
    for key, group in ok[varied].groupby(["backend", *FAMILY], sort=True, dropna=False):
        backend, device, phase, variant, dtype, mask, pass_ = key
        picked = Counter(group["sdpa_kernel"])
        kernels = ", ".join(f"{k} ×{n}" for k, n in picked.most_common())
        rows.append([str(device), str(backend), f"{phase} · {variant} · {mask} · {pass_}", str(dtype), kernels,
                     _lengths(group)])
    return rows


def overhead_rows(df: pd.DataFrame) -> list[list[str]]:
    """[device, backend, phase, median % of a warm call outside the kernels, launch-bound cases]."""
    ok = df[(df["status"] == "ok") & pd.to_numeric(df["overhead_pct"], errors="coerce").notna()]
    rows = []
    for (device, backend, phase), group in ok.groupby(["device", "backend", "phase"], sort=True):
        share = pd.to_numeric(group["overhead_pct"]).median()
        bound = int(group["launch_bound"].fillna(False).astype(bool).sum())
        outside = "—" if pd.isna(share) else f"{round(share)}%"  # round(): no "-0%" for a hair under zero
        rows.append([str(device), str(backend), str(phase), outside, f"{bound} of {len(group)}"])
    return rows


def ceiling_rows(calibrations: list[Calibration], gpu_names: list[str | None]) -> list[list[str]]:
    """Environment rows: the read-only ceiling, GEMM per dtype, and the spec sheet used (name and source)."""
    def value(figure: float | None, fmt) -> str:
        return fmt(figure) if figure is not None else "—"

    dtypes = sorted({dtype for cal in calibrations for dtype in cal.gemm_by_dtype})
    rows = [["read-only ceiling (measured)", *[value(c.read_bytes_per_s, fmt_bandwidth) for c in calibrations]]]
    rows += [[f"GEMM ceiling {d} (measured)", *[value(c.gemm_by_dtype.get(d), fmt_flops) for c in calibrations]]
             for d in dtypes]
    sheets = [spec_sheet(name) for name in gpu_names]
    rows.append(["spec sheet (for % of spec)", *[f"{s.name}: {fmt_flops(s.flops_per_s)}, {fmt_bandwidth(s.bytes_per_s)}"
                                                 f" ({s.source})" if s else "—" for s in sheets]])
    return rows
