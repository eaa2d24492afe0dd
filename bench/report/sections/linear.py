"""The linear-attention section: per linear line (a method on a backend at one dtype and head geometry) its S*
against the best dense kernel beside flash-linear-attention's published crossover, its decode step's flatness and
the context from which it is faster than attention's step, and each linear backend's throughput against the run's
measured GEMM ceiling (bench.claims.linear computes the lines; the run's calibration gives the ceiling)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from bench.analysis.load import RunInfo
from bench.claims.linear import FLA_PUBLISHED, crossover_conditions, decode_conditions, linear_pairs
from bench.report.blocks import Block, Heading, Para, Table, times
from bench.report.units import fmt_flops, fmt_seconds

if TYPE_CHECKING:
    from bench.report.sections import Report


def section(df: pd.DataFrame, run: RunInfo, report: Report) -> list[Block] | None:
    """None for a run without a linear case beside a dense twin; the heading is the section's own."""
    rows = linear_pairs(df)
    if rows.empty:
        return None
    blocks: list[Block] = [Heading("Linear attention")]
    prefill = crossover_conditions(rows)
    if prefill:
        blocks += [Para("Each linear prefill line against the best dense kernel (the fastest softmax twin of the same "
                        "batch, heads and head dim): its time over it at the longest length, and S*, the length from "
                        f"which it stays faster at every longer measured length. Published: {FLA_PUBLISHED}."),
                   Table(["line", "lengths", "best dense", "linear / dense at the longest", "S*", "verdict"],
                         [[c.name, f"{d['lengths'][0]}–{d['lengths'][-1]}", d["best_dense"],
                           f"{times(c.ratio)} ({c.low:.2f}–{c.high:.2f})",
                           str(d["s_star"]) if d["s_star"] else "none here", c.verdict] for c, d in prefill],
                         verdict_columns=(5,))]
    decode = decode_conditions(rows)
    if decode:
        blocks += [Para("Each linear decode line: its step's time at the longest KV over the shortest (a recurrent "
                        "step reads its state, not the context), the best dense step's over the same KV lengths, and "
                        "the KV from which the linear step is faster."),
                   Table(["line", "KV", "linear step growth", "dense step growth", "faster from KV", "verdict"],
                         [[c.name, f"{d['lengths'][0]}–{d['lengths'][-1]}", times(d["flat"]),
                           f"{d['best_dense']} {times(d['dense_growth'])}",
                           str(d["faster_from"]) if d["faster_from"] else "none here", c.verdict]
                          for c, d in decode], verdict_columns=(5,))]
    ceiling = run.calibration.gemm_flops_per_s
    table = []
    for (backend, phase), group in rows.groupby(["backend", "phase"], sort=True):
        r = group.loc[group["length"].idxmax()]
        rate = float(r["flops"]) / float(r["median_s"]) if r["median_s"] else float("nan")
        share = f"{100 * rate / ceiling:.1f}%" if ceiling else "—"
        table.append([backend, phase, str(int(r["length"])), fmt_seconds(r["median_s"]), fmt_flops(rate), share])
    blocks += [Para("Each linear backend's throughput at its longest length (the chunked algorithm's FLOPs for a "
                    "prefill, the recurrence's for a decode step) against this run's measured GEMM ceiling: a "
                    "decode step reads its whole state for a few FLOPs per element, so it sits far below it."),
               Table(["backend", "phase", "length", "time", "FLOP/s", "of the GEMM ceiling"], table)]
    return blocks
