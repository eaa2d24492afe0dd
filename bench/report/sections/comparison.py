"""The comparison section, in a report of several runs: each case's median per run and each run's ratio to the first
(oldest) run; cases are matched on backend and shape, not device, so runs on different machines compare."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from bench.analysis.frames import SHAPE_KEYS, geomean, shape_label
from bench.report.blocks import Block, Heading, Para, Table, text, times
from bench.report.units import fmt_seconds

if TYPE_CHECKING:
    from bench.report.sections import Report


def section(report: Report) -> list[Block] | None:
    """None for a report of one run."""
    if not report.several:
        return None
    runs, frame = report.runs, report.frame
    keys = ["backend", *SHAPE_KEYS]
    base = runs[0].run_id
    # only the (case, run) pairs present: pivot_table(dropna=False) would build the product of every key's values
    first = frame.groupby([*keys, "run_id"], dropna=False, sort=True)[["median_s", "status"]].first()
    wide, status = first["median_s"].unstack("run_id"), first["status"].unstack("run_id")
    present = status.notna().sum(axis=1) >= 2
    wide, status = wide[present], status[present]
    if wide.empty:
        return [Heading("Comparison of runs"), Para("The runs share no case to compare.")]
    headers = ["case"] + [f"{r.run_id} ({r.machine})" for r in runs]
    headers += [f"{r.run_id} / {base}" for r in runs[1:]]
    rows, ratios = [], {r.run_id: [] for r in runs[1:]}
    # by position: a key may hold NaN (a field a kind leaves empty), which label lookups do not find
    for i, key in enumerate(wide.index):
        row = dict(zip(keys, key, strict=True))
        cells = [f"{row['backend']}: {shape_label(row)}"]
        median = {rid: wide.iloc[i][rid] for rid in wide.columns}
        state = {rid: status.iloc[i][rid] for rid in status.columns}
        for r in runs:
            t, s = median.get(r.run_id), state.get(r.run_id)
            cells.append(fmt_seconds(t) if isinstance(t, float) and math.isfinite(t) else text(s))
        for r in runs[1:]:
            b, t = median.get(base), median.get(r.run_id)
            ok = all(isinstance(v, float) and math.isfinite(v) and v > 0 for v in (b, t))
            cells.append(times(t / b) if ok else "—")
            if ok:
                ratios[r.run_id].append(t / b)
        rows.append(cells)
    overall = "; ".join(f"{rid} / {base}: geometric mean {times(geomean(v))} over {len(v)} cases"
                        for rid, v in ratios.items())
    return [Heading("Comparison of runs"),
            Para(f"Median time per case in each run; ratios above 1× mean slower than {base}. {overall}."),
            Table(headers, rows)]
