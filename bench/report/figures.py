"""Figures from one run's tidy frame: one small function per figure, each returning a matplotlib Figure or None.

Figures are built with matplotlib.figure.Figure directly (no pyplot): no global state, no GUI backend, so
they render headless and can be inspected before they are saved. A function returns None when the run has
no data for its figure, and the report leaves the figure out.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib import colors as mcolors
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator

from bench.metrics import kv_cache_bytes
from bench.presets import PRESETS
from bench.report import claims
from bench.report.style import (
    NOT_OK,
    STATUS_MARKERS,
    VARIANT_MARKERS,
    VARIANT_ORDER,
    VARIANT_STYLES,
    backend_color,
    backend_marker,
    backend_sort_key,
    flops_unit,
    fmt_bandwidth,
    fmt_bytes,
    fmt_flops,
    fmt_seconds,
    fmt_tokens,
    variant_label,
)

# Axes a figure does not plot are held at their most common value (the figure says which).
CONFIG_KEYS = ["batch", "n_heads", "n_kv_heads", "head_dim", "mask", "pass", "seq_q"]
STATUS_WORDS = {"unsupported": "unsupported", "oom": "out of memory", "error": "error", "incorrect": "incorrect"}
WIDE = 30.0  # data spanning more than this factor gets a log axis


# ---- helpers -------------------------------------------------------------------------------------------------

def _sorted_backends(values) -> list[str]:
    return sorted({str(v) for v in values}, key=backend_sort_key)


def _by_backend(rows: pd.DataFrame):
    """(backend, rows) in the fixed backend order, so every legend lists backends the same way."""
    for backend in _sorted_backends(rows["backend"]):
        yield backend, rows[rows["backend"] == backend]


def _variants(values) -> list[str]:
    present = {str(v) for v in values}
    return [v for v in VARIANT_ORDER if v in present] + sorted(present - set(VARIANT_ORDER))


def modal_slice(df: pd.DataFrame, free: tuple[str, ...]) -> tuple[pd.DataFrame, str]:
    """Rows at the most common configuration of CONFIG_KEYS not in `free`, and a short description of it."""
    keys = [k for k in CONFIG_KEYS if k not in free]
    if df.empty or not keys:
        return df, ""
    counts = df.groupby(keys, dropna=False).size()
    top = counts.idxmax()
    top = top if isinstance(top, tuple) else (top,)
    chosen = pd.DataFrame([top], columns=keys).astype({k: df[k].dtype for k in keys})
    rows = df.merge(chosen, on=keys, how="inner")  # merge, not ==: a missing value matches a missing value
    names = {"batch": "B", "n_heads": "Hq", "n_kv_heads": "Hkv", "head_dim": "D", "seq_q": "Sq"}
    parts = [f"{names[k]}={v}" if k in names else str(v) for k, v in zip(keys, top, strict=True)]
    return rows, " ".join(parts)


def _grid(nrows: int, ncols: int, title: str, sharey: bool | str = False,
          panel: tuple[float, float] = (4.4, 3.4)) -> tuple[Figure, np.ndarray]:
    width = panel[0] * ncols + 0.6
    fig = Figure(figsize=(width, panel[1] * nrows + 1.4), layout="constrained", dpi=100)
    axes = fig.subplots(nrows, ncols, squeeze=False, sharey=sharey)
    # ~10 px per bold 13 pt character: wrap rather than clip a title wider than a narrow figure
    fig.suptitle(textwrap.fill(title, int(width * 100 / 10.5)), fontsize=13, fontweight="bold")
    return fig, axes


def _seq_axis(ax: Axes, values, label: str = "sequence length S (tokens, log scale)") -> None:
    ticks = sorted({int(v) for v in values})
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: fmt_tokens(x)))
    ax.xaxis.set_minor_locator(NullLocator())
    if ticks:
        ax.set_xlim(ticks[0] / 1.35, ticks[-1] * 1.35)
    ax.set_xlabel(label)


def _seconds_axis(ax: Axes, values, label: str, force_log: bool = False) -> None:
    """Seconds with units on the ticks; log once the values span about a decade (1-2-5 ticks: never one label)."""
    values = np.asarray([v for v in values if v and v > 0], dtype=float)
    if force_log or (len(values) and values.max() / values.min() > WIDE / 3):
        ax.set_yscale("log")
        # 1-2-5 ticks over a decade or two (so an axis never shows a single label), decades beyond that
        narrow = len(values) and values.max() / values.min() < 100
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5) if narrow else (1,)))
        ax.yaxis.set_minor_locator(LogLocator(base=10, subs="auto"))
        label += " (log scale)"
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: fmt_seconds(y) if y > 0 else "0"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel(label)


def _bytes_axis(ax: Axes, label: str) -> None:
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_locator(LogLocator(base=2, numticks=8))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: fmt_bytes(y)))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_ylabel(label)


BAND = 0.1  # fraction of an axis' height kept free at the bottom for the cases that did not run


def _mark_not_ok(ax: Axes, rows: pd.DataFrame, x: str, jitter: dict[str, float] | None = None,
                 skip: frozenset[str] = frozenset()) -> set[str]:
    """Cases without a time, drawn in a band at the axis bottom in their backend's colour; returns the statuses.

    Backends in `skip` never ran in the whole figure: the figure lists them in a note instead of markers."""
    bad = rows[rows["status"].isin(NOT_OK) & ~rows["backend"].isin(skip)]
    for (backend, status), grp in bad.groupby(["backend", "status"]):
        xs = grp[x].astype("float64").to_numpy() * (jitter or {}).get(backend, 1.0)
        line, = ax.plot(xs, np.full(len(xs), BAND / 2), ls="none", marker=STATUS_MARKERS[status], ms=7, mew=1.8,
                        color=backend_color(backend), transform=ax.get_xaxis_transform(), clip_on=False, zorder=5)
        line.set_gid(f"status:{status}:{backend}")
    return set(bad["status"])


def _reserve_bands(axes: np.ndarray) -> None:
    """Push the data up so the not-run markers sit in their own shaded band (limits once per shared y axis)."""
    moved: set[int] = set()
    for ax in axes.ravel():
        if not any(str(line.get_gid()).startswith("status:") for line in ax.lines):
            continue
        ax.add_patch(Rectangle((0, 0), 1, BAND, transform=ax.transAxes, facecolor="#f0f0f0", edgecolor="none",
                               zorder=0))
        group = ax.get_shared_y_axes().get_siblings(ax)
        if not moved.isdisjoint(id(a) for a in group):
            continue
        moved.update(id(a) for a in group)
        lo, hi = ax.get_ylim()
        if ax.get_yscale() == "log":
            ax.set_ylim(lo / (hi / lo) ** (BAND / (1 - BAND)), hi)
        else:
            ticks = [t for t in ax.get_yticks() if lo <= t <= hi]
            ax.set_ylim(lo - (hi - lo) * BAND / (1 - BAND), hi)
            ax.set_yticks(ticks)  # no negative ticks inside the band


def never_ran(rows: pd.DataFrame) -> dict[str, str]:
    """Backends with no ok case at all in a figure's rows -> their (most common) reason."""
    out = {}
    for backend, grp in _by_backend(rows):
        if not (grp["status"] == "ok").any():
            reasons = grp["reason"].replace("", np.nan).dropna()
            reason = str(reasons.mode().iloc[0] if len(reasons) else grp["status"].mode().iloc[0])
            reason = reason.removeprefix(f"{backend}: ")  # backends' reasons start with their own name
            out[backend] = reason[:110]
    return out


