"""Speculative decoding's verification: a draft's step time over the one-query decode step against the draft size N,
one panel per dtype, one colour per backend (chains joined by a line, the engines' trees as labelled stars), the
one-step line (1×), the claim's bar and the roofline's ridge (the size from which N queries turn the step
compute-bound, from the run's ceilings). One configuration: the longest cache at the batch measured most. The pairs
are bench.claims.verify's."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

from bench.backends import get_backend
from bench.claims.verify import VERIFY_WITHIN, draft_steps, ridge_tokens
from bench.report.figures.helpers import legend_below
from bench.report.figures.layout import grid
from bench.results.meta import RunMeta


def verify_steps(df: pd.DataFrame, run: RunMeta | None = None) -> Figure | None:
    rows = draft_steps(df)
    if rows.empty:
        return None
    batch = rows.groupby("batch").size().idxmax()
    rows = rows[rows["batch"] == batch]
    rows = rows[rows["seq_kv"] == rows.groupby("dtype")["seq_kv"].transform("max")]
    dtypes = sorted(rows["dtype"].unique())
    first = rows.iloc[0]
    fig, axes = grid(1, len(dtypes), f"A draft's step over one decode step (B {batch}, Hq {first['n_heads']} / "
                                     f"Hkv {first['n_kv_heads']}, D {first['head_dim']})", sharey=True,
                     panel=(6.0, 4.2))
    calibration = run.calibration if run is not None else None
    for ax, dtype in zip(axes[0], dtypes, strict=True):
        these = rows[rows["dtype"] == dtype]
        for backend, line in these.groupby("backend"):
            colour = get_backend(str(backend)).color
            chains = line[line["draft"].str.startswith("chain:")].sort_values("tokens")
            # the one-query step itself is N 1 at 1x: each line starts there
            ax.plot([1, *chains["tokens"]], [1.0, *chains["ratio"]], marker="o", color=colour)
            trees = line[~line["draft"].str.startswith("chain:")]
            ax.scatter(trees["tokens"], trees["ratio"], marker="*", s=90, color=colour, zorder=3)
        trees = these[~these["draft"].str.startswith("chain:")]
        named = trees.loc[trees.groupby("draft")["ratio"].idxmax()].sort_values("tokens")
        for i, (_, t) in enumerate(named.iterrows()):  # each tree named once, neighbours above and below
            ax.annotate(str(t["draft"]), (t["tokens"], t["ratio"]), textcoords="offset points",
                        xytext=(5, 5 if i % 2 == 0 else -12), fontsize=8)
        ax.axhline(1.0, color="black", lw=1)
        ax.axhline(VERIFY_WITHIN, color="black", lw=1, ls=":")
        ridge = ridge_tokens(these.iloc[0], calibration)
        if ridge:
            ax.axvline(ridge, color="grey", lw=1, ls="--")
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        ax.set_xlim(0.8, float(these["tokens"].max()) * 1.6)  # room for the last tree's name
        ax.set_yscale("log")
        ax.set_xlabel("draft tokens N (log scale)")
        ax.set_title(f"{dtype}, cache {int(these['seq_kv'].iloc[0]):,} keys")
    axes[0][0].set_ylabel("draft step / one-query step (×, log)")
    handles = [Line2D([], [], color=get_backend(str(b)).color, marker="o", label=str(b))
               for b in sorted(rows["backend"].unique())]
    handles += [Line2D([], [], color="black", marker="*", ls="", label="a tree (its preset's name)"),
                Line2D([], [], color="black", ls=":", label=f"the claim's bar ({VERIFY_WITHIN:g}×)"),
                Line2D([], [], color="grey", ls="--", label="roofline ridge: compute-bound from here")]
    legend_below(fig, handles)
    return fig
