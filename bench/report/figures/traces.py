"""Replayed traces: what the requests were (prompt and output lengths) and each backend's time to serve them."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from bench.analysis.time_to_serve import GEOMETRY, serve_table
from bench.report.figures.helpers import sorted_backends
from bench.report.style import backend_color
from bench.results.meta import RunMeta


def _hist(workload: dict, key: str) -> tuple[np.ndarray, np.ndarray]:
    hist = {int(k): v for k, v in (workload.get(key) or {}).items()}
    bins = np.arange(min(hist, default=0), max(hist, default=0) + 1)
    return bins, np.array([hist.get(int(b), 0) for b in bins])


def trace_serving(df: pd.DataFrame, run: RunMeta) -> Figure | None:
    table = serve_table(df, run.workloads)
    if table.empty:
        return None
    names = list(dict.fromkeys(table["workload"]))
    fig = Figure(figsize=(12, 3.6 * len(names)), layout="constrained")
    axes = fig.subplots(len(names), 2, squeeze=False)
    for row, name in enumerate(names):
        w = run.workloads[name]
        left, right = axes[row]
        for key, label, shift, colour in (("prompt_hist", "prompt", -0.2, "#4c72b0"),
                                          ("output_hist", "output", 0.2, "#dd8452")):
            bins, counts = _hist(w, key)
            left.bar(bins + shift, counts, 0.4, color=colour, label=f"{label} tokens")
        ticks = sorted({int(k) for key in ("prompt_hist", "output_hist") for k in (w.get(key) or {})})
        left.set_xticks(ticks, [f"{2 ** t:,}" for t in ticks], rotation=45)
        left.set_xlabel("tokens (bins of a power of two: 2^k up to 2^(k+1))")
        left.set_ylabel("requests")
        left.set_title(f"{name}: {w.get('requests', 0):,} requests over {w.get('duration_s', 0) / 60:.1f} min, "
                       f"{w.get('steps', 0):,} steps", fontsize=10)
        left.legend(fontsize=9)
        left.grid(axis="y", alpha=0.3)
        mine = table[table["workload"] == name]
        # the first geometry (one per profile), and the backends that ran none of its buckets
        mine = mine[(mine[GEOMETRY] == mine[GEOMETRY].iloc[0]).all(axis=1) | (mine["buckets_ok"] == 0)]
        order = sorted_backends(mine["backend"])
        mine = mine.set_index("backend").loc[order]
        y = np.arange(len(order))
        prefill, decode = mine["prefill_s"].to_numpy(float), mine["decode_s"].to_numpy(float)
        for i, backend in enumerate(order):
            complete = bool(mine.loc[backend, "complete"])
            right.barh(y[i], prefill[i], color=backend_color(backend), alpha=0.55 if complete else 0.2,
                       hatch=None if complete else "//")
            right.barh(y[i], decode[i], left=prefill[i], color=backend_color(backend), alpha=1.0 if complete else 0.3,
                       hatch=None if complete else "//")
            total, ran = prefill[i] + decode[i], int(mine.loc[backend, "buckets_ok"])
            tail = f" ({total:,.4g} s): not ranked" if ran else ": not ranked (see the cases that did not run)"
            label = f" {total:,.4g} s" if complete else f" ran {ran} of {mine.loc[backend, 'buckets']} buckets{tail}"
            right.text(total, y[i], label, va="center", fontsize=8)
        right.set_yticks(y, order)
        right.invert_yaxis()
        right.set_xlabel("attention time to serve the trace, s (pale: prefill, solid: decode)")
        right.set_xlim(0, 1.35 * max(prefill + decode))
        right.grid(axis="x", alpha=0.3)
        first = mine.iloc[0]
        right.set_title(f"{name} at Hq={int(first['n_heads'])} Hkv={int(first['n_kv_heads'])} "
                        f"D={int(first['head_dim'])} {first['dtype']}, "
                        f"{w.get('knobs', {}).get('max_batch_tokens')} tokens / step, pages of "
                        f"{w.get('page_size') or 'contiguous'}", fontsize=10)
    return fig