def _never_ran_text(never: dict[str, str]) -> str:
    by_reason: dict[str, list[str]] = {}
    for backend, reason in never.items():
        by_reason.setdefault(reason, []).append(backend)
    text = "Did not run at any size: " + "; ".join(f"{', '.join(b)} ({r})" for r, b in by_reason.items())
    return textwrap.fill(text, 150)  # ~7 px per 9 pt character: wrap inside the narrowest figure


def _series(ax: Axes, grp: pd.DataFrame, x: str, y: pd.Series, backend: str, label: str) -> bool:
    """One backend's timed cases as a line; timings the engine flagged noisy get hollow markers."""
    xs = grp[x].astype(float).to_numpy()
    ys = np.asarray(y, dtype=float)
    color, marker = backend_color(backend), backend_marker(backend)
    ax.plot(xs, ys, color=color, marker=marker, label=label)
    flagged = grp["noisy"].fillna(False).to_numpy(dtype=bool)
    if flagged.any():
        hollow, = ax.plot(xs[flagged], ys[flagged], ls="none", marker=marker, color=color, mfc="white", mew=1.5,
                          zorder=4)
        hollow.set_gid(f"noisy:{backend}")
    return bool(flagged.any())


def _noisy_handles(noisy: bool) -> list[Line2D]:
    return [Line2D([], [], color="black", marker="o", mfc="white", ls="none",
                   label="hollow: timing flagged noisy")] if noisy else []


