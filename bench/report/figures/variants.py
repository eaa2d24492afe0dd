"""Attention variants: each backend's time with softcap, ALiBi, sinks or a chunk mask over its plain causal time."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from bench.analysis.variant_cost import variant_costs, variant_name
from bench.claims import VARIANTS_WITHIN
from bench.report.figures.helpers import NOTE_SIZE, backend_handles, legend_below, modal_slice, sorted_backends
from bench.report.figures.layout import grid
from bench.report.style import backend_color


def variant_cost(df: pd.DataFrame) -> Figure | None:
    """Grouped bars at the most common size: one group per variant, one bar per backend (variant / plain causal);
    backends that did not run a variant are named under the panel with their reason."""
    costs = variant_costs(df)
    if costs.empty:
        return None
    dtype = costs["dtype"].mode().iloc[0]  # one dtype (modal_slice holds the other shape fields)
    costs, desc = modal_slice(costs[costs["dtype"] == dtype], ("mask", "score", "seq_q"))
    costs = costs[costs["seq_kv"] == costs["seq_kv"].mode().iloc[0]]  # one length (prefill S or decode KV) too
    desc = f"{dtype} {desc}"
    variants = sorted(costs["attn_variant"].unique())
    backends = sorted_backends(costs["backend"])
    fig, axes = grid(1, 1, "Attention variants against plain causal", panel=(max(5.0, 1.3 * len(variants)), 3.6))
    ax = axes[0, 0]
    width = 0.8 / max(1, len(backends))
    for i, backend in enumerate(backends):
        rows = costs[costs["backend"] == backend].groupby("attn_variant")["ratio"].median()
        x = np.arange(len(variants)) + (i - (len(backends) - 1) / 2) * width
        ax.bar(x, [rows.get(v, np.nan) for v in variants], width, color=backend_color(backend), label=backend)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.axhline(VARIANTS_WITHIN, color="grey", lw=0.8, ls="--")
    ax.set_xticks(np.arange(len(variants)), variants)
    ax.set_ylabel("time / plain causal time")
    row = costs.iloc[0]
    seq = f"S={int(row['seq_kv'])}" if row["phase"] == "prefill" else f"KV={int(row['seq_kv'])}"
    ax.set_title(f"{row['phase']} {seq} {desc}", fontsize=NOTE_SIZE)
    missing = _not_run(df, set(costs["seq_kv"]), variants)
    if missing:
        ax.text(0.0, -0.25, "not run: " + "; ".join(missing), transform=ax.transAxes, fontsize=NOTE_SIZE - 1,
                va="top", wrap=True)
    legend_below(fig, backend_handles(backends, line=False))
    return fig


def _not_run(df: pd.DataFrame, lengths: set, variants: list[str]) -> list[str]:
    """'backend variant (reason)' for the variant cases at these lengths that did not run, one per pair."""
    rows = df[(df["status"] != "ok") & df["seq_kv"].isin(lengths)]
    out = {}
    for _, r in rows.iterrows():
        name = variant_name(r["mask"], r.get("score", "none"))
        if name in variants and (r["backend"], name) not in out:
            out[(r["backend"], name)] = f"{r['backend']} {name} ({str(r['reason'])[:60]})"
    return list(out.values())
