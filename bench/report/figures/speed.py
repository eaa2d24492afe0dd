"""How fast: prefill throughput and latency against the sequence length, and the roofline."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from bench.report import frames
from bench.report.figures.axes import plain_log_axis, seconds_axis
from bench.report.figures.helpers import (
    WIDE,
    Panel,
    backend_handles,
    backend_lines,
    by_backend,
    facet_grid,
    legend_below,
    noisy_handles,
    sorted_backends,
    status_handles,
)
from bench.report.figures.layout import grid
from bench.report.style import backend_color
from bench.report.units import flops_unit, fmt_bandwidth, fmt_flops


def throughput(df: pd.DataFrame) -> Figure | None:
    pre = df[df["phase"] == "prefill"]
    if frames.ok_rows(pre).empty:
        return None
    factor, unit = flops_unit(float(pre["flops_per_s"].max()))

    def draw(ax: Axes, rows: pd.DataFrame, _: Panel) -> bool:
        noisy = backend_lines(ax, rows, "seq_kv", lambda grp: grp["flops_per_s"] / factor)
        values = frames.ok_rows(rows)["flops_per_s"]
        if len(values) and values.max() / values.min() > WIDE:
            ax.set_yscale("log")
            plain_log_axis(ax.yaxis, values.min(), values.max())
        ax.set_ylim(bottom=0 if ax.get_yscale() == "linear" else None)
        ax.set_ylabel(f"achieved {unit}" + (", log scale" if ax.get_yscale() == "log" else ""))
        return noisy

    drawn = facet_grid(pre, "Prefill throughput vs sequence length (higher is better)", draw)
    return drawn.with_legend(backend_handles(drawn.backends) + status_handles(drawn.statuses)
                             + noisy_handles(drawn.noisy))


def _with_exponent(backend: str, grp: pd.DataFrame) -> str:
    k = frames.fit_exponent(grp["seq_kv"].astype(float), grp["median_s"])
    return f"{backend}  k={k:.2f}" if k is not None else f"{backend}  (one point)"


def latency(df: pd.DataFrame) -> Figure | None:
    pre = df[df["phase"] == "prefill"]
    if frames.ok_rows(pre).empty:
        return None

    def draw(ax: Axes, rows: pd.DataFrame, _: Panel) -> bool:
        noisy = backend_lines(ax, rows, "seq_kv", lambda grp: grp["median_s"], _with_exponent)
        seconds_axis(ax, frames.ok_rows(rows)["median_s"], "median latency per call", force_log=True)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best", frameon=True, framealpha=0.85, handlelength=1.5)
        return noisy

    drawn = facet_grid(pre, "Prefill latency vs sequence length, log–log (legend: fitted exponent k in time ∝ S^k)",
                       draw, panel=(4.6, 3.8))
    return drawn.with_legend(status_handles(drawn.statuses) + noisy_handles(drawn.noisy))


def roofline(df: pd.DataFrame) -> Figure | None:
    ok = frames.ok_rows(df)
    ok = ok[(ok["intensity"] > 0) & (ok["flops_per_s"] > 0)]
    if "fwd" in set(ok["pass"]):
        ok = ok[ok["pass"] == "fwd"]  # bytes are a forward model: fwd+bwd points would sit at the wrong x
    if ok.empty:
        return None
    fig, axes = grid(1, 1, "Roofline: achieved FLOP/s vs arithmetic intensity (forward passes)", panel=(8.0, 5.2))
    ax = axes[0, 0]
    gemm = df["gemm_flops_per_s"].dropna()
    copy = df["copy_bytes_per_s"].dropna()
    peak = max(float(ok["flops_per_s"].max()), float(gemm.iloc[0]) if len(gemm) else 0.0)
    factor, unit = flops_unit(peak)
    x_lo, x_hi = float(ok["intensity"].min()) / 2, float(ok["intensity"].max()) * 2
    handles: list = []
    if len(gemm) and len(copy):
        g, b = float(gemm.iloc[0]), float(copy.iloc[0])
        ridge = g / b
        x_lo, x_hi = min(x_lo, ridge / 4), max(x_hi, ridge * 4)
        xs = np.geomspace(x_lo, ridge, 50)
        ax.plot(xs, xs * b / factor, color="black", lw=2, ls="--", label="ceiling:copy")
        ax.plot([ridge, x_hi], [g / factor, g / factor], color="black", lw=2, label="ceiling:gemm")
        ax.axvline(ridge, color="black", lw=0.6, ls=":")
        handles += [Line2D([], [], color="black", lw=2, label=f"GEMM ceiling {fmt_flops(g)} (measured)"),
                    Line2D([], [], color="black", lw=2, ls="--",
                           label=f"copy ceiling {fmt_bandwidth(b)} × intensity (measured)"),
                    Line2D([], [], color="black", lw=0.6, ls=":", label=f"ridge at {ridge:.3g} FLOP/byte")]
    else:
        ax.text(0.02, 0.97, "no calibration in this run: ceilings not drawn", transform=ax.transAxes, va="top")
    phase_marker = {"prefill": "o", "decode": "^"}
    for backend, grp in by_backend(ok):
        for phase, part in grp.groupby("phase"):
            ax.plot(part["intensity"], part["flops_per_s"] / factor, ls="none", marker=phase_marker.get(phase, "s"),
                    color=backend_color(backend), alpha=0.75, ms=6, mec="white", mew=0.5, label=f"{backend}:{phase}")
    if len(gemm) and len(copy):
        roof = np.minimum(float(gemm.iloc[0]), ok["intensity"] * float(copy.iloc[0]))
        above = int((ok["flops_per_s"] > 1.05 * roof).sum())
        if above:  # say why, or the reader will distrust the whole figure
            ax.text(0.02, 0.02, f"{above} point(s) above the measured ceiling: data served from cache, or a "
                    "calibration taken on a busy machine", transform=ax.transAxes, fontsize=8.5, color="#444444")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    plain_log_axis(ax.xaxis, x_lo, x_hi)
    y_lo, y_hi = ax.get_ylim()
    plain_log_axis(ax.yaxis, y_lo, y_hi)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of minimum traffic, log scale)")
    ax.set_ylabel(f"achieved {unit} (log scale)")
    ax.grid(alpha=0.3)
    handles += [Patch(color=backend_color(b), label=b) for b in sorted_backends(ok["backend"])]
    handles += [Line2D([], [], color="grey", marker=m, ls="none", label=p) for p, m in phase_marker.items()
                if p in set(ok["phase"])]
    # below the axes, like every other figure: a legend at the side squeezed the plot and clipped its x label
    legend_below(fig, handles, fontsize=8.5)
    return fig