def _jitter(backends: list[str], spread: float = 0.05) -> dict[str, float]:
    """Small multiplicative x offsets so markers of several backends at one length do not hide each other."""
    n = len(backends)
    return {b: 2 ** (spread * (i - (n - 1) / 2)) for i, b in enumerate(backends)}


def _backend_handles(backends: list[str], line: bool = True, hollow: bool = False) -> list[Line2D]:
    return [Line2D([], [], color=backend_color(b), marker=backend_marker(b), ls="-" if line else "none", label=b,
                   **({"mfc": "white", "mew": 1.5} if hollow else {})) for b in backends]


def _status_handles(statuses: set[str]) -> list[Line2D]:
    return [Line2D([], [], color="black", marker=STATUS_MARKERS[s], ls="none", mew=1.8,
                   label=f"{STATUS_WORDS[s]} (grey band at the bottom)") for s in NOT_OK if s in statuses]


def _legend_below(fig: Figure, handles: list, never: dict[str, str] | None = None) -> None:
    """One legend under the panels; backends that never ran are named in its title, not silently dropped."""
    title = _never_ran_text(never) if never else None
    if handles or title:
        legend = fig.legend(handles=handles, loc="outside lower center", ncols=max(1, min(len(handles), 5)),
                            fontsize=9, frameon=False, title=title, title_fontsize=9)
        legend.get_title().set_color("#444444")


def _facets(df: pd.DataFrame) -> tuple[list[str], list[str]]:
    return sorted({str(d) for d in df["dtype"]}), _variants(df["variant"])


def _empty_note(ax: Axes, text: str = "no cases") -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="grey")


# ---- a. throughput -------------------------------------------------------------------------------------------

def throughput(df: pd.DataFrame) -> Figure | None:
    pre = df[df["phase"] == "prefill"]
    if claims.ok_rows(pre).empty:
        return None
    dtypes, variants = _facets(pre)
    peak = float(pre["flops_per_s"].max())
    factor, unit = flops_unit(peak)
    fig, axes = _grid(len(dtypes), len(variants), "Prefill throughput vs sequence length (higher is better)")
    never = never_ran(pre)
    backends = [b for b in _sorted_backends(pre["backend"]) if b not in never]
    jitter = _jitter(backends)
    statuses: set[str] = set()
    noisy = False
    for r, dtype in enumerate(dtypes):
        for c, variant in enumerate(variants):
            ax = axes[r, c]
            rows, desc = modal_slice(pre[(pre["dtype"] == dtype) & (pre["variant"] == variant)], ("seq_q",))
            ax.set_title(f"{variant_label(variant)} · {dtype}\n{desc}", fontsize=9)
            for backend, grp in _by_backend(claims.ok_rows(rows)):
                grp = grp.sort_values("seq_kv")
                noisy |= _series(ax, grp, "seq_kv", grp["flops_per_s"] / factor, backend, backend)
            statuses |= _mark_not_ok(ax, rows, "seq_kv", jitter, frozenset(never))
            _seq_axis(ax, rows["seq_kv"] if len(rows) else pre["seq_kv"])
            values = claims.ok_rows(rows)["flops_per_s"]
            if len(values) and values.max() / values.min() > WIDE:
                ax.set_yscale("log")
            ax.set_ylim(bottom=0 if ax.get_yscale() == "linear" else None)
            ax.set_ylabel(f"achieved {unit}" + (", log scale" if ax.get_yscale() == "log" else ""))
            ax.grid(alpha=0.3)
            if rows.empty:
                _empty_note(ax)
    _reserve_bands(axes)
    _legend_below(fig, _backend_handles(backends) + _status_handles(statuses) + _noisy_handles(noisy), never)
    return fig


