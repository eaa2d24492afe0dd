"""What the figures share: picking a panel's rows, the dtype x variant grid of panels, one backend's line, the
band of cases that did not run, and the legend under the panels.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from bench.analysis import frames
from bench.problem.columns import SHAPE_DEFAULTS
from bench.report.figures.axes import SEQ_LABEL, seq_axis
from bench.report.figures.layout import PANEL, fit_legend, grid
from bench.report.style import (
    STATUS_MARKERS,
    VARIANT_ORDER,
    backend_color,
    backend_marker,
    backend_sort_key,
    variant_label,
)
from bench.results.record import LATER_SHAPE_KEYS
from bench.results.status import LABELS, NOT_OK

# Axes a figure does not plot are held at their most common value (the figure says which).
CONFIG_KEYS = ["batch", "n_heads", "n_kv_heads", "head_dim", "mask", "pass", "seq_q", *LATER_SHAPE_KEYS]
WIDE = 30.0  # data spanning more than this factor gets a log axis
BAND = 0.1  # fraction of an axis' height kept free at the bottom for the cases that did not run
NOTE_SIZE = 9  # legends and notes under the panels


# ---- rows ----------------------------------------------------------------------------------------------------

def sorted_backends(values) -> list[str]:
    return sorted({str(v) for v in values}, key=backend_sort_key)


def by_backend(rows: pd.DataFrame) -> Iterator[tuple[str, pd.DataFrame]]:
    """(backend, rows) in the fixed backend order, so every legend lists backends the same way."""
    for backend in sorted_backends(rows["backend"]):
        yield backend, rows[rows["backend"] == backend]


def variants(values) -> list[str]:
    present = {str(v) for v in values}
    return [v for v in VARIANT_ORDER if v in present] + sorted(present - set(VARIANT_ORDER))


def modal_slice(df: pd.DataFrame, free: tuple[str, ...]) -> tuple[pd.DataFrame, str]:
    """Rows at the most common configuration of CONFIG_KEYS not in `free`, and a short description of it."""
    keys = [k for k in CONFIG_KEYS if k not in free]
    if df.empty or not keys:
        return df, ""
    ok = df[df["status"] == "ok"]  # the configuration that ran most, where any did: a panel shows measurements
    counts = (ok if len(ok) else df).groupby(keys, dropna=False).size()
    top = counts.idxmax()
    top = top if isinstance(top, tuple) else (top,)
    chosen = pd.DataFrame([top], columns=keys).astype({k: df[k].dtype for k in keys})
    rows = df.merge(chosen, on=keys, how="inner")  # merge, not ==: a missing value matches a missing value
    names = {"batch": "B", "n_heads": "Hq", "n_kv_heads": "Hkv", "head_dim": "D", "seq_q": "Sq", "v_head_dim": "Dv",
             "kv_lora_rank": "rank", "rope_dim": "rope", "mla_form": "form"}  # MLA's: short, panel titles are narrow
    # later shape fields (scope, model, ...) are named only where they differ from their default
    parts = [f"{names[k]}={v:g}" if k in names and isinstance(v, float) else
             f"{names[k]}={v}" if k in names else f"{k}={v}" if k in LATER_SHAPE_KEYS else str(v)
             for k, v in zip(keys, top, strict=True)
             if k not in LATER_SHAPE_KEYS or not (pd.isna(v) or v == SHAPE_DEFAULTS.get(k))]
    return rows, textwrap.fill(" ".join(parts), 48)  # a long one (a model, MLA dims) on two lines: panels are narrow


def never_ran(rows: pd.DataFrame) -> dict[str, str]:
    """Backends with no ok case at all in a figure's rows -> their (most common) reason."""
    out = {}
    for backend, grp in by_backend(rows):
        if not (grp["status"] == "ok").any():
            reasons = grp["reason"].replace("", np.nan).dropna()
            reason = str(reasons.mode().iloc[0] if len(reasons) else grp["status"].mode().iloc[0])
            reason = reason.removeprefix(f"{backend}: ")  # backends' reasons start with their own name
            out[backend] = reason if len(reason) <= 110 else reason[:110].rsplit(" ", 1)[0] + " …"
    return out


