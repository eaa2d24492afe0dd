"""How much memory: measured and modelled peak memory per call, and the KV cache of the model presets."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from bench.counts.metrics import kv_cache_bytes, latent_cache_bytes
from bench.models.config import kv_total_bytes
from bench.models.presets import PRESETS
from bench.report.figures.axes import bytes_axis, seq_axis
from bench.report.figures.helpers import Panel, backend_handles, by_backend, facet_grid, status_handles
from bench.report.figures.layout import fit_legend, grid
from bench.report.style import VARIANT_MARKERS, VARIANT_STYLES, backend_color, backend_marker, variant_label
from bench.report.units import fmt_bytes, fmt_tokens


def peak_memory(df: pd.DataFrame) -> Figure | None:
    pre = df[df["phase"] == "prefill"]
    if pre[pre["peak_mem_bytes"].astype("float64") > 0].empty:
        return None

    def draw(ax: Axes, rows: pd.DataFrame, panel: Panel) -> None:
        for backend, grp in by_backend(rows):
            grp = grp.sort_values("seq_kv")
            color = backend_color(backend)
            model = grp[grp["model_mem_bytes"].astype("float64") > 0]
            if len(model):
                ax.plot(model["seq_kv"].astype(float), model["model_mem_bytes"].astype(float), color=color,
                        lw=1.3, alpha=0.8, label=f"model:{backend}")
            meas = grp[(grp["status"] == "ok") & (grp["peak_mem_bytes"].astype("float64") > 0)]
            if len(meas):
                ax.plot(meas["seq_kv"].astype(float) * panel.offsets.get(backend, 1.0),
                        meas["peak_mem_bytes"].astype(float), ls="none", color=color, marker=backend_marker(backend),
                        ms=6, mfc="white", mew=1.5, label=f"measured:{backend}")
        bytes_axis(ax, "peak memory above inputs (log scale)")

    drawn = facet_grid(pre, "Peak memory above the inputs vs sequence length (points: measured, lines: analytic "
                       "model)", draw)
    kinds = [Line2D([], [], color="black", marker="o", mfc="white", ls="none", label="measured peak"),
             Line2D([], [], color="black", lw=1.3, label="analytic model")]
    return drawn.with_legend(backend_handles(drawn.backends, line=False, hollow=True) + kinds
                             + status_handles(drawn.statuses))


PRESET_COLORS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666",
                 "#1f78b4")


def kv_cache(df: pd.DataFrame) -> Figure:
    """Analytic, from the presets: always drawn; the run adds its device's memory as a ceiling."""
    tokens = 2.0 ** np.arange(8, 18)  # 256 .. 128k tokens
    fig, axes = grid(1, 2, "KV-cache size vs context (bf16, batch 1, all layers)", panel=(6.2, 5.6))
    left, right = axes[0]
    decoders = [p for p in PRESETS.values() if not p.encoder_only]
    drawn: dict[tuple, str] = {}
    for i, p in enumerate(decoders):
        sizes = [kv_total_bytes(p, int(t), 1, "bf16") for t in tokens]  # the config's cache, MLA's latent too
        heads = f"{p.n_heads}, latent {p.kv_latent_dim}" if p.is_mla else f"{p.n_heads}/{p.n_kv_heads}"
        label = f"{p.name} ({variant_label(p.variant)} {heads})" + (
            f", window {fmt_tokens(p.window)}" if p.window else "")
        if tuple(sizes) in drawn:  # e.g. transformer-base and qwen2.5-0.5b both hold 12 KiB per token
            label += f" = {drawn[tuple(sizes)]}"
        drawn.setdefault(tuple(sizes), p.name)
        left.plot(tokens, sizes, color=PRESET_COLORS[i % len(PRESET_COLORS)], ls=VARIANT_STYLES[p.variant],
                  marker=VARIANT_MARKERS[p.variant], ms=3.5, label=label)
    left.set_title("model presets (line style: variant; Hq/Hkv in brackets)", fontsize=9)
    base = PRESETS["llama-3-8b"]
    for n_kv, variant in ((base.n_heads, "mha"), (base.n_kv_heads, "gqa"), (1, "mqa")):
        sizes = [kv_cache_bytes(base.layers, n_kv, base.head_dim, int(t)) for t in tokens]
        right.plot(tokens, sizes, color="#444444", ls=VARIANT_STYLES[variant], marker=VARIANT_MARKERS[variant], ms=4,
                   label=f"{variant_label(variant)}: Hkv={n_kv}  (÷{base.n_heads // n_kv} vs MHA)")
    ds = PRESETS.get("deepseek-v3")
    if ds is not None and ds.kv_latent_dim:  # MLA's latent at the same layers: one per token, whatever Hq
        sizes = [latent_cache_bytes(base.layers, ds.kv_latent_dim, int(t)) for t in tokens]
        right.plot(tokens, sizes, color="#444444", ls=VARIANT_STYLES["mla"], marker=VARIANT_MARKERS["mla"], ms=4,
                   label=f"MLA: latent {ds.kv_lora_rank} + {ds.qk_rope_head_dim} (DeepSeek-V3's)  "
                         f"(÷{2 * base.n_heads * base.head_dim / ds.kv_latent_dim:.3g} vs MHA)")
    right.set_title(f"one geometry (llama-3-8b: L={base.layers}, Hq={base.n_heads}, D={base.head_dim}) "
                    "as MHA / GQA / MQA, and MLA's latent", fontsize=9)
    memory = df["device_memory_bytes"].dropna()
    for ax in (left, right):
        seq_axis(ax, tokens, "context length (tokens, log scale)")
        bytes_axis(ax, "KV-cache bytes (log scale)")
        if len(memory):
            ax.axhline(float(memory.iloc[0]), color="black", lw=1.2, ls="-.",
                       label=f"this run's device memory ({fmt_bytes(float(memory.iloc[0]))})")
        ax.grid(alpha=0.3)
        # below the axes: inside, the legend would hide the lines it explains; as wide as half the figure
        handles = ax.get_legend_handles_labels()[0]
        fit_legend(lambda ax=ax, handles=handles, **kw: ax.legend(
            handles=handles, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False, **kw),
            handles, fig, width=fig.get_figwidth() * fig.dpi / 2 - 40)
    return fig
