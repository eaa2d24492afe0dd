"""The kernels section: which kernel each sdpa backend ran, and the share of a warm call outside the kernels
(bench.report.kernels). A backend that ran one kernel everywhere gets one sentence; a table only where the choice
varies."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from bench.analysis.load import RunInfo
from bench.report import kernels
from bench.report.blocks import Block, Para, Table

if TYPE_CHECKING:
    from bench.report.sections import Report


def section(df: pd.DataFrame, run: RunInfo, report: Report) -> list[Block] | None:
    """None for a run that recorded no kernel names nor overheads."""
    agreed, choices, overhead = kernels.sdpa_agreed(df), kernels.sdpa_choices(df), kernels.overhead_rows(df)
    if not agreed and not choices and not overhead:
        return None
    blocks: list[Block] = []
    if agreed:
        blocks.append(Para("The kernel each sdpa backend ran (from the profiler's op names): " + " ".join(agreed)))
    if choices:
        blocks += [Para("Where a backend's kernel changed with the case: the kernel per shape family and dtype."),
                   Table(["device", "backend", "shape family", "dtype", "kernel × cases", "lengths"], choices)]
    if overhead:
        blocks += [Para("Share of a warm call spent outside the kernels (CPU: outside the aten ops), median over "
                        "the cases; launch bound: warm ≥ 2 × kernel time."),
                   Table(["device", "backend", "phase", "outside the kernels", "launch bound"], overhead)]
    return blocks
