"""Figures from one run's tidy frame: one small function per figure, each returning a matplotlib Figure or None.

Figures are built with matplotlib.figure.Figure directly (no pyplot): no global state, no GUI backend, so
they render headless and can be inspected before they are saved. A function returns None when the run has
no data for its figure, and the report leaves the figure out. Which figures exist, in which order, what each is
called and how to read it: the one list in bench.report.catalogue.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from bench.analysis.frames import dense_rows
from bench.report.catalogue import CATALOGUE, FIGURES
from bench.results.meta import RunMeta


def mathtext_safe(df: pd.DataFrame) -> pd.DataFrame:
    """Text from results files reaches labels and titles: escape '$', which would start matplotlib mathtext."""
    df = df.copy()
    for name in df.columns:
        if df[name].dtype == object or pd.api.types.is_string_dtype(df[name]):
            df[name] = df[name].map(lambda v: v.replace("$", r"\$") if isinstance(v, str) else v)
    return df


def make_figures(df: pd.DataFrame, run: RunMeta | None = None) -> dict[str, Figure]:
    """Every figure the run has data for, in catalogue order; `run` is the run's own section (what a trace's
    figure weighs its buckets by)."""
    df = mathtext_safe(df)
    dense = dense_rows(df)
    out = {}
    for entry in CATALOGUE:
        rows = df if entry.every_row else dense
        fig = entry.drawer()(rows, run or RunMeta()) if entry.reads_run else entry.drawer()(rows)
        if fig is not None:
            out[entry.name] = fig
    return out


__all__ = ["CATALOGUE", "FIGURES", "make_figures", "mathtext_safe"]