# ---- b. latency ----------------------------------------------------------------------------------------------

def latency(df: pd.DataFrame) -> Figure | None:
    pre = df[df["phase"] == "prefill"]
    if claims.ok_rows(pre).empty:
        return None
    dtypes, variants = _facets(pre)
    fig, axes = _grid(len(dtypes), len(variants), "Prefill latency vs sequence length, log–log "
                      "(legend: fitted exponent k in time ∝ S^k)", panel=(4.6, 3.8))
    never = never_ran(pre)
    backends = [b for b in _sorted_backends(pre["backend"]) if b not in never]
    jitter = _jitter(backends)
    statuses: set[str] = set()
    noisy = False
    for r, dtype in enumerate(dtypes):
        for c, variant in enumerate(variants):
            ax = axes[r, c]
            rows, desc = modal_slice(pre[(pre["dtype"] == dtype) & (pre["variant"] == variant)], ("seq_q",))
            ax.set_title(f"{variant_label(variant)} · {dtype}\n{desc}", fontsize=9)
            for backend, grp in _by_backend(claims.ok_rows(rows)):
                grp = grp.sort_values("seq_kv")
                k = claims.fit_exponent(grp["seq_kv"].astype(float), grp["median_s"])
                label = f"{backend}  k={k:.2f}" if k is not None else f"{backend}  (one point)"
                noisy |= _series(ax, grp, "seq_kv", grp["median_s"], backend, label)
            statuses |= _mark_not_ok(ax, rows, "seq_kv", jitter, frozenset(never))
            _seq_axis(ax, rows["seq_kv"] if len(rows) else pre["seq_kv"])
            _seconds_axis(ax, claims.ok_rows(rows)["median_s"], "median latency per call", force_log=True)
            ax.grid(alpha=0.3, which="major")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7, loc="upper left", frameon=True, framealpha=0.85, handlelength=1.5)
            if rows.empty:
                _empty_note(ax)
    _reserve_bands(axes)
    _legend_below(fig, _status_handles(statuses) + _noisy_handles(noisy), never)
    return fig


# ---- c. peak memory ------------------------------------------------------------------------------------------

def peak_memory(df: pd.DataFrame) -> Figure | None:
    pre = df[df["phase"] == "prefill"]
    measured = pre[pre["peak_mem_bytes"].astype("float64") > 0]
    if measured.empty:
        return None
    dtypes, variants = _facets(pre)
    fig, axes = _grid(len(dtypes), len(variants), "Peak memory above the inputs vs sequence length "
                      "(points: measured, lines: analytic model)")
    never = never_ran(pre)
    backends = [b for b in _sorted_backends(pre["backend"]) if b not in never]
    jitter = _jitter(backends)
    statuses: set[str] = set()
    for r, dtype in enumerate(dtypes):
        for c, variant in enumerate(variants):
            ax = axes[r, c]
            rows, desc = modal_slice(pre[(pre["dtype"] == dtype) & (pre["variant"] == variant)], ("seq_q",))
            ax.set_title(f"{variant_label(variant)} · {dtype}\n{desc}", fontsize=9)
            for backend, grp in _by_backend(rows):
                grp = grp.sort_values("seq_kv")
                color = backend_color(backend)
                model = grp[grp["model_mem_bytes"].astype("float64") > 0]
                if len(model):
                    ax.plot(model["seq_kv"].astype(float), model["model_mem_bytes"].astype(float), color=color,
                            lw=1.3, alpha=0.8, label=f"model:{backend}")
                meas = grp[(grp["status"] == "ok") & (grp["peak_mem_bytes"].astype("float64") > 0)]
                if len(meas):
                    ax.plot(meas["seq_kv"].astype(float) * jitter[backend], meas["peak_mem_bytes"].astype(float),
                            ls="none", color=color, marker=backend_marker(backend), ms=6, mfc="white", mew=1.5,
                            label=f"measured:{backend}")
            statuses |= _mark_not_ok(ax, rows, "seq_kv", jitter, frozenset(never))
            _seq_axis(ax, rows["seq_kv"] if len(rows) else pre["seq_kv"])
            _bytes_axis(ax, "peak memory above inputs (log scale)")
            ax.grid(alpha=0.3)
            if rows.empty:
                _empty_note(ax)
    kinds = [Line2D([], [], color="black", marker="o", mfc="white", ls="none", label="measured peak"),
             Line2D([], [], color="black", lw=1.3, label="analytic model")]
    _reserve_bands(axes)
    _legend_below(fig, _backend_handles(backends, line=False, hollow=True) + kinds + _status_handles(statuses), never)
    return fig


