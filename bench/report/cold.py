"""Cold against warm: what rotating a case's cold inputs (bench.measure.rotation) did to its time, per kind of step
and backend, from the cases that recorded both modes. Plain rows for the report's section and `bench run`'s summary.
"""

from __future__ import annotations

import pandas as pd

from bench.analysis.frames import ok_rows


def step_kind(row: pd.Series) -> str:
    """The kind of step a cold case is, in a reader's words (bench.problem.case.shape_kind's order)."""
    if _set(row.get("prefix")):
        return "shared-prefix decode"
    if _set(row.get("page_size")):
        return "paged decode"
    if _set(row.get("lengths")):
        return "serving decode (contiguous)"
    if _set(row.get("sparsity")) and row.get("sparsity") != "none":
        return "sparse decode"
    if _set(row.get("kv_lora_rank")):
        return "MLA decode (absorbed)"
    if _set(row.get("linear")) and row.get("linear") != "none":
        return "linear decode step"
    return "decode"


def _set(value: object) -> bool:
    return value is not None and not bool(pd.isna(value)) and value != ""


def cold_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The ok cases timed cold, with their warm median beside (`warm_s`) and cold / warm (`cold_over_warm`)."""
    ok = ok_rows(df)
    if ok.empty or "timing_mode" not in ok:
        return ok.iloc[0:0]
    cold = ok[ok["timing_mode"] == "cold"].copy()
    if cold.empty or "warm_median_s" not in cold:
        return cold.iloc[0:0]
    cold["warm_s"] = pd.to_numeric(cold["warm_median_s"], errors="coerce")
    cold = cold[cold["warm_s"] > 0]
    if cold.empty:
        return cold
    cold["cold_over_warm"] = cold["median_s"] / cold["warm_s"]
    cold["step"] = [step_kind(row) for _, row in cold.iterrows()]
    return cold


def summary(df: pd.DataFrame) -> list[list[str]]:
    """One row per (step kind, backend, dtype): cases, cold inputs' size range, copies, median warm and cold time at
    the largest set, and the median of cold / warm over the cases."""
    from bench.report.units import fmt_bytes, fmt_seconds

    cold = cold_rows(df)
    if cold.empty:
        return []
    out = []
    for (step, backend, dtype), grp in cold.groupby(["step", "backend", "dtype"], sort=True):
        largest = grp.loc[grp["cold_set_bytes"].astype("float64").idxmax()] if grp["cold_set_bytes"].notna().any() \
            else grp.iloc[-1]
        sizes = grp["cold_set_bytes"].dropna().astype(int)
        size = (f"{fmt_bytes(sizes.min())}–{fmt_bytes(sizes.max())}" if sizes.nunique() > 1
                else fmt_bytes(sizes.iloc[0]) if len(sizes) else "?")
        out.append([step, str(backend), str(dtype), str(len(grp)), size,
                    f"{fmt_seconds(largest['warm_s'])} → {fmt_seconds(largest['median_s'])}",
                    f"{grp['cold_over_warm'].median():.2f}× ({grp['cold_over_warm'].min():.2f}–"
                    f"{grp['cold_over_warm'].max():.2f})"])
    return out


def partly_warm(df: pd.DataFrame) -> list[str]:
    """The case ids whose copies fell short of their target (their reason says by how much)."""
    ok = ok_rows(df)
    if "partly_warm" not in ok:
        return []
    return [str(c) for c in ok.loc[ok["partly_warm"].fillna(False).astype(bool), "case_id"]]
