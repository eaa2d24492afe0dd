"""Figures from one run's tidy frame: one small function per figure, each returning a matplotlib Figure or None.

Figures are built with matplotlib.figure.Figure directly (no pyplot): no global state, no GUI backend, so
they render headless and can be inspected before they are saved. A function returns None when the run has
no data for its figure, and the report leaves the figure out. What each figure is called, and how to read
it, is in bench.report.catalogue.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
from matplotlib.figure import Figure

from bench.report.catalogue import FIGURES
from bench.report.claims import dense_rows
from bench.report.figures.decode import decode
from bench.report.figures.heads import heads_sweep
from bench.report.figures.memory import kv_cache, peak_memory
from bench.report.figures.serving import serving_lengths, serving_paged
from bench.report.figures.speed import latency, roofline, throughput
from bench.report.figures.speedup import speedup_heatmap

# Catalogue name -> the function that draws it (a test checks both list the same figures).
MAKERS: dict[str, Callable[[pd.DataFrame], Figure | None]] = {
    "throughput": throughput,
    "latency": latency,
    "peak_memory": peak_memory,
    "heads_sweep": heads_sweep,
    "kv_cache": kv_cache,
    "decode": decode,
    "speedup": speedup_heatmap,
    "roofline": roofline,
    "serving_lengths": serving_lengths,
    "serving_paged": serving_paged,
}
# figures that draw serving batches (bench.serving); the others draw dense cases only, so that a ragged or paged
# case never shares a line with the dense case of the same (B, S)
SERVING_FIGURES = ("serving_lengths", "serving_paged")


def mathtext_safe(df: pd.DataFrame) -> pd.DataFrame:
    """Text from results files reaches labels and titles: escape '$', which would start matplotlib mathtext."""
    df = df.copy()
    for name in df.columns:
        if df[name].dtype == object or pd.api.types.is_string_dtype(df[name]):
            df[name] = df[name].map(lambda v: v.replace("$", r"\$") if isinstance(v, str) else v)
    return df


def make_figures(df: pd.DataFrame) -> dict[str, Figure]:
    """Every figure the run has data for, in catalogue order."""
    df = mathtext_safe(df)
    dense = dense_rows(df)
    out = {}
    for name in FIGURES:
        fig = MAKERS[name](df if name in SERVING_FIGURES else dense)
        if fig is not None:
            out[name] = fig
    return out


__all__ = ["FIGURES", "MAKERS", "make_figures", "mathtext_safe"]