# ---- d. heads sweep ------------------------------------------------------------------------------------------

def heads_sweep(df: pd.DataFrame) -> Figure | None:
    pre = df[(df["phase"] == "prefill") & (df["variant"] == "mha")]
    per_d = pre.groupby("d_model")["n_heads"].nunique()
    per_d = per_d[per_d >= 3]
    if per_d.empty:
        return None
    d_model = int(per_d.idxmax())
    sweep = pre[pre["d_model"] == d_model]
    dtype = sweep["dtype"].mode().iloc[0]
    sweep, desc = modal_slice(sweep[sweep["dtype"] == dtype], ("n_heads", "head_dim", "n_kv_heads", "seq_q"))
    # Only what was swept: a backend at a length with one head count is just the main sweep passing through.
    sweep = sweep[sweep.groupby(["backend", "seq_kv"])["n_heads"].transform("nunique") >= 2]
    seqs = [int(s) for s, n in sweep.groupby("seq_kv")["n_heads"].nunique().items() if n >= 3]
    if not seqs:
        return None
    sweep = sweep[sweep["seq_kv"].isin(seqs)]
    if len(seqs) > 4:  # a few lengths, spread over the range, keep the panels readable
        seqs = [seqs[i] for i in np.linspace(0, len(seqs) - 1, 4).round().astype(int)]
    fig, axes = _grid(1, len(seqs), f"Heads sweep at fixed d_model={d_model}: the same FLOPs at every head count, "
                      "so flat lines mean the free lunch holds", sharey=False, panel=(4.2, 3.6))
    never = never_ran(sweep)
    backends = [b for b in _sorted_backends(sweep["backend"]) if b not in never]
    jitter = _jitter(backends)
    statuses: set[str] = set()
    noisy = False
    heads = sorted({int(h) for h in sweep["n_heads"]})
    for c, seq in enumerate(seqs):
        ax = axes[0, c]
        rows = sweep[sweep["seq_kv"] == seq]
        ax.set_title(f"S={fmt_tokens(seq)} · {dtype} · {desc}", fontsize=9)
        for backend, grp in _by_backend(claims.ok_rows(rows)):
            grp = grp.sort_values("n_heads")
            noisy |= _series(ax, grp, "n_heads", grp["median_s"], backend, backend)
        statuses |= _mark_not_ok(ax, rows, "n_heads", jitter, frozenset(never))
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(heads))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{int(x)}\nD={d_model // int(x)}"))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlim(heads[0] / 1.4, heads[-1] * 1.4)
        ax.set_xlabel("query heads Hq (head dim D = d_model / Hq)")
        _seconds_axis(ax, claims.ok_rows(rows)["median_s"], "median latency per call")
        ax.grid(alpha=0.3)
    _reserve_bands(axes)
    _legend_below(fig, _backend_handles(backends) + _status_handles(statuses) + _noisy_handles(noisy), never)
    return fig


# ---- e. KV cache ---------------------------------------------------------------------------------------------

PRESET_COLORS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666",
                 "#1f78b4")


