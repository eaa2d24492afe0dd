"""The best-backends section: the best backend per shape family, then every backend's speedup over the baseline per
phase (bench.report.tables), beside what torch SDPA's automatic choice loses to its fastest kernel."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from bench.analysis.load import RunInfo
from bench.analysis.traits import BASELINE
from bench.claims.auto_choice import default_loss
from bench.report.blocks import Block, Para, Table, text, times
from bench.report.tables import best_backends, headline_speedups

if TYPE_CHECKING:
    from bench.report.sections import Report


def section(df: pd.DataFrame, run: RunInfo, report: Report) -> list[Block]:
    """The best backend per shape family, then every backend's speedup over the baseline per phase."""
    blocks: list[Block] = []
    best = sorted(best_backends(df), key=lambda b: (not b["family"].startswith("prefill"), b["family"]))
    if best:
        blocks.append(Para("Best backend per shape family: the one fastest at the most shapes of the family "
                           f"(lengths, head counts), with its geometric-mean speedup over {BASELINE}."))
        loss = default_loss(df)  # torch SDPA's automatic choice against the fastest kernel it could have forced
        extra = ["automatic SDPA vs its fastest kernel"] if loss else []
        blocks.append(Table(["shape family", "best backend", "fastest at", "runner-up", f"best vs {BASELINE}", *extra],
                            [[b["family"], b["best"], f"{b['wins']} of {b['shapes']} shapes", text(b["runner_up"]),
                              times(b["speedup_vs_naive"]), *([times(loss[b["family"]]) if b["family"] in loss
                                                               else "–"] if loss else [])] for b in best]))
    head = headline_speedups(df)
    if head:
        blocks.append(Para(f"Speedup over {BASELINE} per backend, over the shapes both ran."))
        blocks.append(Table(["phase", "backend", f"speedup over {BASELINE} (geomean)", "largest", "at", "shapes"],
                            [[h["phase"], h["backend"], times(h["geomean"]), times(h["max"]), h["at"],
                              str(h["shapes"])] for h in head]))
    return blocks or [Para("No dense attention case ran ok: no best backend to name.")]
