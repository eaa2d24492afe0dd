"""Heads at a fixed d_model: the same FLOPs split into more, smaller heads, at a few sequence lengths."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from bench.analysis import frames
from bench.claims import MIN_HEADS
from bench.report.figures.axes import seconds_axis
from bench.report.figures.helpers import (
    backend_handles,
    backend_lines,
    jitter,
    legend_below,
    mark_not_ok,
    modal_slice,
    never_ran,
    noisy_handles,
    reserve_bands,
    sorted_backends,
    status_handles,
)
from bench.report.figures.layout import grid
from bench.report.units import fmt_tokens


def _swept(df: pd.DataFrame) -> tuple[pd.DataFrame, str, int, list[int], str] | None:
    """The MHA prefill rows of the d_model swept over the most head counts -> (rows, dtype, d_model, lengths,
    description of what is held fixed); None when no d_model was swept over MIN_HEADS head counts at some
    length."""
    pre = df[(df["phase"] == "prefill") & (df["variant"] == "mha")]
    per_d = pre.groupby("d_model")["n_heads"].nunique()
    per_d = per_d[per_d >= MIN_HEADS]
    if per_d.empty:
        return None
    d_model = int(per_d.idxmax())
    sweep = pre[pre["d_model"] == d_model]
    dtype = sweep["dtype"].mode().iloc[0]
    sweep, desc = modal_slice(sweep[sweep["dtype"] == dtype], ("n_heads", "head_dim", "n_kv_heads", "seq_q"))
    # Only what was swept: a backend at a length with one head count is just the main sweep passing through.
    sweep = sweep[sweep.groupby(["backend", "seq_kv"])["n_heads"].transform("nunique") >= 2]
    seqs = [int(s) for s, n in sweep.groupby("seq_kv")["n_heads"].nunique().items() if n >= MIN_HEADS]
    if not seqs:
        return None
    sweep = sweep[sweep["seq_kv"].isin(seqs)]
    if len(seqs) > 4:  # a few lengths, spread over the range, keep the panels readable
        seqs = [seqs[i] for i in np.linspace(0, len(seqs) - 1, 4).round().astype(int)]
    return sweep, dtype, d_model, seqs, desc


def heads_sweep(df: pd.DataFrame) -> Figure | None:
    found = _swept(df)
    if found is None:
        return None
    sweep, dtype, d_model, seqs, desc = found
    fig, axes = grid(1, len(seqs), f"Heads sweep at fixed d_model={d_model}: the same FLOPs at every head count, "
                     "so flat lines mean the free lunch holds", sharey=False, panel=(4.2, 3.6))
    never = never_ran(sweep)
    backends = [b for b in sorted_backends(sweep["backend"]) if b not in never]
    offsets = jitter(backends)
    statuses: set[str] = set()
    noisy = False
    heads = sorted({int(h) for h in sweep["n_heads"]})
    for c, seq in enumerate(seqs):
        ax = axes[0, c]
        rows = sweep[sweep["seq_kv"] == seq]
        ax.set_title(f"S={fmt_tokens(seq)} · {dtype} · {desc}", fontsize=9)
        noisy |= backend_lines(ax, rows, "n_heads", lambda grp: grp["median_s"])
        statuses |= mark_not_ok(ax, rows, "n_heads", offsets, frozenset(never))
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(heads))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{int(x)}\nD={d_model // int(x)}"))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlim(heads[0] / 1.4, heads[-1] * 1.4)
        ax.set_xlabel("query heads Hq (head dim D = d_model / Hq)")
        seconds_axis(ax, frames.ok_rows(rows)["median_s"], "median latency per call")
        ax.grid(alpha=0.3)
    reserve_bands(axes)
    legend_below(fig, backend_handles(backends) + status_handles(statuses) + noisy_handles(noisy), never)
    return fig