def kv_cache(df: pd.DataFrame) -> Figure:
    """Analytic, from the presets: always drawn; the run adds its device's memory as a ceiling."""
    tokens = 2.0 ** np.arange(8, 18)  # 256 .. 128k tokens
    fig, axes = _grid(1, 2, "KV-cache size vs context (bf16, batch 1, all layers)", panel=(6.2, 5.6))
    left, right = axes[0]
    decoders = [p for p in PRESETS.values() if not p.encoder_only]
    drawn: dict[tuple, str] = {}
    for i, p in enumerate(decoders):
        sizes = [kv_cache_bytes(p.layers, p.n_kv_heads, p.head_dim, int(t), window=p.window) for t in tokens]
        label = f"{p.name} ({variant_label(p.variant)} {p.n_heads}/{p.n_kv_heads})" + (
            f", window {fmt_tokens(p.window)}" if p.window else "")
        if tuple(sizes) in drawn:  # e.g. transformer-base and qwen2.5-0.5b both hold 12 KiB per token
            label += f" = {drawn[tuple(sizes)]}"
        drawn.setdefault(tuple(sizes), p.name)
        left.plot(tokens, sizes, color=PRESET_COLORS[i % len(PRESET_COLORS)], ls=VARIANT_STYLES[p.variant],
                  marker=VARIANT_MARKERS[p.variant], ms=3.5, label=label)
    left.set_title("model presets (line style: variant; Hq/Hkv in brackets)", fontsize=9)
    base = PRESETS["llama-3-8b"]
    for n_kv, variant in ((base.n_heads, "mha"), (base.n_kv_heads, "gqa"), (1, "mqa")):
        sizes = [kv_cache_bytes(base.layers, n_kv, base.head_dim, int(t)) for t in tokens]
        right.plot(tokens, sizes, color="#444444", ls=VARIANT_STYLES[variant], marker=VARIANT_MARKERS[variant], ms=4,
                   label=f"{variant_label(variant)}: Hkv={n_kv}  (÷{base.n_heads // n_kv} vs MHA)")
    right.set_title(f"one geometry (llama-3-8b: L={base.layers}, Hq={base.n_heads}, D={base.head_dim}) "
                    "as MHA / GQA / MQA", fontsize=9)
    memory = df["device_memory_bytes"].dropna()
    for ax in (left, right):
        _seq_axis(ax, tokens, "context length (tokens, log scale)")
        _bytes_axis(ax, "KV-cache bytes (log scale)")
        if len(memory):
            ax.axhline(float(memory.iloc[0]), color="black", lw=1.2, ls="-.",
                       label=f"this run's device memory ({fmt_bytes(float(memory.iloc[0]))})")
        ax.grid(alpha=0.3)
        # below the axes: inside, the legend would hide the lines it explains
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncols=2, frameon=False)
    return fig


# ---- f. decode -----------------------------------------------------------------------------------------------

def decode(df: pd.DataFrame) -> Figure | None:
    dec = df[df["phase"] == "decode"]
    if claims.ok_rows(dec).empty:
        return None
    dtypes, variants = _facets(dec)
    fig, axes = _grid(len(dtypes), len(variants), "Decode step time vs KV-cache length, per variant "
                      "(same y scale along a row: compare heights across variants)", sharey="row")
    never = never_ran(dec)
    backends = [b for b in _sorted_backends(dec["backend"]) if b not in never]
    jitter = _jitter(backends)
    statuses: set[str] = set()
    noisy = False
    for r, dtype in enumerate(dtypes):
        for c, variant in enumerate(variants):
            ax = axes[r, c]
            rows, desc = modal_slice(dec[(dec["dtype"] == dtype) & (dec["variant"] == variant)], ())
            ax.set_title(f"{variant_label(variant)} · {dtype}\n{desc}", fontsize=9)
            for backend, grp in _by_backend(claims.ok_rows(rows)):
                grp = grp.sort_values("seq_kv")
                noisy |= _series(ax, grp, "seq_kv", grp["median_s"], backend, backend)
            statuses |= _mark_not_ok(ax, rows, "seq_kv", jitter, frozenset(never))
            _seq_axis(ax, rows["seq_kv"] if len(rows) else dec["seq_kv"], "KV-cache length (tokens, log scale)")
            _seconds_axis(ax, claims.ok_rows(dec[dec["dtype"] == dtype])["median_s"], "median time per decode step",
                          force_log=True)
            if c:
                ax.set_ylabel("")  # the row shares the first panel's axis
            ax.grid(alpha=0.3)
            if rows.empty:
                _empty_note(ax)
    _reserve_bands(axes)
    _legend_below(fig, _backend_handles(backends) + _status_handles(statuses) + _noisy_handles(noisy), never)
    return fig


