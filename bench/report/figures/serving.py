"""Serving batches: time per real token and padding waste by length distribution; paged against contiguous decode."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from bench.analysis.serving import paged_vs_contiguous, per_token
from bench.problem.shapes import LENGTHS
from bench.report.figures.helpers import sorted_backends
from bench.report.style import backend_color


def _bars(ax: Axes, table: pd.DataFrame, log: bool) -> None:
    """Grouped bars: one group per index value, one bar per backend (column), in the backends' colours."""
    backends = sorted_backends(table.columns)
    width = 0.8 / max(1, len(backends))
    x = np.arange(len(table.index))
    for i, backend in enumerate(backends):
        ax.bar(x + (i - (len(backends) - 1) / 2) * width, table[backend].to_numpy(dtype=float), width,
               color=backend_color(backend), label=backend)
    ax.set_xticks(x, [str(v) for v in table.index])
    if log:
        ax.set_yscale("log")
    ax.grid(axis="y", alpha=0.3)


def _legend(fig: Figure, axes) -> None:
    """One legend under the panels with every backend any panel drew, in the fixed backend order."""
    handles = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    labels = sorted_backends(handles)
    fig.legend([handles[b] for b in labels], labels, loc="outside lower center", ncols=min(6, len(labels)))


def serving_lengths(df: pd.DataFrame) -> Figure | None:
    rows = per_token(df)
    if rows.empty:
        return None
    masks = sorted(rows["mask"].unique())
    fig = Figure(figsize=(5.5 * len(masks), 7.5), layout="constrained")
    axes = fig.subplots(2, len(masks), squeeze=False)
    order = [x for x in LENGTHS if x in set(rows["lengths"])]
    for col, mask in enumerate(masks):
        part = rows[rows["mask"] == mask]
        time = part.pivot_table(index="lengths", columns="backend", values="s_per_token", aggfunc="median")
        waste = part.pivot_table(index="lengths", columns="backend", values="padding_waste", aggfunc="median")
        _bars(axes[0, col], time.reindex([x for x in order if x in time.index]) * 1e6, log=True)
        axes[0, col].set_title(f"mask {mask}")
        axes[0, col].set_ylabel("µs per real token (log)")
        _bars(axes[1, col], waste.reindex([x for x in order if x in waste.index]), log=False)
        axes[1, col].axhline(1.0, color="black", lw=0.8)
        axes[1, col].set_ylabel("padding waste (work / real work)")
        axes[1, col].set_xlabel("sequence lengths in the batch")
    _legend(fig, axes.flat)
    first = rows.iloc[0]
    tokens = int(first["batch"]) * int(first["seq_q"])
    fig.suptitle(f"Ragged batches: time per real token and padding waste (B={first['batch']}, {tokens} tokens, "
                 f"Hq={first['n_heads']}, Hkv={first['n_kv_heads']}, D={first['head_dim']}, {first['dtype']})")
    return fig


def serving_paged(df: pd.DataFrame) -> Figure | None:
    pairs = paged_vs_contiguous(df)
    if pairs.empty:
        return None
    lengths = sorted(pairs["seq_kv"].unique())
    fig = Figure(figsize=(max(8.0, 5.5 * len(lengths)), 4.5), layout="constrained")
    axes = fig.subplots(1, len(lengths), squeeze=False)[0]
    for ax, kv in zip(axes, lengths, strict=True):
        part = pairs[pairs["seq_kv"] == kv]
        ratio = part.pivot_table(index="page_size", columns="backend", values="ratio", aggfunc="median")
        _bars(ax, ratio.rename(index=lambda p: f"pages of {int(p)}"), log=False)
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_title(f"average context {kv} tokens")
        ax.set_ylabel("paged / contiguous decode time")
    _legend(fig, axes)
    fig.suptitle("Paged KV cache: decode step time ÷ the same batch's on a contiguous cache\n(1 = paging is free)")
    return fig
