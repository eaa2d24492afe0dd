"""The cases-that-did-not-run section: one row per backend, status and reason, with how many cases and one example;
skipped cases are counted as one reason (the time budget), not one per predicted time. A reason's cell is its first
sentence; tidy.csv holds each whole."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from bench.analysis.load import RunInfo
from bench.report.blocks import Block, Para, Table, sentence

if TYPE_CHECKING:
    from bench.report.sections import Report


def section(df: pd.DataFrame, run: RunInfo, report: Report) -> list[Block]:
    bad = df[df["status"] != "ok"]
    if bad.empty:
        return [Para("Every case ran and passed the correctness check.")]
    bad = bad.copy()
    skipped = bad["status"] == "skipped"
    if skipped.any():  # one row per backend, not one per predicted time
        pred = bad.loc[skipped, "predicted_s"] if "predicted_s" in bad else None
        span = (f" (predicted {pred.min():.1f}-{pred.max():.1f} s each)" if pred is not None and pred.notna().any()
                else "")
        bad.loc[skipped, "reason"] = f"did not fit the run's time budget{span}"
    rows = []
    for (backend, status, reason), grp in bad.groupby(["backend", "status", "reason"], dropna=False):
        rows.append([str(backend), str(status), sentence(str(reason)), str(len(grp)), str(grp["case_id"].iloc[0])])
    return [Table(["backend", "status", "reason", "cases", "for example"], rows)]