def never_ran_text(never: dict[str, str]) -> str:
    """One line naming the backends that never ran, grouped by reason (the caller wraps it to its width)."""
    by_reason: dict[str, list[str]] = {}
    for backend, reason in never.items():
        by_reason.setdefault(reason, []).append(backend)
    return "Did not run at any size: " + "; ".join(f"{', '.join(b)} ({r})" for r, b in by_reason.items())


# ---- lines and the band of cases that did not run ------------------------------------------------------------

def series(ax: Axes, grp: pd.DataFrame, x: str, y: pd.Series, backend: str, label: str) -> bool:
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


def backend_lines(ax: Axes, rows: pd.DataFrame, x: str, y: Callable[[pd.DataFrame], pd.Series],
                  label: Callable[[str, pd.DataFrame], str] = lambda backend, _: backend) -> bool:
    """A line per backend through its ok cases, sorted along `x`; True when a timing is flagged noisy."""
    noisy = False
    for backend, grp in by_backend(frames.ok_rows(rows)):
        grp = grp.sort_values(x)
        noisy |= series(ax, grp, x, y(grp), backend, label(backend, grp))
    return noisy


def jitter(backends: list[str], spread: float = 0.05) -> dict[str, float]:
    """Small multiplicative x offsets so markers of several backends at one length do not hide each other."""
    n = len(backends)
    return {b: 2 ** (spread * (i - (n - 1) / 2)) for i, b in enumerate(backends)}


def mark_not_ok(ax: Axes, rows: pd.DataFrame, x: str, offsets: dict[str, float] | None = None,
                skip: frozenset[str] = frozenset()) -> set[str]:
    """Cases without a time, drawn in a band at the axis bottom in their backend's colour; returns the statuses.

    Backends in `skip` never ran in the whole figure: the figure lists them in a note instead of markers."""
    bad = rows[rows["status"].isin(NOT_OK) & ~rows["backend"].isin(skip)]
    for (backend, status), grp in bad.groupby(["backend", "status"]):
        xs = grp[x].astype("float64").to_numpy() * (offsets or {}).get(backend, 1.0)
        line, = ax.plot(xs, np.full(len(xs), BAND / 2), ls="none", marker=STATUS_MARKERS[status], ms=7, mew=1.8,
                        color=backend_color(backend), transform=ax.get_xaxis_transform(), clip_on=False, zorder=5)
        line.set_gid(f"status:{status}:{backend}")
    return set(bad["status"])


def reserve_bands(axes: np.ndarray) -> None:
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


def empty_note(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="grey")


# ---- legend --------------------------------------------------------------------------------------------------

def backend_handles(backends: list[str], line: bool = True, hollow: bool = False) -> list[Line2D]:
    return [Line2D([], [], color=backend_color(b), marker=backend_marker(b), ls="-" if line else "none", label=b,
                   **({"mfc": "white", "mew": 1.5} if hollow else {})) for b in backends]


def status_handles(statuses: set[str]) -> list[Line2D]:
    return [Line2D([], [], color="black", marker=STATUS_MARKERS[s], ls="none", mew=1.8,
                   label=f"{LABELS[s]} (grey band at the bottom)") for s in NOT_OK if s in statuses]


def noisy_handles(noisy: bool) -> list[Line2D]:
    return [Line2D([], [], color="black", marker="o", mfc="white", ls="none",
                   label="hollow: timing flagged noisy")] if noisy else []


def legend_below(fig: Figure, handles: list, never: dict[str, str] | None = None, fontsize: float = NOTE_SIZE,
                 note: str = "") -> None:
    """One legend under the panels, as many columns as fit the figure's width; backends that never ran are named
    in its title, not silently dropped, and so are the panels left out (`note`)."""
    if not (handles or never or note):
        return
    title = "\n".join(t for t in (never_ran_text(never) if never else "", note) if t) or None
    legend = fit_legend(lambda **kw: fig.legend(handles=handles, loc="outside lower center", fontsize=fontsize,
                                                frameon=False, title_fontsize=NOTE_SIZE, **kw),
                        handles, fig, title=title, grow=True)
    legend.get_title().set_color("#444444")


