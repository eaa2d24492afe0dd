"""Shared-prefix batches: the time of one decode step against the prefix length, the best plain kernel (every
request over its whole context) dashed and the best cascade solid, one colour per batch; beside it the plain step's
time over the cascade's (the cascade's speedup), 1× marked. One configuration (dtype, heads, head dim, suffix): the
one the run measured most. The pairs and the best plain kernel are bench.claims.cascade's."""

from __future__ import annotations

import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from bench.claims.cascade import CASCADE_BEATS, cascade_pairs
from bench.report.figures.axes import plain_log_axis, seconds_axis, seq_axis
from bench.report.figures.helpers import legend_below
from bench.report.figures.layout import grid

CONFIG = ["dtype", "n_heads", "n_kv_heads", "head_dim", "suffix", "seq_q"]


def prefix_decode(df: pd.DataFrame) -> Figure | None:
    rows = cascade_pairs(df)
    if rows.empty:
        return None
    config = rows.groupby(CONFIG).size().idxmax()  # the configuration measured most
    rows = rows[(rows[CONFIG] == pd.Series(config, index=CONFIG)).all(axis=1)]
    # per (batch, prefix): the fastest cascade backend and the best plain step (the same for every cascade row)
    best = rows.loc[rows.groupby(["batch", "prefix"])["median_s"].idxmin()].sort_values(["batch", "prefix"])
    dtype, hq, hkv, d, suffix, sq = config
    fig, axes = grid(1, 2, f"Shared-prefix decode: plain against cascade ({dtype}, Hq {hq} / Hkv {hkv}, D {d}, "
                           f"each request's own suffix {suffix} tokens, {sq} quer{'y' if sq == 1 else 'ies'} each)")
    time_ax, speed_ax = axes[0][0], axes[0][1]
    batches = sorted(best["batch"].unique())
    cmap = colormaps["viridis"]
    colours = {b: cmap(0.85 * i / max(1, len(batches) - 1)) for i, b in enumerate(batches)}
    for b in batches:
        line = best[best["batch"] == b]
        time_ax.plot(line["prefix"], line["plain_median_s"], ls="--", marker="o", mfc="white", color=colours[b])
        time_ax.plot(line["prefix"], line["median_s"], ls="-", marker="o", color=colours[b])
        speed_ax.plot(line["prefix"], line["plain_median_s"] / line["median_s"], ls="-", marker="o",
                      color=colours[b])
    seq_axis(time_ax, best["prefix"], "shared prefix P (tokens, log scale)")
    seq_axis(speed_ax, best["prefix"], "shared prefix P (tokens, log scale)")
    seconds_axis(time_ax, [*best["median_s"], *best["plain_median_s"]], "time per decode step", force_log=True)
    time_ax.set_title("time per step (lower is better)")
    speedup = best["plain_median_s"] / best["median_s"]
    speed_ax.set_yscale("log")
    lo, hi = min(0.5, float(speedup.min()) / 1.3), max(2.0, float(speedup.max()) * 1.3)
    speed_ax.set_ylim(lo, hi)
    plain_log_axis(speed_ax.yaxis, lo, hi)
    speed_ax.axhline(1.0, color="black", lw=1)
    speed_ax.axhline(1 / CASCADE_BEATS, color="black", lw=1, ls=":")
    speed_ax.set_ylabel("best plain step / cascade step (×)")
    speed_ax.set_title("cascade's speedup (above 1: cascade faster)")
    def named(names: list[str]) -> str:  # each point is the fastest of these: say so where there are several
        return names[0] if len(names) == 1 else "the fastest of " + ", ".join(names)
    cascade_names = named(sorted(best["backend"].unique()))
    plain_names = named(sorted(best["plain_backend"].unique()))
    handles = [Line2D([], [], color=colours[b], lw=3, label=f"batch {b}") for b in batches]
    handles += [Line2D([], [], color="black", ls="--", marker="o", mfc="white", label=f"plain ({plain_names})"),
                Line2D([], [], color="black", ls="-", marker="o", label=f"cascade ({cascade_names})"),
                Line2D([], [], color="black", ls=":", label=f"the claim's bar ({1 / CASCADE_BEATS:.2f}×)")]
    legend_below(fig, handles)
    return fig
