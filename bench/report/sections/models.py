"""The models section (`--model-config` runs): each model's attention cost per token, its KV cache, what fits on this
device (bench.report.model_section), and transformers' attn_implementations side by side (bench.report.hf_choice).

A hybrid (its facts name a `linear_sweep`: bench.kinds.model) also gets the per-token decode cost of its whole stack
by layer kind (stack_rows): per dtype, batch and decode lengths, each kind's step is the best measured over the
backends (the fastest median of a case of that kind: attention layers by their mask, full or sliding or chunked;
linear layers by the run's linear cases of the model), per token = step / (batch x queries); the stack's cost is the
sum over kinds of layers x that step, and each kind's share its part of the sum. A kind with no ok case at a point
leaves the point's total out (a sum missing a kind would understate it). The per-layer tables above read the
attention cases alone (the linear cases are the stack table's)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from bench.analysis.load import RunInfo
from bench.backends import TRANSFORMERS_DEFAULT, TRANSFORMERS_IMPLEMENTATIONS
from bench.report.blocks import Block, Heading, Para, Table
from bench.report.hf_choice import advice, implementation_rows
from bench.report.model_section import model_summary
from bench.report.units import fmt_bytes, fmt_seconds

if TYPE_CHECKING:
    from bench.report.sections import Report

ATTENTION_KINDS = ("full", "sliding", "chunked")  # a layer kind not among these is a hybrid's linear kind


def section(df: pd.DataFrame, run: RunInfo, report: Report) -> list[Block] | None:
    """None for a run without model configs."""
    if not run.models:
        return None
    memory = run.env.get("device_memory_bytes")
    out: list[Block] = []
    linear = df["linear"].fillna("none") != "none" if "linear" in df else pd.Series(False, index=df.index)
    summaries = model_summary(run.models, df[~linear], memory if isinstance(memory, (int, float)) else None)
    for name, facts in run.models.items():  # a model whose every layer is linear has no attention case to summarise
        if name not in {m["model"] for m in summaries} and (stack := stack_blocks(facts, df[df["model"] == name])):
            out += [Heading(f"Model: {name}", 3), *stack]
    for m in summaries:
        facts = m["facts"]
        layers = facts.get("layers") or {}
        kinds = [k for k in ("full", "sliding") if layers.get(k)]
        geometry = ", ".join([f"{layers[k]} {k}-attention layers" for k in kinds]
                             + [f"{n} {k} layers (linear)" for k, n in layers.items()
                                if n and k not in ATTENTION_KINDS])
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
        out += stack_blocks(facts, df[df["model"] == m["model"]])
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


def layer_kind(mask: str) -> str:
    """An attention case's layer kind by its mask."""
    mask = str(mask)
    return "sliding" if mask.startswith("window") else "chunked" if mask.startswith("chunk") else "full"


def stack_rows(facts: dict, df: pd.DataFrame) -> list[dict]:
    """Per dtype, batch and decode lengths of a hybrid: each layer kind's best decode step per token (seconds and
    backend), its layers x that step, its share, and the stack's total (None where a kind has no ok case); module
    docstring."""
    sweep = facts.get("linear_sweep") or {}
    layers = {k: n for k, n in (facts.get("layers") or {}).items() if n}
    if "method" not in sweep or df.empty:
        return []
    ok = df[(df["status"] == "ok") & (df["phase"] == "decode") & (df["scope"].fillna("attention") == "attention")]
    method = ok["linear"].fillna("none") if "linear" in ok else pd.Series("none", index=ok.index)
    rows = []
    for (dtype, batch, seq_q, seq_kv), grp in ok.groupby(["dtype", "batch", "seq_q", "seq_kv"], sort=True):
        best: dict[str, tuple[float, str]] = {}
        for i, r in grp.iterrows():
            kind = sweep["kind"] if method[i] == sweep["method"] else layer_kind(r["mask"])
            seconds = float(r["median_s"]) / (int(r["batch"]) * int(r["seq_q"]))
            if kind in layers and (kind not in best or seconds < best[kind][0]):
                best[kind] = (seconds, str(r["backend"]))
        cost = {k: layers[k] * best[k][0] for k in layers if k in best}
        total = sum(cost.values()) if len(cost) == len(layers) else None
        rows.append({"dtype": dtype, "batch": int(batch), "seq_q": int(seq_q), "seq_kv": int(seq_kv),
                     "kinds": {k: {"layers": layers[k], "step_s": best[k][0], "backend": best[k][1],
                                   "cost_s": cost[k], "share": cost[k] / total if total else None}
                               for k in cost}, "total_s": total})
    return rows


def stack_blocks(facts: dict, df: pd.DataFrame) -> list[Block]:
    """The stack table of a hybrid (stack_rows), or nothing."""
    rows = stack_rows(facts, df)
    if not rows:
        return []
    kinds = [k for k, n in (facts.get("layers") or {}).items() if n]

    def cell(r: dict, k: str) -> str:
        c = r["kinds"].get(k)
        if c is None:
            return "—"
        share = f", {100 * c['share']:.0f}%" if c["share"] is not None else ""
        return f"{c['layers']} × {fmt_seconds(c['step_s'])} ({c['backend']}) = {fmt_seconds(c['cost_s'])}{share}"

    sweep = facts["linear_sweep"]
    keys = f"{sweep['n_kv_heads']} key head{'s' * (sweep['n_kv_heads'] != 1)}"
    note = f" ({sweep['note']})" if sweep.get("note") else ""
    return [Para(f"Decode cost per token of the whole stack by layer kind: each kind's layers × its best measured "
                 f"decode step per token (the backend named), summed; the {sweep['kind']} layers ran as "
                 f"{sweep['method']} at {sweep['n_heads']} value heads over {keys}, head dim "
                 f"{sweep['head_dim']}{note}. Projections, MLPs and the short convolution are not counted."),
            Table(["dtype", "shape", *[f"{k} layers" for k in kinds], "stack, per token"],
                  [[r["dtype"], f"B={r['batch']} Sq={r['seq_q']} KV={r['seq_kv']:,}", *[cell(r, k) for k in kinds],
                    fmt_seconds(r["total_s"]) if r["total_s"] else "—"] for r in rows])]
