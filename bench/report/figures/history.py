"""History figures: one per shape family, each case's median time per call across commits (oldest left), a line per
case in its backend's colour, change points ringed (red: regressed, green: improved)."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from bench.regress.history import History
from bench.report.style import backend_color, backend_marker

RING = {"regressed": "#d62728", "improved": "#2ca02c"}


def family_figures(history: History) -> dict[str, Figure]:
    """Family label -> its figure (families with no timed case are left out)."""
    out = {}
    for fam in sorted(set(history.families.values())):
        fig = family_figure(history, fam)
        if fig is not None:
            out[fam] = fig
    return out


def family_figure(history: History, fam: str) -> Figure | None:
    ids = [cid for cid, f in history.families.items() if f == fam and any(m for m in history.medians[cid])]
    if not ids:
        return None
    points = history.points
    x = list(range(len(points)))
    fig = Figure(figsize=(max(8.0, 3.0 + 0.6 * len(points)), 4.5), layout="constrained")
    ax = fig.add_subplot()
    index = {p.commit: i for i, p in enumerate(points)}
    for cid in ids:
        ys = [m * 1e3 if m else None for m in history.medians[cid]]
        backend = history.backends[cid]
        shape = history.sizes[cid]
        ax.plot([i for i in x if ys[i]], [y for y in ys if y], marker=backend_marker(backend), markersize=4,
                color=backend_color(backend), linewidth=1, alpha=0.8, label=f"{backend} {shape}")
        for change in (c for c in history.changes if c.case_id == cid):
            i = index[change.commit]
            if ys[i]:
                ax.plot([i], [ys[i]], marker="o", markersize=11, markerfacecolor="none", linestyle="none",
                        markeredgecolor=RING.get(change.verdict, "black"), markeredgewidth=2)
    ax.set_xticks(x, [p.label for p in points], rotation=45, ha="right", fontsize=8)
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.set_ylabel("median time per call (ms)")
    ax.set_xlabel("commit (oldest left; ringed: change point, red slower, green faster)")
    ax.set_title(fam, fontsize=10)
    if len(ids) <= 16:
        fig.legend(fontsize=7, loc="outside right upper")
    return fig


def slug(family: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in family.lower()).strip("-").replace("---", "-")
