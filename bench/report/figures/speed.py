"""How fast: prefill throughput and latency against the sequence length, and the roofline."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from bench.analysis import frames
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
from bench.report.figures.layout import grid, usable_width, wrap
from bench.report.style import backend_color
from bench.report.units import flops_unit, fmt_bandwidth, fmt_bytes, fmt_flops


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


# each dtype's points, by their fill: one colour per backend and one marker per phase stay as in every figure
DTYPE_FILL = {"fp32": "full", "bf16": "left", "fp16": "bottom"}
DTYPE_STYLE = {"fp32": "-", "bf16": "-.", "fp16": (0, (5, 2, 1, 2, 1, 2))}


def _dtype_ceilings(ok: pd.DataFrame) -> dict[str, float]:
    """dtype -> its measured GEMM ceiling, for each dtype that ran (the run's main one where its own is missing)."""
    column = "dtype_gemm_flops_per_s" if "dtype_gemm_flops_per_s" in ok else "gemm_flops_per_s"
    return {str(d): float(v) for d, v in ok.groupby("dtype")[column].first().dropna().items()}


def _above_note(ok: pd.DataFrame, gemms: dict[str, float], copy: float) -> str:
    """Points above their own dtype's roof, and why: bytes that fit in the last-level cache are read from it, not
    from DRAM (the copy line); a point under another dtype's GEMM ceiling computes in that dtype (CPU kernels
    upcast bf16 to fp32); only the others mean a calibration taken on a busy machine."""
    roof = np.minimum(ok["dtype"].map(gemms).astype(float), ok["intensity"] * copy)
    above = ok[ok["flops_per_s"] > 1.05 * roof]
    if above.empty:
        return ""
    llc = ok["llc_bytes"].dropna() if "llc_bytes" in ok else pd.Series(dtype=float)
    memory_bound = above["intensity"] * copy < above["dtype"].map(gemms).astype(float)
    warm = above["timing_mode"].fillna("warm") != "cold" if "timing_mode" in above else memory_bound | True
    cached = memory_bound & warm & (above["bytes"] <= float(llc.iloc[0])) if len(llc) else memory_bound & False
    other_dtype = ~cached & (above["flops_per_s"] <= 1.05 * np.minimum(max(gemms.values()), above["intensity"] * copy))
    busy = ~cached & ~other_dtype
    parts = []
    if cached.any():
        parts.append(f"{int(cached.sum())} whose bytes fit in the {float(llc.iloc[0]) / 2**20:,.0f} MiB last-level "
                     "cache (read from it, above the DRAM copy line)")
    if other_dtype.any():
        fastest = max(gemms, key=gemms.get)
        parts.append(f"{int(other_dtype.sum())} in {', '.join(sorted(set(above.loc[other_dtype, 'dtype'])))} under "
                     f"{fastest}'s ceiling (the kernel computes in {fastest}, not in its inputs' dtype)")
    if busy.any():
        why = "a calibration taken on a busy machine" if len(llc) else \
            "data served from cache, or a calibration on a busy machine: this run records no cache size"
        parts.append(f"{int(busy.sum())} beyond every ceiling ({why})")
    return f"{len(above)} point(s) above their dtype's ceiling: " + "; ".join(parts)


def _cold_note(ok: pd.DataFrame) -> str:
    """The working sets of the points timed cold against the cache their copies were rotated past."""
    if "timing_mode" not in ok or "cold_set_bytes" not in ok:
        return ""
    cold = ok[ok["timing_mode"] == "cold"]
    sets, cache = cold["cold_set_bytes"].dropna(), cold["cache_bytes"].dropna()
    if sets.empty or cache.empty:
        return ""
    return (f"{len(cold)} decode point(s) timed cold: working sets of {fmt_bytes(sets.min())}–{fmt_bytes(sets.max())} "
            f"against a {fmt_bytes(cache.max())} cache, read from copies past it; prefill points are warm. ")


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
    gemms = _dtype_ceilings(ok) if len(gemm) else {}
    peak = max([float(ok["flops_per_s"].max()), *gemms.values()])
    factor, unit = flops_unit(peak)
    x_lo, x_hi = float(ok["intensity"].min()) / 2, float(ok["intensity"].max()) * 2
    handles: list = []
    if gemms and len(copy):
        b = float(copy.iloc[0])
        ridges = {d: g / b for d, g in gemms.items()}
        x_lo, x_hi = min(x_lo, min(ridges.values()) / 4), max(x_hi, max(ridges.values()) * 4)
        xs = np.geomspace(x_lo, max(ridges.values()), 50)
        ax.plot(xs, xs * b / factor, color="black", lw=2, ls="--", label="ceiling:copy")
        main = float(gemm.iloc[0])
        for dtype, g in sorted(gemms.items(), key=lambda kv: -kv[1]):
            name = "ceiling:gemm" if abs(g / main - 1) < 1e-9 else f"ceiling:gemm:{dtype}"
            style = DTYPE_STYLE.get(dtype, ":")
            ax.plot([ridges[dtype], x_hi], [g / factor, g / factor], color="black", lw=2, ls=style, label=name)
            ax.axvline(ridges[dtype], color="black", lw=0.6, ls=":")
            handles.append(Line2D([], [], color="black", lw=2, ls=style,
                                  label=f"{dtype} GEMM ceiling {fmt_flops(g)} (measured; ridge {ridges[dtype]:.3g} "
                                        "FLOP/byte)"))
        handles.append(Line2D([], [], color="black", lw=2, ls="--",
                              label=f"copy ceiling {fmt_bandwidth(b)} × intensity (measured)"))
    else:
        ax.text(0.02, 0.97, "no calibration in this run: ceilings not drawn", transform=ax.transAxes, va="top")
    phase_marker = {"prefill": "o", "decode": "^"}
    for backend, grp in by_backend(ok):
        for (phase, dtype), part in grp.groupby(["phase", "dtype"]):
            ax.plot(part["intensity"], part["flops_per_s"] / factor, ls="none", marker=phase_marker.get(phase, "s"),
                    fillstyle=DTYPE_FILL.get(str(dtype), "none"), color=backend_color(backend), alpha=0.75, ms=6,
                    mec=backend_color(backend), mew=0.8, label=f"{backend}:{phase}:{dtype}")
    if gemms and len(copy):
        note = _cold_note(ok) + _above_note(ok, gemms, float(copy.iloc[0]))
        if note:  # say why, or the reader will distrust the whole figure
            ax.text(0.02, 0.02, wrap(note, 0.9 * usable_width(fig), 8.5), transform=ax.transAxes, fontsize=8.5,
                    color="#444444", bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "none"})
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
    if ok["dtype"].nunique() > 1:
        handles += [Line2D([], [], color="grey", marker="o", ls="none", fillstyle=DTYPE_FILL.get(d, "none"),
                           label=f"{d} (marker fill)") for d in sorted(set(ok["dtype"]))]
    # below the axes, like every other figure: a legend at the side squeezed the plot and clipped its x label
    legend_below(fig, handles, fontsize=8.5)
    return fig