# ---- the dtype x variant grid --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Panel:
    """Where a panel sits in the grid; `offsets` are the figure's x jitter per backend."""

    dtype: str
    variant: str
    column: int
    offsets: dict[str, float]


@dataclass
class Facets:
    """A drawn grid: what its legend needs to say."""

    fig: Figure
    backends: list[str]  # backends with a case that ran, in legend order
    never: dict[str, str]  # backends that ran nowhere -> why
    statuses: set[str] = field(default_factory=set)  # statuses drawn in the bands
    noisy: bool = False  # a timing flagged noisy was drawn hollow
    left_out: str = ""  # the dtypes and variants with no case that ran: no panel, named under the figure

    def with_legend(self, handles: list) -> Figure:
        legend_below(self.fig, handles, self.never, note=self.left_out)
        return self.fig


def facet_grid(df: pd.DataFrame, title: str, draw: Callable[[Axes, pd.DataFrame, Panel], bool | None], *,
               free: tuple[str, ...] = ("seq_q",), x_label: str = SEQ_LABEL, sharey: bool | str = False,
               panel: tuple[float, float] = PANEL) -> Facets:
    """One panel per dtype (rows) and variant (columns) against seq_kv, each at its most common configuration
    of the keys not in `free`. `draw(ax, rows, panel)` draws the panel's data and y axis, and returns True when
    it drew a timing flagged noisy; cases that did not run, the x axis and the grid are drawn here."""
    ran = df[df["status"] == "ok"] if (df["status"] == "ok").any() else df
    dtypes, names = sorted({str(d) for d in ran["dtype"]}), variants(ran["variant"])
    # a dtype or variant with no case that ran gets no panel of empty bands: one line under the figure says so
    dropped = [f"{variant_label(v)}" for v in variants(df["variant"]) if v not in names]
    dropped += sorted({str(d) for d in df["dtype"]} - set(dtypes))
    fig, axes = grid(len(dtypes), len(names), title, sharey=sharey, panel=panel)
    never = never_ran(df)
    left_out = f"No case ran for {', '.join(dropped)}: no panel (see 'Cases that did not run')." if dropped else ""
    out = Facets(fig, [b for b in sorted_backends(df["backend"]) if b not in never], never, left_out=left_out)
    offsets = jitter(out.backends)
    shown: set[str] = set()  # backends with a case in some panel's slice (a line or a not-run marker)
    for r, dtype in enumerate(dtypes):
        for c, variant in enumerate(names):
            ax = axes[r, c]
            rows, desc = modal_slice(df[(df["dtype"] == dtype) & (df["variant"] == variant)], free)
            if rows.empty:  # the sweep has no case of this pair (its MLA runs in fp32 only): no empty axes to read
                ax.set_axis_off()
                empty_note(ax, f"no {variant_label(variant)} · {dtype} case in this sweep")
                continue
            shown |= set(rows["backend"])
            ax.set_title(f"{variant_label(variant)} · {dtype}\n{desc}", fontsize=9)
            out.noisy |= bool(draw(ax, rows, Panel(dtype, variant, c, offsets)))
            out.statuses |= mark_not_ok(ax, rows, "seq_kv", offsets, frozenset(never))
            seq_axis(ax, rows["seq_kv"], x_label)
            ax.grid(alpha=0.3)
            if not (rows["status"] == "ok").any():  # only the bands of cases that did not run: say so
                empty_note(ax, "no case ran here")
    reserve_bands(axes)
    # a backend whose cases all lie outside the panels' configurations (transformers' decode runs at a model's heads,
    # llama-3-8b's 32 x 128, the panels at the sweep's) has no mark here: the legend would name a line no panel has
    elsewhere = [b for b in out.backends if b not in shown]
    out.backends = [b for b in out.backends if b in shown]
    if elsewhere:
        out.left_out = " ".join(filter(None, [out.left_out, f"{', '.join(elsewhere)} ran only at other "
                                              "configurations than the panels' (see the tables)."]))
    return out
