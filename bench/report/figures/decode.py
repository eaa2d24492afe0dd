"""Decoding: the time of one step against the KV-cache length it reads, per variant."""

from __future__ import annotations

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from bench.report import claims
from bench.report.figures.axes import seconds_axis
from bench.report.figures.helpers import (
    Panel,
    backend_handles,
    backend_lines,
    facet_grid,
    noisy_handles,
    status_handles,
)


def decode(df: pd.DataFrame) -> Figure | None:
    dec = df[df["phase"] == "decode"]
    if claims.ok_rows(dec).empty:
        return None

    def draw(ax: Axes, rows: pd.DataFrame, panel: Panel) -> bool:
        noisy = backend_lines(ax, rows, "seq_kv", lambda grp: grp["median_s"])
        # one scale along a row: the row's panels share the y axis, so its range is the whole dtype's
        seconds_axis(ax, claims.ok_rows(dec[dec["dtype"] == panel.dtype])["median_s"], "median time per decode step",
                     force_log=True)
        if panel.column:
            ax.set_ylabel("")  # the row shares the first panel's axis
        return noisy

    drawn = facet_grid(dec, "Decode step time vs KV-cache length, per variant (same y scale along a row: compare "
                       "heights across variants)", draw, free=(), x_label="KV-cache length (tokens, log scale)",
                       sharey="row")
    return drawn.with_legend(backend_handles(drawn.backends) + status_handles(drawn.statuses)
                             + noisy_handles(drawn.noisy))