# ---- g. speedup heatmap --------------------------------------------------------------------------------------

SHORT_STATUS = {"unsupported": "unsup.", "oom": "OOM", "error": "error", "incorrect": "wrong"}


def speedup_heatmap(df: pd.DataFrame) -> Figure | None:
    pre = df[df["phase"] == "prefill"]
    everything = claims.speedups_over(pre)
    if everything.empty:
        return None
    # One colour scale for every panel, symmetric around 1x in log2, at least 0.5x..2x.
    limit = max(1.0, float(np.abs(np.log2(everything["speedup"])).max()))
    norm = mcolors.Normalize(vmin=-limit, vmax=limit)
    dtypes, variants = _facets(pre)
    never = never_ran(pre)
    backends = [b for b in _sorted_backends(pre["backend"]) if b != "naive" and b not in never]
    panel_w = max(3.8, 0.62 * pre["seq_kv"].nunique() + 1.6)
    fig, axes = _grid(len(dtypes), len(variants), "Prefill speedup over naive (naive time / backend time; "
                      "blue = faster than naive)", panel=(panel_w, 0.42 * len(backends) + 1.5))
    image = None
    for r, dtype in enumerate(dtypes):
        for c, variant in enumerate(variants):
            ax = axes[r, c]
            rows, desc = modal_slice(pre[(pre["dtype"] == dtype) & (pre["variant"] == variant)], ("seq_q",))
            ax.set_title(f"{variant_label(variant)} · {dtype}\n{desc}", fontsize=9)
            seqs = sorted({int(s) for s in rows["seq_kv"]})
            logs = np.full((len(backends), len(seqs)), np.nan)
            for _, row in claims.speedups_over(rows).iterrows():
                if row["backend"] in backends:
                    logs[backends.index(row["backend"]), seqs.index(int(row["seq_kv"]))] = np.log2(row["speedup"])
            image = ax.imshow(logs, cmap="RdBu", norm=norm, aspect="auto")
            naive = rows[rows["backend"] == "naive"].set_index("seq_kv")["status"]
            for i, backend in enumerate(backends):
                for j, seq in enumerate(seqs):
                    cell = rows[(rows["backend"] == backend) & (rows["seq_kv"] == seq)]
                    color = "#444444"
                    if np.isfinite(logs[i, j]):
                        text = f"{2 ** logs[i, j]:.2g}×"
                        color = "white" if abs(logs[i, j]) > 0.6 * limit else "black"  # readable on dark ends
                    elif not cell.empty and cell["status"].iloc[0] != "ok":
                        text = SHORT_STATUS.get(cell["status"].iloc[0], "?")
                        ax.add_patch(_hatched_cell(j, i))
                    elif naive.get(seq, "ok") != "ok":
                        text = f"naive\n{SHORT_STATUS.get(naive[seq], '?')}"
                    else:
                        text = ""
                    ax.text(j, i, text, ha="center", va="center", fontsize=8.5, color=color)
            ax.set_xticks(range(len(seqs)), [fmt_tokens(s) for s in seqs])
            ax.set_yticks(range(len(backends)), backends)
            ax.set_xlabel("sequence length S (tokens)")
    bar = fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="speedup over naive (log scale)")
    ticks = list(range(-int(limit), int(limit) + 1))
    bar.set_ticks(ticks, labels=[f"{2.0 ** t:g}×" for t in ticks])
    if never:
        fig.supxlabel(_never_ran_text(never), fontsize=9, color="#444444")
    return fig


def _hatched_cell(x: int, y: int) -> Patch:
    return Rectangle((x - 0.5, y - 0.5), 1, 1, facecolor="#eeeeee", edgecolor="#bbbbbb", hatch="///", lw=0)


# ---- h. roofline ---------------------------------------------------------------------------------------------

