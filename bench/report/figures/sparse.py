"""Sparse attention: each method's cost against length beside the best dense kernel (crossover marked), each
kernel's speedup over its dense run against density beside the ideal 1/density, and the indexer's share of DSA's
cost against length. The data and its rules: bench.analysis.sparse_cost (a line, the best dense kernel:
bench.analysis.sparse_line)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from bench.analysis.sparse_cost import crossovers, sparse_costs
from bench.analysis.sparse_line import one_line
from bench.claims.sparse import IDEAL_SHARE, SPARSE_BEATS
from bench.problem.sparsity import Sparsity
from bench.report.figures.axes import plain_log_axis, seconds_axis, seq_axis
from bench.report.figures.helpers import NOTE_SIZE, legend_below, modal_slice, sorted_backends
from bench.report.figures.layout import grid
from bench.report.style import backend_color, backend_marker

KIND_STYLES = {"block": "-", "docs": "--", "global": ":", "topk": "-."}
KIND_MARKERS = {"block": "s", "docs": "D", "global": "^", "topk": "o"}
MAX_PANELS = 6
FREE = ("seq_q", "sparsity", "mask")  # a panel keeps every method and both masks' most common one


def _kind(sparsity: str) -> str:
    return Sparsity.parse(sparsity).kind


def _length_label(phase: str) -> str:
    return "sequence length S (tokens, log scale)" if phase == "prefill" else "KV-cache length (tokens, log scale)"


def _kind_handles(kinds: list[str], line: bool) -> list[Line2D]:
    return [Line2D([], [], color="black", ls=KIND_STYLES[k] if line else "none", marker=KIND_MARKERS[k],
                   mfc="white", label=f"{k} sparsity") for k in kinds]


def _colour_handles(backends: list[str]) -> list[Line2D]:
    """A backend's colour alone: the markers here are the sparsity kinds'."""
    return [Line2D([], [], color=backend_color(b), lw=4, label=b) for b in backends]


def _one_line_each(rows: pd.DataFrame, free: tuple[str, ...]) -> pd.DataFrame:
    """The rows at one dtype (the most common) and the most common configuration of the shape fields not in
    `free`; the batch freed only where each length has one (bench.analysis.sparse_line.one_line: a GPU sweep at fixed
    tokens per batch), so that every line of a panel is one method over the lengths."""
    rows = rows[rows["dtype"] == rows["dtype"].mode().iloc[0]]
    if one_line(rows.groupby("seq_kv")["batch"].unique()):
        free = (*free, "batch")
    return modal_slice(rows, free)[0]


def _panels(costs: pd.DataFrame) -> list[tuple[tuple[str, str, str], pd.DataFrame]]:
    """(phase, mask, budget) groups, prefill and causal first, densities from the densest, at most MAX_PANELS; each
    at one dtype and its most common configuration of the other shape fields."""
    groups = []
    for key, rows in costs.groupby(["phase", "mask", "budget"], sort=False):
        groups.append((key, _one_line_each(rows, ("seq_q", "seq_kv", "sparsity"))))
    def order(group: tuple) -> tuple:  # prefill and causal first; densities from the densest, then tokens per query
        (phase, mask, _), rows = group
        unit, value = Sparsity.parse(rows["sparsity"].iloc[0]).budget or ("density", 1.0)
        return phase != "prefill", mask != "causal", unit != "density", -value if unit == "density" else value
    groups.sort(key=order)
    return groups[:MAX_PANELS]


def sparse_time(df: pd.DataFrame) -> Figure | None:
    """One panel per (phase, mask, budget): each method's cost per forward against length (total_s: kernel, indexer
    and a per-forward mask build), the best dense kernel's time as a black dashed line, S* ringed."""
    costs = sparse_costs(df)
    if costs.empty:
        return None
    panels = _panels(costs)
    cols = min(2, len(panels))
    rows_n = -(-len(panels) // cols)
    fig, axes = grid(rows_n, cols, "Sparse attention against the best dense kernel")
    lines = crossovers(costs, SPARSE_BEATS)
    for ax, ((phase, mask, budget), rows) in zip(axes.flat, panels, strict=False):
        dense = rows.drop_duplicates("length").sort_values("length")
        ax.plot(dense["length"], dense["best_dense_s"], color="black", ls="--", lw=1.6, zorder=3)
        for (sparsity, backend), line in rows.groupby(["sparsity", "backend"], sort=True):
            line = line.sort_values("length")
            kind = _kind(sparsity)
            ax.plot(line["length"], line["cost_s"], color=backend_color(backend), ls=KIND_STYLES[kind],
                    marker=KIND_MARKERS[kind], mfc="white", ms=5, lw=1.4)
            mine = lines[(lines["sparsity"] == sparsity) & (lines["backend"] == backend) & (lines["phase"] == phase)
                         & (lines["mask"] == mask) & lines["s_star"].notna()]
            for s_star in mine["s_star"]:
                at = line[line["length"] == s_star]
                ax.plot(at["length"], at["cost_s"], marker="o", ms=13, mfc="none", mec=backend_color(backend),
                        mew=1.8, ls="none", zorder=4)
        seq_axis(ax, rows["length"], _length_label(phase))
        seconds_axis(ax, [*rows["cost_s"], *rows["best_dense_s"]], "time per forward", force_log=True)
        first = rows.iloc[0]
        ax.set_title(f"{phase} {mask} · {budget}\n{first['dtype']} B={first['batch']} Hq={first['n_heads']} "
                     f"Hkv={first['n_kv_heads']} D={first['head_dim']}", fontsize=NOTE_SIZE)
        ax.grid(True, which="major", alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    kinds = sorted({_kind(s) for _, r in panels for s in r["sparsity"]})
    handles = [Line2D([], [], color="black", ls="--", lw=1.6, label="best dense kernel"),
               Line2D([], [], color="grey", marker="o", ms=13, mfc="none", ls="none",
                      label=f"S*: beats dense (≤ {SPARSE_BEATS:g}×) from here on"),
               *_kind_handles(kinds, line=True),
               *_colour_handles(sorted_backends(r for _, p in panels for r in p["backend"]))]
    left = len(costs.groupby(["phase", "mask", "budget"])) - len(panels)
    legend_below(fig, handles, note=f"{left} more budgets in the tables" if left > 0 else "")
    return fig


def sparse_speedup(df: pd.DataFrame) -> Figure | None:
    """One panel per phase: every sparse case's kernel speedup over its dense run against its density (log-log),
    the ideal 1/density as a black line and half of it dashed; dense masked kernels sit near 1 by construction."""
    costs = sparse_costs(df)
    if costs.empty:
        return None
    phases = [p for p in ("prefill", "decode") if p in set(costs["phase"])]
    fig, axes = grid(1, len(phases), "Sparse speedup against the ideal 1/density")
    for ax, phase in zip(axes.flat, phases, strict=True):
        rows = costs[costs["phase"] == phase]
        top = rows.groupby(["backend", "sparsity", "mask"])["length"].transform("max")
        for (backend, sparsity), pts in rows.groupby(["backend", "sparsity"]):
            longest = pts[pts["length"] == top.loc[pts.index]]
            kind = _kind(sparsity)
            ax.scatter(pts["density"], pts["speedup"], color=backend_color(backend), marker=KIND_MARKERS[kind],
                       s=18, alpha=0.35, linewidths=0)
            ax.scatter(longest["density"], longest["speedup"], color=backend_color(backend),
                       marker=KIND_MARKERS[kind], s=46, edgecolors="black", linewidths=0.6, zorder=3)
        lo = min(0.5, float(rows["density"].min()) / 1.5)
        d = np.geomspace(lo, 1.0, 50)
        ax.plot(d, 1 / d, color="black", lw=1.2)
        ax.plot(d, IDEAL_SHARE / d, color="black", lw=1.0, ls="--")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        y = [*rows["speedup"], 1 / lo, 0.8]
        ax.set_xlim(lo, 1.15)
        ax.set_ylim(min(y) / 1.3, max(y) * 1.3)
        plain_log_axis(ax.xaxis, lo, 1.15)
        plain_log_axis(ax.yaxis, min(y), max(y))
        ax.set_xlabel("density: kept pairs / the mask's pairs (log scale)")
        ax.set_ylabel("speedup over the dense run (log scale)")
        ax.set_title(phase, fontsize=NOTE_SIZE)
        ax.grid(True, which="major", alpha=0.3)
    kinds = sorted({_kind(s) for s in costs["sparsity"]})
    handles = [Line2D([], [], color="black", lw=1.2, label="ideal: 1/density"),
               Line2D([], [], color="black", lw=1.0, ls="--", label=f"{IDEAL_SHARE:g} × ideal (the claim's bar)"),
               Line2D([], [], color="grey", marker="o", mec="black", ls="none", label="outlined: longest length"),
               *_kind_handles(kinds, line=False), *_colour_handles(sorted_backends(costs["backend"]))]
    legend_below(fig, handles)
    return fig


def indexer_share(df: pd.DataFrame) -> Figure | None:
    """One panel per phase: the indexer's share of each top-K method's cost against length, indexer_s over
    indexer_s + median_s (the attention kernel's; a BlockMask's per-forward build is left out, so every kernel's
    share reads alike)."""
    if "indexer_s" not in df:
        return None
    rows = df[(df["status"] == "ok") & df["indexer_s"].notna() & df["median_s"].notna()].copy()
    if rows.empty:
        return None
    rows["share"] = 100 * rows["indexer_s"] / (rows["indexer_s"] + rows["median_s"])
    rows["length"] = rows["seq_kv"].astype(int)
    phases = [p for p in ("prefill", "decode") if p in set(rows["phase"])]
    fig, axes = grid(1, len(phases), "The top-K indexer's share of sparse attention's cost")
    handles: dict[str, Line2D] = {}
    masks: set[str] = set()
    for ax, phase in zip(axes.flat, phases, strict=True):
        mine = _one_line_each(rows[rows["phase"] == phase], ("seq_q", "seq_kv", "sparsity", "mask"))
        for (backend, sparsity, mask), line in mine.groupby(["backend", "sparsity", "mask"]):
            line = line.sort_values("length")
            label = f"{sparsity} · {backend}"
            handles[label], = ax.plot(line["length"], line["share"], color=backend_color(backend),
                                      marker=backend_marker(backend), ls="-" if mask == "causal" else "--",
                                      label=label)
            masks.add(mask)
        first = mine.iloc[0]
        seq_axis(ax, mine["length"], _length_label(phase))
        ax.set_ylim(0, 100)
        ax.set_ylabel("indexer / (indexer + attention kernel), %")
        ax.set_title(f"{phase} · {first['dtype']} B={first['batch']} Hq={first['n_heads']} Hkv={first['n_kv_heads']} "
                     f"D={first['head_dim']}", fontsize=NOTE_SIZE)
        ax.grid(True, alpha=0.3)
    note = "dashed: mask none; solid: causal" if len(masks) > 1 else ""
    legend_below(fig, [Line2D([], [], color=h.get_color(), marker=h.get_marker(), label=label)
                       for label, h in handles.items()], note=note)
    return fig
