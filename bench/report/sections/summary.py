"""The summary section: each run in a few sentences (the fastest backend per phase, what did not run, what is noisy,
what this CPU only emulates), first in the report because it answers before it explains."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from bench.analysis.frames import shape_keys_but
from bench.analysis.load import RunInfo
from bench.analysis.traits import BASELINE
from bench.report.blocks import Block, Para, times
from bench.report.tables import headline_speedups

if TYPE_CHECKING:
    from bench.report.sections import Report


def section(df: pd.DataFrame, run: RunInfo, report: Report) -> list[Block]:
    """The run in a few sentences."""
    blocks: list[Block] = []
    head = headline_speedups(df)
    not_ok = int((df["status"] != "ok").sum())
    sentences = []
    for phase in dict.fromkeys(h["phase"] for h in head):
        top = next(h for h in head if h["phase"] == phase)
        sentences.append(f"{phase.capitalize()}: the fastest against {BASELINE} is {top['backend']}, "
                         f"{times(top['geomean'])} on average (geometric mean over {top['shapes']} shapes) and up "
                         f"to {times(top['max'])} ({top['at']}).")
    if not sentences:
        sentences.append(f"No speedups over {BASELINE} to report ({BASELINE} or the other backends did not run).")
    if not_ok:
        sentences.append(f"{not_ok} of {len(df)} cases did not run; they are listed under 'Cases that did not run'.")
    else:
        sentences.append(f"All {len(df)} cases ran.")
    skipped = int((df["status"] == "skipped").sum())
    if skipped:
        sentences.append(f"{skipped} of them were skipped to keep the run within its time budget, after the least set "
                         "of cases that answers each claim and figure (`--time-budget none` runs them all).")
    sentences += emulated_sentences(run, df)
    noisy = int((df["noisy"].fillna(False) & (df["status"] == "ok")).sum())
    if noisy:
        sentences.append(f"{noisy} of {int((df['status'] == 'ok').sum())} timings are flagged noisy (their "
                         "confidence interval stayed wide): read small differences with care.")
    blocks.append(Para(" ".join(sentences)))
    if run.complete is False:
        blocks.append(Para(f"Run {run.run_id} is incomplete: the sweep stopped before its end.", "warning"))
    return blocks


def emulated_sentences(run: RunInfo, df: pd.DataFrame) -> list[str]:
    """Per dtype this CPU emulates: what its representative cases cost against the same shapes in fp32."""
    out = []
    main = run.calibration.gemm_flops_per_s
    for dtype in run.calibration.emulated:
        ok = df[(df["status"] == "ok")]
        mine = ok[ok["dtype"] == dtype]
        twin_keys = ["backend", *shape_keys_but("dtype")]  # the same case in fp32: every field equal but the dtype
        fp32 = ok[ok["dtype"] == "fp32"][[*twin_keys, "median_s"]].drop_duplicates(twin_keys)
        pairs = mine.merge(fp32, on=twin_keys, suffixes=("", "_fp32"))
        ratios = {str(b): list(g["median_s"] / g["median_s_fp32"]) for b, g in pairs.groupby("backend")}
        share = run.calibration.gemm_by_dtype.get(dtype)
        gemm = f" (its GEMM runs at {100 * share / main:.1f}% of fp32's)" if share and main else ""
        shown = ", ".join(f"{b} {times(sum(r) / len(r))}" for b, r in sorted(ratios.items()))
        cost = f": against the same shapes in fp32 it took {shown} the time" if shown else ""
        out.append(f"{dtype} is emulated on this CPU{gemm}, so it was measured at {len(mine)} representative shapes, "
                   f"not across the grid{cost}.")
    return out