def roofline(df: pd.DataFrame) -> Figure | None:
    ok = claims.ok_rows(df)
    ok = ok[(ok["intensity"] > 0) & (ok["flops_per_s"] > 0)]
    if "fwd" in set(ok["pass"]):
        ok = ok[ok["pass"] == "fwd"]  # bytes are a forward model: fwd+bwd points would sit at the wrong x
    if ok.empty:
        return None
    fig, axes = _grid(1, 1, "Roofline: achieved FLOP/s vs arithmetic intensity (forward passes)", panel=(8.0, 5.2))
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
    for backend, grp in _by_backend(ok):
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
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.set_xlabel("arithmetic intensity (FLOP per byte of minimum traffic, log scale)")
    ax.set_ylabel(f"achieved {unit} (log scale)")
    ax.grid(alpha=0.3)
    handles += [Patch(color=backend_color(b), label=b) for b in _sorted_backends(ok["backend"])]
    handles += [Line2D([], [], color="grey", marker=m, ls="none", label=p) for p, m in phase_marker.items()
                if p in set(ok["phase"])]
    # below the axes, like every other figure: a legend at the side squeezed the plot and clipped its x label
    fig.legend(handles=handles, loc="outside lower center", ncols=4, fontsize=8.5, frameon=False)
    return fig


# ---- dispatch ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FigureSpec:
    make: Callable[[pd.DataFrame], Figure | None]
    title: str
    how_to_read: str  # one sentence under the figure in the report


FIGURES: dict[str, FigureSpec] = {
    "throughput": FigureSpec(throughput, "Throughput", "Each line is a backend's achieved FLOP/s (useful FLOPs "
                             "only) as the sequence grows; higher is better, and markers at the axis bottom are "
                             "cases that did not run (see the legend)."),
    "latency": FigureSpec(latency, "Latency and scaling", "Time per call on log–log axes, where a straight line "
                          "of slope k means time ∝ S^k: k ≈ 2 is the quadratic cost of attention, smaller k means "
                          "fixed overheads still dominate."),
    "peak_memory": FigureSpec(peak_memory, "Peak memory", "Hollow markers are the measured peak above the inputs "
                              "and lines the analytic model; a line twice as steep as another means S² against "
                              "S memory (score matrix vs tiled kernels)."),
    "heads_sweep": FigureSpec(heads_sweep, "Heads at fixed d_model", "Each point splits the same d_model into "
                              "more, smaller heads, so the FLOPs are identical: flat lines mean extra heads are "
                              "free, rising lines mean per-head overhead or small head dims cost time."),
    "kv_cache": FigureSpec(kv_cache, "KV cache", "Bytes of K and V a model keeps per sequence as the context "
                           "grows (left: the presets; right: one model as MHA, GQA and MQA); where a line crosses "
                           "the device's memory, that context no longer fits at batch 1."),
    "decode": FigureSpec(decode, "Decode", "Time of one decoding step against the KV-cache length it reads; "
                         "compare the same backend across the variant panels to see what fewer KV heads buy."),
    "speedup": FigureSpec(speedup_heatmap, "Speedup over naive", "Each cell is naive's time divided by the "
                          "backend's at that length (blue: faster than naive, red: slower); grey hatched cells "
                          "did not run, with the reason."),
    "roofline": FigureSpec(roofline, "Roofline", "Points under the sloped part of the ceiling are limited by "
                           "memory bandwidth, under the flat part by compute; the gap to the ceiling is what a "
                           "better kernel could still gain."),
}


def mathtext_safe(df: pd.DataFrame) -> pd.DataFrame:
    """Text from results files reaches labels and titles: escape '$', which would start matplotlib mathtext."""
    df = df.copy()
    for name in df.columns:
        if df[name].dtype == object or pd.api.types.is_string_dtype(df[name]):
            df[name] = df[name].map(lambda v: v.replace("$", r"\$") if isinstance(v, str) else v)
    return df


def make_figures(df: pd.DataFrame) -> dict[str, Figure]:
    """Every figure the run has data for, in FIGURES order."""
    df = mathtext_safe(df)
    out = {}
    for name, spec in FIGURES.items():
        fig = spec.make(df)
        if fig is not None:
            out[name] = fig
    return out
