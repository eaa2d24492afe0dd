"""The report's kernel section: which kernel the automatic `sdpa` picked per shape family and dtype, and how much
of a warm call each backend spends outside its kernels; and the measured ceilings beside the spec sheet's.

Reads the tidy frame's `sdpa_kernel`, `overhead_pct` and `launch_bound` columns (bench.record documents them).
"""

from __future__ import annotations

from collections import Counter

import pandas as pd

from bench.measure.calibrate import spec_sheet
from bench.report.units import fmt_bandwidth, fmt_flops

FAMILY = ["device", "phase", "variant", "mask", "pass", "dtype"]


def sdpa_choices(df: pd.DataFrame) -> list[list[str]]:
    """[device, shape family, dtype, kernel(s) x cases, sequence lengths] for the automatic sdpa backend."""
    ok = df[(df["backend"] == "sdpa") & (df["status"] == "ok") & df["sdpa_kernel"].notna()]
    rows = []
    for key, group in ok.groupby(FAMILY, sort=True, dropna=False):
        device, phase, variant, mask, pass_, dtype = key
        picked = Counter(group["sdpa_kernel"])
        kernels = ", ".join(f"{k} ×{n}" for k, n in picked.most_common())
        lengths = sorted(set(group["seq_kv"].astype(int)))
        rows.append([str(device), f"{phase} · {variant} · {mask} · {pass_}", str(dtype), kernels,
                     f"{lengths[0]}–{lengths[-1]}" if len(lengths) > 1 else str(lengths[0])])
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


def ceiling_rows(calibrations: list[dict], gpu_names: list[str | None]) -> list[list[str]]:
    """Environment rows: the read-only ceiling, GEMM per dtype, and the spec sheet used (name and source)."""
    def value(cal: dict, key: str, fmt) -> str:
        return fmt(cal[key]) if isinstance(cal.get(key), (int, float)) else "—"

    dtypes = sorted({k.rsplit("_", 1)[1] for cal in calibrations for k in cal if k.startswith("gemm_flops_per_s_")})
    rows = [["read-only ceiling (measured)", *[value(c, "read_bytes_per_s", fmt_bandwidth) for c in calibrations]]]
    rows += [[f"GEMM ceiling {d} (measured)", *[value(c, f"gemm_flops_per_s_{d}", fmt_flops) for c in calibrations]]
             for d in dtypes]
    sheets = [spec_sheet(name) for name in gpu_names]
    rows.append(["spec sheet (for % of spec)", *[f"{s.name}: {fmt_flops(s.flops_per_s)}, {fmt_bandwidth(s.bytes_per_s)}"
                                                 f" ({s.source})" if s else "—" for s in sheets]])
    return rows
