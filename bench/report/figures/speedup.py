"""Speedup over the baseline (bench.analysis.traits.BASELINE) as a heatmap: one cell per backend and length."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib import colors as mcolors
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from bench.analysis.traits import BASELINE
from bench.report.figures.helpers import NOTE_SIZE, modal_slice, never_ran, never_ran_text, sorted_backends, variants
from bench.report.figures.layout import DPI, grid, make_room, text_width, wrap
from bench.report.style import variant_label
from bench.report.tables import speedups_over
from bench.report.units import fmt_ratio, fmt_tokens
from bench.results.status import SHORT_LABELS

MAX_TICKS = 9  # colour bar labels: every power of two up to this many, then every second, third...


def _hatched_cell(x: int, y: int) -> Patch:
    return Rectangle((x - 0.5, y - 0.5), 1, 1, facecolor="#eeeeee", edgecolor="#bbbbbb", hatch="///", lw=0)


def _ratio_label(power: int) -> str:
    """2^power as a colour bar label: 4×, 0.25×, but 1/64× rather than 0.015625×."""
    return f"{2.0 ** power:g}×" if power >= -3 else f"1/{2 ** -power}×"


def speedup_heatmap(df: pd.DataFrame) -> Figure | None:
    pre = df[df["phase"] == "prefill"]
    everything = speedups_over(pre)
    if everything.empty:
        return None
    # One colour scale for every panel, symmetric around 1x in log2, at least 0.5x..2x.
    limit = max(1.0, float(np.abs(np.log2(everything["speedup"])).max()))
    norm = mcolors.Normalize(vmin=-limit, vmax=limit)
    dtypes, names = sorted({str(d) for d in pre["dtype"]}), variants(pre["variant"])
    never = never_ran(pre)
    backends = [b for b in sorted_backends(pre["backend"]) if b != BASELINE and b not in never]
    # wider for more lengths, and for backend names longer than the usual ones (the y tick labels, 10 pt)
    names_w = max((text_width(b, 10) for b in backends), default=0.0) / DPI
    panel_w = max(3.8, 0.62 * pre["seq_kv"].nunique() + 1.6) + max(0.0, names_w - 0.9)
    fig, axes = grid(len(dtypes), len(names), f"Prefill speedup over {BASELINE} ({BASELINE} time / backend time; "
                     f"blue = faster than {BASELINE})", panel=(panel_w, 0.42 * len(backends) + 1.5))
    image = None
    for r, dtype in enumerate(dtypes):
        for c, variant in enumerate(names):
            ax = axes[r, c]
            rows, desc = modal_slice(pre[(pre["dtype"] == dtype) & (pre["variant"] == variant)], ("seq_q",))
            ax.set_title(f"{variant_label(variant)} · {dtype}\n{desc}", fontsize=9)
            seqs = sorted({int(s) for s in rows["seq_kv"]})
            logs = np.full((len(backends), len(seqs)), np.nan)
            for _, row in speedups_over(rows).iterrows():
                if row["backend"] in backends:
                    logs[backends.index(row["backend"]), seqs.index(int(row["seq_kv"]))] = np.log2(row["speedup"])
            image = ax.imshow(logs, cmap="RdBu", norm=norm, aspect="auto")
            base = rows[rows["backend"] == BASELINE].set_index("seq_kv")["status"]
            for i, backend in enumerate(backends):
                for j, seq in enumerate(seqs):
                    cell = rows[(rows["backend"] == backend) & (rows["seq_kv"] == seq)]
                    color = "#444444"
                    if np.isfinite(logs[i, j]):
                        text = fmt_ratio(2 ** logs[i, j])
                        color = "white" if abs(logs[i, j]) > 0.6 * limit else "black"  # readable on dark ends
                    elif not cell.empty and cell["status"].iloc[0] != "ok":
                        text = SHORT_LABELS.get(cell["status"].iloc[0], "?")
                        ax.add_patch(_hatched_cell(j, i))
                    elif base.get(seq, "ok") != "ok":
                        text = f"{BASELINE}\n{SHORT_LABELS.get(base[seq], '?')}"
                    else:  # no case of this backend at this length (or none of the baseline's): not a blank cell
                        text = "not run" if cell.empty else f"no {BASELINE}"
                        ax.add_patch(_hatched_cell(j, i))
                    ax.text(j, i, text, ha="center", va="center", fontsize=8.5, color=color)
            ax.set_xticks(range(len(seqs)), [fmt_tokens(s) for s in seqs])
            ax.set_yticks(range(len(backends)), backends)
            ax.set_xlabel("sequence length S (tokens)")
    bar = fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label=f"speedup over {BASELINE} (log scale)")
    step = math.ceil((2 * int(limit) + 1) / MAX_TICKS)
    ticks = [t for t in range(-int(limit), int(limit) + 1) if t % step == 0]
    bar.set_ticks(ticks, labels=[_ratio_label(t) for t in ticks])
    if never:
        note = fig.supxlabel(wrap(never_ran_text(never), fig, NOTE_SIZE), fontsize=NOTE_SIZE, color="#444444")
        make_room(fig, note)
    return fig
