"""The sparse section: each sparse method (a sparsity on a backend) at the longest length it ran beside the fastest
dense kernel, with its crossover length S* and its executed against useful FLOPs (bench.analysis.sparse_cost)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from bench.analysis.load import RunInfo
from bench.analysis.sparse_cost import crossovers, sparse_costs
from bench.claims.sparse import SPARSE_BEATS
from bench.report.blocks import Block, Heading, Para, Table, times
from bench.report.units import fmt_flops, fmt_seconds

if TYPE_CHECKING:
    from bench.report.sections import Report


def section(df: pd.DataFrame, run: RunInfo, report: Report) -> list[Block] | None:
    """None for a run without sparse cases; the heading is the section's own, the same for every run."""
    costs = sparse_costs(df)
    if costs.empty:
        return None
    lines = crossovers(costs, SPARSE_BEATS)
    rows = []
    for _, line in lines.sort_values(["phase", "mask", "budget", "last_ratio"]).iterrows():
        mine = costs[(costs["method"] == line["method"]) & (costs["phase"] == line["phase"])
                     & (costs["mask"] == line["mask"]) & (costs["dtype"] == line["dtype"])
                     & (costs["n_kv_heads"] == line["n_kv_heads"])]
        r = mine.loc[mine["length"].idxmax()]
        executed = r.get("executed_flops")
        efficiency = f"{executed / r['useful_flops']:.2f}" if pd.notna(executed) and r["useful_flops"] else "—"
        index = fmt_seconds(r["indexer_s"]) if pd.notna(r.get("indexer_s")) else "—"
        rows.append([f"{r['phase']} {r['mask']} {r['dtype']} Hq={r['n_heads']} Hkv={r['n_kv_heads']}",
                     r["budget"], r["method"], f"{r['density']:.3g}", str(r["length"]), fmt_seconds(r["median_s"]),
                     index, fmt_seconds(r["cost_s"]), f"{r['best_dense']} {fmt_seconds(r['best_dense_s'])}",
                     times(r["ratio"]), str(int(line["s_star"])) if pd.notna(line["s_star"]) else "none here",
                     fmt_flops(r["flops"] / r["median_s"]), efficiency,
                     f"{times(r['speedup'])} of {times(r['ideal'])}"])
    return [Heading("Sparse attention"),
            Para("Each sparse method (a sparsity on a backend) at the longest length it ran: the kernel's time, its "
                 "top-K indexer's, and their sum with any per-forward mask build (cost per forward), against the "
                 "fastest dense kernel at the same shape; S* is the length from which it stays faster. Throughput "
                 "counts useful FLOPs (the pairs kept); executed / useful is what the kernel computes per useful "
                 "FLOP (1 is ideal; a dense masked kernel computes 1 / density). The speedup is over the same "
                 "backend's dense run (the fastest dense kernel's for a sparse-only kernel), beside the ideal "
                 "1 / density."),
            Table(["shape", "budget", "method", "density", "length", "kernel", "indexer", "cost per forward",
                   "best dense", "cost / dense", "S*", "useful FLOP/s", "executed / useful", "speedup vs ideal"],
                  rows)]
