"""The models section (`--model-config` runs): each model's attention cost per token, its KV cache, what fits on this
device (bench.report.model_section), and transformers' attn_implementations side by side (bench.report.hf_choice)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from bench.backends import TRANSFORMERS_DEFAULT, TRANSFORMERS_IMPLEMENTATIONS
from bench.report.blocks import Block, Heading, Para, Table
from bench.report.hf_choice import advice, implementation_rows
from bench.report.load import RunInfo
from bench.report.model_section import model_summary
from bench.report.units import fmt_bytes, fmt_seconds

if TYPE_CHECKING:
    from bench.report.sections import Report


def section(df: pd.DataFrame, run: RunInfo, report: Report) -> list[Block] | None:
    """None for a run without model configs."""
    if not run.models:
        return None
    memory = run.env.get("device_memory_bytes")
    out: list[Block] = []
    for m in model_summary(run.models, df, memory if isinstance(memory, (int, float)) else None):
        facts = m["facts"]
        layers = facts.get("layers") or {}
        kinds = [k for k in ("full", "sliding") if layers.get(k)]
        geometry = ", ".join(f"{layers[k]} {k}-attention layers" for k in kinds)
        window = f" (window {facts['window']:,})" if facts.get("window") and layers.get("sliding") else ""
        kv = "; ".join(f"{d} {fmt_bytes(b)}" for d, b in m["kv_bytes_per_token"].items()) or "no KV cache"
        out += [Heading(f"Model: {m['model']}", 3), Para(f"{geometry}{window}. KV cache per token, all layers: {kv}.")]
        rows = []
        for r in sorted(m["times"], key=lambda r: (r["phase"] != "prefill", r["backend"], r["dtype"], r["seq_kv"])):
            lengths = f"S={r['seq_kv']}" if r["phase"] == "prefill" else f"Sq={r['seq_q']} KV={r['seq_kv']}"
            per_kind = [fmt_seconds(r[f"{k}_layer_s_per_token"]) if r.get(f"{k}_layer_s_per_token") else "—"
                        for k in kinds]
            total = r["all_layers_s_per_token"]
            rows.append([r["backend"], r["dtype"], r["phase"], f"B={r['batch']} {lengths}", *per_kind,
                         fmt_seconds(total) if total else "—"])
        out.append(Table(["backend", "dtype", "phase", "shape", *[f"one {k} layer, per token" for k in kinds],
                          "all layers, per token"], rows))
        out += implementations_table(m["model"], implementation_rows(m["times"], layers), kinds, layers)
        if m["fits"]:
            out.append(Para(f"What fits in this device's memory ({fmt_bytes(memory)}), counting the KV cache of all "
                            "layers plus one layer's attention peak by the backend's memory model (materialising "
                            "backends hold the S×S scores); weights and activations are not counted."))
            out.append(Table(["backend", "dtype", "memory model", "longest context at batch 1",
                              "largest batch at context"],
                             [[f["backend"], f["dtype"], f["memory"], f"{f['max_context']:,} tokens",
                               f"{f['max_batch']:,} at {f['at_context']:,}"] for f in m["fits"]]))
    return out


def implementations_table(model: str, rows: list[dict], kinds: list[str], layers: dict) -> list[Block]:
    """transformers' attn_implementations side by side for the model: per layer, per forward, and the advice."""
    if not rows:
        return []
    impls = sorted({b for r in rows for b in r["forward_s"]}, key=list(TRANSFORMERS_IMPLEMENTATIONS).index)

    def cell(r: dict, b: str) -> str:
        if b not in r["forward_s"]:
            return "—"
        layer = " / ".join(fmt_seconds(r["per_layer_s"][b][k]) for k in kinds if k in r["per_layer_s"][b])
        mask = r["mask_s"].get(b)
        return f"{layer} a layer; mask {fmt_seconds(mask) if mask is not None else '—'}"

    table = []
    for r in rows:
        lengths = f"S={r['seq_kv']:,}" if r["phase"] == "prefill" else f"Sq={r['seq_q']} KV={r['seq_kv']:,}"
        loss = f"{r['default_loss']:.2f}×" if r["default_loss"] else "—"
        table.append([r["dtype"], r["phase"], f"B={r['batch']} {lengths}", *[cell(r, b) for b in impls],
                      f"{TRANSFORMERS_IMPLEMENTATIONS[r['fastest']]} ({fmt_seconds(r['forward_s'][r['fastest']])})",
                      loss])
    count = " + ".join(f"{layers[k]} × {k}" for k in kinds)
    blocks: list[Block] = [
        Para(f"transformers' attn_implementations at this model's attention shapes: each cell is one layer's kernel "
             f"({' / '.join(kinds)} layers) and the mask transformers builds for it, once per forward and shared by "
             f"the layers; a forward costs {count} layer kernels plus one mask per layer kind. The default is "
             f"'{TRANSFORMERS_IMPLEMENTATIONS[TRANSFORMERS_DEFAULT]}'."),
        Table(["dtype", "phase", "shape", *[f"{TRANSFORMERS_IMPLEMENTATIONS[b]} ({b})" for b in impls],
               "fastest (one forward)", "default vs fastest"], table)]
    if said := advice(model, rows):
        blocks.append(Para(said))
    return blocks
