"""Decoding: the time of one step against the KV-cache length it reads, per variant."""

from __future__ import annotations

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from bench.analysis import frames
from bench.report.figures import helpers
from bench.report.figures.axes import seconds_axis


def decode(df: pd.DataFrame) -> Figure | None:
    dec = df[df["phase"] == "decode"]
    if frames.ok_rows(dec).empty:
        return None

    def draw(ax: Axes, rows: pd.DataFrame, panel: helpers.Panel) -> bool:
        noisy = helpers.backend_lines(ax, rows, "seq_kv", lambda grp: grp["median_s"])
        # one scale along a row: the row's panels share the y axis, so its range is the whole dtype's
        seconds_axis(ax, frames.ok_rows(dec[dec["dtype"] == panel.dtype])["median_s"], "median time per decode step",
                     force_log=True)
        if panel.column:
            ax.set_ylabel("")  # the row shares the first panel's axis
        return noisy

    title = ("Decode step time vs KV-cache length, per variant "
             "(same y scale along a row: compare heights across variants)")
    drawn = helpers.facet_grid(dec, title, draw, free=(), x_label="KV-cache length (tokens, log scale)", sharey="row")
    return drawn.with_legend(helpers.backend_handles(drawn.backends) + helpers.status_handles(drawn.statuses)
                             + helpers.noisy_handles(drawn.noisy))
