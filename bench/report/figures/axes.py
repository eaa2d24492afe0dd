"""Axis scales and tick labels in the report's units: lengths in tokens, seconds, bytes, plain log numbers."""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator

from bench.report.units import fmt_bytes, fmt_seconds, fmt_tokens

SEQ_LABEL = "sequence length S (tokens, log scale)"
LOG_SECONDS = 10.0  # times spanning more than this factor get a log axis


def seq_axis(ax: Axes, values, label: str = SEQ_LABEL) -> None:
    """Log2 x axis with a tick at every length the run measured (4096 -> '4k')."""
    ticks = sorted({int(v) for v in values})
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: fmt_tokens(x)))
    ax.xaxis.set_minor_locator(NullLocator())
    if ticks:
        ax.set_xlim(ticks[0] / 1.35, ticks[-1] * 1.35)
    ax.set_xlabel(label)


def seconds_axis(ax: Axes, values, label: str, force_log: bool = False) -> None:
    """Seconds with units on the ticks; log once the values span about a decade (1-2-5 ticks: never one label)."""
    values = np.asarray([v for v in values if v and v > 0], dtype=float)
    if force_log or (len(values) and values.max() / values.min() > LOG_SECONDS):
        ax.set_yscale("log")
        narrow = bool(len(values)) and values.max() / values.min() < 100
        log_ticks(ax.yaxis, narrow)
        label += " (log scale)"
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: fmt_seconds(y) if y > 0 else "0"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel(label)


def bytes_axis(ax: Axes, label: str) -> None:
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_locator(LogLocator(base=2, numticks=8))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: fmt_bytes(y)))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_ylabel(label)


def log_ticks(axis: Axis, narrow: bool) -> None:
    """Base-10 log ticks: 1-2-5 over a decade or two (so an axis never shows a single label), decades beyond."""
    axis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5) if narrow else (1,)))
    axis.set_minor_locator(LogLocator(base=10, subs="auto"))
    axis.set_minor_formatter(NullFormatter())


def plain_log_axis(axis: Axis, lo: float, hi: float) -> None:
    """A log axis labelled with plain numbers (30, not 3×10^1): 1-2-5 ticks when it spans under two decades."""
    log_ticks(axis, hi / lo < 100)
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
