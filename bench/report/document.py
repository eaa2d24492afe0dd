"""What the report says, as format-free blocks (headings, paragraphs, tables, figures).

render.py turns the same blocks into HTML and Markdown, so both say the same thing. Cells are plain text
taken partly from results files: escaping is the renderer's job, never done (or skipped) here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from bench.backends import TRANSFORMERS_DEFAULT, TRANSFORMERS_IMPLEMENTATIONS
from bench.engine.agenda import ABSENT, OVER
from bench.report import kernels, traces
from bench.report.catalogue import FIGURES
from bench.report.claims import verdicts
from bench.report.claims.auto_choice import default_loss
from bench.report.frames import SHAPE_KEYS, geomean, shape_keys_but, shape_label
from bench.report.hf_choice import advice, implementation_rows
from bench.report.load import Loaded, RunInfo
from bench.report.model_section import model_summary
from bench.report.sparse_cost import crossovers, sparse_costs
from bench.report.suspects import note as suspect_note
from bench.report.tables import best_backends, headline_speedups
from bench.report.traits import BASELINE
from bench.report.units import fmt_bandwidth, fmt_bytes, fmt_flops, fmt_seconds
from bench.report.verdict import NO_FACTS


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Para:
    text: str
    kind: str = "text"  # text | warning | caption


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]
    verdict_column: int | None = None  # colour this column's holds / does not hold in HTML


@dataclass(frozen=True)
class Image:
    file: str  # PNG file name in the report folder (ours, never from a results file)
    title: str
    caption: str


Block = Heading | Para | Table | Image


def text(value: Any) -> str:
    """A table cell: missing -> an em dash, floats short."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _times(x: float | None) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.2f}×"


def env_text(key: str, value: Any) -> str:
    """Environment values as one readable cell; nested ones (allocator settings, NVML) flattened."""
    if key == "device_memory_bytes" and isinstance(value, (int, float)):
        return fmt_bytes(value)
    if key == "allocator" and isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "default (no MALLOC_* or LD_PRELOAD set)"
    if key == "nvml" and isinstance(value, dict):
        if not value.get("available"):
            return f"unavailable ({value.get('reason', 'no reason given')})"
        gpus = value.get("gpus") if isinstance(value.get("gpus"), list) else []
        return f"driver {value.get('driver')}; " + "; ".join(
            f"{g.get('name')}: SM {g.get('sm_clock_mhz')}/{g.get('sm_clock_max_mhz')} MHz, "
            f"{g.get('power_w')}/{g.get('power_limit_w')} W, {g.get('temperature_c')} °C, "
            f"clock event reasons {g.get('clock_event_reasons')}" for g in gpus if isinstance(g, dict))
    if isinstance(value, dict):
        return ", ".join(f"{k}={text(v)}" for k, v in value.items()) or "—"
    if isinstance(value, list):
        return ", ".join(text(v) for v in value) or "—"
    return text(value)


ENV_FIELDS = ("torch", "cuda", "cpu_model", "gpu_name", "threads", "device_memory_bytes", "allocator", "git_commit")


def environment(runs: list[RunInfo], frame: pd.DataFrame) -> list[Block]:
    rows: list[list[str]] = []

    def add(label: str, values: list[str]) -> None:
        rows.append([label, *values])

    add("run", [r.run_id for r in runs])
    add("machine", [r.machine for r in runs])
    add("device", [r.device for r in runs])
    add("profile", [text(r.profile) for r in runs])
    add("complete", [text(r.complete) for r in runs])
    add("written", [text(r.datetime) for r in runs])
    for key in ENV_FIELDS:
        add(key, [env_text(key, r.env.get(key)) for r in runs])
    add("GEMM ceiling (measured)", [fmt_flops(r.calibration.gemm_flops_per_s)
                                    if r.calibration.gemm_flops_per_s is not None else "—" for r in runs])
    add("copy ceiling (measured)", [fmt_bandwidth(r.calibration.copy_bytes_per_s)
                                    if r.calibration.copy_bytes_per_s is not None else "—" for r in runs])
    rows += kernels.ceiling_rows([r.calibration for r in runs], [r.env.get("gpu_name") for r in runs])
    # a dtype this CPU has no hardware for: its cases are slow for that reason, which a reader must know
    add("emulated dtypes (GEMM far below fp32's)", [", ".join(r.calibration.emulated) or "none" for r in runs])
    add("calibration notes", ["; ".join(r.calibration.notes) or "—" for r in runs])
    counts = frame.groupby("run_id")["status"].agg(lambda s: f"{(s == 'ok').sum()} ok of {len(s)}")
    add("cases", [counts.get(r.run_id, "0") for r in runs])
    shown = set(ENV_FIELDS) | {"device", "profile"}
    for key in sorted({k for r in runs for k in r.env if k not in shown}):  # whatever else the engine recorded
        add(key, [env_text(key, r.env.get(key)) for r in runs])
    add("results file", [r.source for r in runs])
    return [Heading("Environment"), Table(["", *[f"run {i + 1}" for i in range(len(runs))]], rows)]


def summary(run: RunInfo, df: pd.DataFrame) -> list[Block]:
    """The run in a few sentences: the fastest backend per phase, what did not run, what is noisy."""
    blocks: list[Block] = []
    head = headline_speedups(df)
    not_ok = int((df["status"] != "ok").sum())
    sentences = []
    for phase in dict.fromkeys(h["phase"] for h in head):
        top = next(h for h in head if h["phase"] == phase)
        sentences.append(f"{phase.capitalize()}: the fastest against {BASELINE} is {top['backend']}, "
                         f"{_times(top['geomean'])} on average (geometric mean over {top['shapes']} shapes) and up "
                         f"to {_times(top['max'])} ({top['at']}).")
    if not sentences:
        sentences.append(f"No speedups over {BASELINE} to report ({BASELINE} or the other backends did not run).")
    if not_ok:
        sentences.append(f"{not_ok} of {len(df)} cases did not run; they are listed under 'Cases that did not run'.")
    else:
        sentences.append(f"All {len(df)} cases ran.")
    skipped = int((df["status"] == "skipped").sum())
    if skipped:
        sentences.append(f"{skipped} of them were skipped to keep the run within its time budget, after the least set "
                         "of cases that answers each claim and figure (`--time-budget none` runs them all).")
    sentences += emulated_sentences(run, df)
    noisy = int((df["noisy"].fillna(False) & (df["status"] == "ok")).sum())
    if noisy:
        sentences.append(f"{noisy} of {int((df['status'] == 'ok').sum())} timings are flagged noisy (their "
                         "confidence interval stayed wide): read small differences with care.")
    blocks.append(Para(" ".join(sentences)))
    if run.complete is False:
        blocks.append(Para(f"Run {run.run_id} is incomplete: the sweep stopped before its end.", "warning"))
    return blocks


def emulated_sentences(run: RunInfo, df: pd.DataFrame) -> list[str]:
    """Per dtype this CPU emulates: what its representative cases cost against the same shapes in fp32."""
    out = []
    main = run.calibration.gemm_flops_per_s
    for dtype in run.calibration.emulated:
        ok = df[(df["status"] == "ok")]
        mine = ok[ok["dtype"] == dtype]
        twin_keys = ["backend", *shape_keys_but("dtype")]  # the same case in fp32: every field equal but the dtype
        fp32 = ok[ok["dtype"] == "fp32"][[*twin_keys, "median_s"]].drop_duplicates(twin_keys)
        pairs = mine.merge(fp32, on=twin_keys, suffixes=("", "_fp32"))
        ratios = {str(b): list(g["median_s"] / g["median_s_fp32"]) for b, g in pairs.groupby("backend")}
        share = run.calibration.gemm_by_dtype.get(dtype)
        gemm = f" (its GEMM runs at {100 * share / main:.1f}% of fp32's)" if share and main else ""
        shown = ", ".join(f"{b} {_times(sum(r) / len(r))}" for b, r in sorted(ratios.items()))
        cost = f": against the same shapes in fp32 it took {shown} the time" if shown else ""
        out.append(f"{dtype} is emulated on this CPU{gemm}, so it was measured at {len(mine)} representative shapes, "
                   f"not across the grid{cost}.")
    return out


def best_section(df: pd.DataFrame) -> list[Block]:
    """The best backend per shape family, then every backend's speedup over the baseline per phase."""
    blocks: list[Block] = []
    best = sorted(best_backends(df), key=lambda b: (not b["family"].startswith("prefill"), b["family"]))
    if best:
        blocks.append(Para("Best backend per shape family: the one fastest at the most shapes of the family "
                           f"(lengths, head counts), with its geometric-mean speedup over {BASELINE}."))
        loss = default_loss(df)  # torch SDPA's automatic choice against the fastest kernel it could have forced
        extra = ["automatic SDPA vs its fastest kernel"] if loss else []
        blocks.append(Table(["shape family", "best backend", "fastest at", "runner-up", f"best vs {BASELINE}", *extra],
                            [[b["family"], b["best"], f"{b['wins']} of {b['shapes']} shapes", text(b["runner_up"]),
                              _times(b["speedup_vs_naive"]), *([_times(loss[b["family"]]) if b["family"] in loss
                                                                else "–"] if loss else [])] for b in best]))
    head = headline_speedups(df)
    if head:
        blocks.append(Para(f"Speedup over {BASELINE} per backend, over the shapes both ran."))
        blocks.append(Table(["phase", "backend", f"speedup over {BASELINE} (geomean)", "largest", "at", "shapes"],
                            [[h["phase"], h["backend"], _times(h["geomean"]), _times(h["max"]), h["at"],
                              str(h["shapes"])] for h in head]))
    return blocks or [Para("No dense attention case ran ok: no best backend to name.")]


def sparse_section(df: pd.DataFrame) -> list[Block]:
    """Sparse runs: each method at the longest length it ran beside the best dense kernel, its S*, and its useful
    against executed FLOPs (bench.report.sparse_cost)."""
    costs = sparse_costs(df)
    if costs.empty:
        return []
    lines = crossovers(costs)
    rows = []
    for _, line in lines.sort_values(["phase", "mask", "budget", "last_ratio"]).iterrows():
        mine = costs[(costs["method"] == line["method"]) & (costs["phase"] == line["phase"])
                     & (costs["mask"] == line["mask"]) & (costs["dtype"] == line["dtype"])
                     & (costs["n_kv_heads"] == line["n_kv_heads"])]
        r = mine.loc[mine["length"].idxmax()]
        executed = r.get("executed_flops")
        efficiency = f"{executed / r['useful_flops']:.2f}" if pd.notna(executed) and r["useful_flops"] else "—"
        index = fmt_seconds(r["indexer_s"]) if pd.notna(r.get("indexer_s")) else "—"
        rows.append([f"{r['phase']} {r['mask']} {r['dtype']} Hq={r['n_heads']} Hkv={r['n_kv_heads']}",
                     r["budget"], r["method"], f"{r['density']:.3g}", str(r["length"]), fmt_seconds(r["median_s"]),
                     index, fmt_seconds(r["cost_s"]), f"{r['best_dense']} {fmt_seconds(r['best_dense_s'])}",
                     _times(r["ratio"]), str(int(line["s_star"])) if pd.notna(line["s_star"]) else "none here",
                     fmt_flops(r["flops"] / r["median_s"]), efficiency,
                     f"{_times(r['speedup'])} of {_times(r['ideal'])}"])
    return [Heading("Sparse attention"),
            Para("Each sparse method (a sparsity on a backend) at the longest length it ran: the kernel's time, its "
                 "top-K indexer's, and their sum with any per-forward mask build (cost per forward), against the "
                 "fastest dense kernel at the same shape; S* is the length from which it stays faster. Throughput "
                 "counts useful FLOPs (the pairs kept); executed / useful is what the kernel computes per useful "
                 "FLOP (1 is ideal; a dense masked kernel computes 1 / density). The speedup is over the same "
                 "backend's dense run (the fastest dense kernel's for a sparse-only kernel), beside the ideal "
                 "1 / density."),
            Table(["shape", "budget", "method", "density", "length", "kernel", "indexer", "cost per forward",
                   "best dense", "cost / dense", "S*", "useful FLOP/s", "executed / useful", "speedup vs ideal"],
                  rows)]


def _long(seconds: float) -> str:
    """A time to serve: '1,370 s (22.8 min)' when long, fmt_seconds below 100 s."""
    return f"{seconds:,.0f} s ({seconds / 60:.1f} min)" if seconds >= 100 else fmt_seconds(seconds)


def _step_mix(w: dict) -> str:
    """', 8,012 prefill only, 14,283 decode only, 3,328 mixing both (21,870 distinct shapes)': each phase's buckets
    count the steps with that half."""
    mixed = w.get("mixed_steps", 0)
    per = {phase: sum(b["steps"] for b in w.get("buckets") or () if b["phase"] == phase) - mixed
           for phase in ("prefill", "decode")}
    shapes = f" ({w['shapes']:,} distinct shapes)" if w.get("shapes") else ""
    return (f": {per['prefill']:,} prefill only, {per['decode']:,} decode only, {mixed:,} mixing prefill chunks with "
            f"decode rows{shapes}")


def traces_section(run: RunInfo, df: pd.DataFrame) -> list[Block]:
    """--workload runs: per trace, what it was and how it was scheduled, each backend's time to serve it, the buckets
    that dominate the winner's time, and the grid's winner beside the trace's (bench.report.traces)."""
    workloads = run.meta.workloads or {}
    table = traces.serve_table(df, workloads)
    if table.empty:
        return []
    out: list[Block] = [Heading("Real traffic: replayed traces")]
    for name, w in workloads.items():
        mine = table[table["workload"] == name]
        if mine.empty:
            continue
        k = w.get("knobs") or {}
        err = w.get("error") or {}
        chunk = f", prompt chunks of at most {k['prefill_chunk']:,}" if k.get("prefill_chunk") else ""
        out += [Heading(f"Trace: {name}", 3),
                Para(f"{w.get('requests', 0):,} requests ({w.get('source')}) over {w.get('duration_s', 0):,.0f} s: "
                     f"{w.get('prompt_tokens', 0):,} prompt and {w.get('output_tokens', 0):,} output tokens. "
                     f"Scheduled as a continuous-batching server ({k.get('max_batch_tokens')} tokens and "
                     f"{k.get('max_seqs')} sequences a step{chunk}, a {k.get('step_ms')} ms step clock, KV pages of "
                     f"{w.get('page_size') or 'contiguous'}): {w.get('steps', 0):,} steps{_step_mix(w)}. Each step's "
                     f"prefill half and decode half fall in {len(w.get('buckets') or [])} buckets; their batches "
                     f"change the trace's attention work by {100 * err.get('packed', 0):+.1f}% counted as packed "
                     f"pairs and {100 * err.get('padded', 0):+.1f}% as padded ones (the bucketing's error).")]
        rows = []
        for _, r in mine.iterrows():
            total = r["prefill_s"] + r["decode_s"]
            served = _long(r["served_s"]) if r["complete"] else \
                f"incomplete ({_long(total)} of what ran)" if total else "ran none"
            share = f"{100 * r['prefill_s'] / total:.0f}%" if total else "—"
            fast = [f"{r[f'fast_{p:g}']:.2f}" if pd.notna(r[f"fast_{p:g}"]) else "—" for p in traces.FAST_P]
            rows.append([r["backend"], f"{r['buckets_ok']} of {r['buckets']}", served, share,
                         f"{r['tokens_per_s']:,.0f}" if r["complete"] else "—", *fast])
        out.append(Table(["backend", "buckets run", "time to serve", "prefill share", "tokens / s of attention",
                          *[f"fast_{p:g}" for p in traces.FAST_P]], rows))
        complete = mine[mine["complete"]]
        if complete.empty:
            continue
        winner = complete.iloc[0]
        top = traces.dominant_buckets(df, workloads, winner["backend"], name)
        out.append(Para(f"fast_p: the share of {traces.BASELINE}'s time to serve spent in buckets where the backend "
                        f"is at least p× faster. The buckets that take most of {winner['backend']}'s time:", "caption"))
        out.append(Table(["phase", "batch (rows: N×queries:keys)", "steps", "time a step", "share"],
                         [[b["phase"], b["lengths"].removeprefix("rows:"), f"{b['steps']:,}",
                           fmt_seconds(b["median_s"]), f"{100 * b['share']:.0f}%"] for _, b in top.iterrows()]))
    verdict = traces.grid_vs_trace(df, run.meta)
    out.append(Para(f"Grid against trace ({verdict.verdict}): {verdict.numbers}"))
    return out


def figure_blocks(files: dict[str, str]) -> list[Block]:
    return [Image(file, FIGURES[name].title, FIGURES[name].how_to_read) for name, file in files.items()]


def claims_table(df: pd.DataFrame, run: RunInfo | None = None) -> Table:
    """One row per registered claim; where it does not hold, its reason follows the numbers."""
    rows = [[v.claim, v.verdict, v.judged_on or "–", v.numbers + (f" Why: {v.why}" if v.why else "")]
            for v in verdicts(df, run.meta if run is not None else NO_FACTS)]
    return Table(["claim (from the tutorials)", "verdict on this run", "judged on", "the numbers behind it"], rows,
                 verdict_column=1)


def suspect_notes(run: RunInfo) -> list[Block]:
    """The timings that looked stalled, re-measured during the run (bench.report.suspects)."""
    text = suspect_note(run.meta.suspects)
    return [Para(text)] if text else []


def plan_notes(run: RunInfo) -> list[Block]:
    """What the run's plan said, before its first case, of the questions it could not answer in its time budget."""
    lines = []
    for q in run.questions:
        funding = q.get("time_budget_s") or q.get("budget_s")  # files before 2026-12-04 name it budget_s
        if q.get("state") == OVER and funding:
            lines.append(f"{q.get('asks')}: its least ({q.get('least_cases')} cases, about {q.get('least_s')} s) did "
                         f"not fit this run's time budget; `--time-budget {int(funding // 60)}m` answers it.")
        elif q.get("state") == ABSENT and q.get("command"):
            when = f" (about {int(q['elsewhere_s'] // 60)} min on this machine)" if q.get("elsewhere_s") else ""
            lines.append(f"{q.get('asks')}: not in this run's profile; `{q['command']}` measures it{when}.")
    if not lines:
        return []
    return [Para("What the plan said before the first case, of the questions it could not answer here: "
                 + " ".join(lines))]


def models_section(run: RunInfo, df: pd.DataFrame) -> list[Block]:
    """--model-config runs: each model's attention cost per token, its KV cache, and what fits on this device."""
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


def not_run(df: pd.DataFrame) -> list[Block]:
    bad = df[df["status"] != "ok"]
    if bad.empty:
        return [Para("Every case ran and passed the correctness check.")]
    bad = bad.copy()
    skipped = bad["status"] == "skipped"
    if skipped.any():  # one row per backend, not one per predicted time
        pred = bad.loc[skipped, "predicted_s"] if "predicted_s" in bad else None
        span = (f" (predicted {pred.min():.1f}-{pred.max():.1f} s each)" if pred is not None and pred.notna().any()
                else "")
        bad.loc[skipped, "reason"] = f"did not fit the run's time budget{span}"
    rows = []
    for (backend, status, reason), grp in bad.groupby(["backend", "status", "reason"], dropna=False):
        rows.append([str(backend), str(status), str(reason)[:300], str(len(grp)), str(grp["case_id"].iloc[0])])
    return [Table(["backend", "status", "reason", "cases", "for example"], rows)]


def comparison(runs: list[RunInfo], frame: pd.DataFrame) -> list[Block]:
    """Median per case per run, and each run's ratio to the first (oldest) run; cases matched without device."""
    keys = ["backend", *SHAPE_KEYS]
    base = runs[0].run_id
    wide = frame.pivot_table(index=keys, columns="run_id", values="median_s", aggfunc="first", dropna=False)
    status = frame.pivot_table(index=keys, columns="run_id", values="status", aggfunc="first", dropna=False)
    present = status.notna().sum(axis=1) >= 2
    wide, status = wide[present], status[present]
    if wide.empty:
        return [Heading("Comparison of runs"), Para("The runs share no case to compare.")]
    headers = ["case"] + [f"{r.run_id} ({r.machine})" for r in runs]
    headers += [f"{r.run_id} / {base}" for r in runs[1:]]
    rows, ratios = [], {r.run_id: [] for r in runs[1:]}
    for key in wide.index:
        row = dict(zip(keys, key, strict=True))
        cells = [f"{row['backend']}: {shape_label(row)}"]
        for r in runs:
            t = wide.at[key, r.run_id] if r.run_id in wide.columns else None
            s = status.at[key, r.run_id] if r.run_id in status.columns else None
            cells.append(fmt_seconds(t) if isinstance(t, float) and math.isfinite(t) else text(s))
        for r in runs[1:]:
            b = wide.at[key, base] if base in wide.columns else None
            t = wide.at[key, r.run_id] if r.run_id in wide.columns else None
            ok = all(isinstance(v, float) and math.isfinite(v) and v > 0 for v in (b, t))
            cells.append(_times(t / b) if ok else "—")
            if ok:
                ratios[r.run_id].append(t / b)
        rows.append(cells)
    overall = "; ".join(f"{rid} / {base}: geometric mean {_times(geomean(v))} over {len(v)} cases"
                        for rid, v in ratios.items())
    return [Heading("Comparison of runs"),
            Para(f"Median time per case in each run; ratios above 1× mean slower than {base}. {overall}."),
            Table(headers, rows)]


def kernel_section(df: pd.DataFrame, suffix: str) -> list[Block]:
    """Which kernel each sdpa backend ran, and the share of a warm call outside the kernels (bench.report.kernels).

    A backend that ran one kernel everywhere gets one sentence; a table only where the choice varies."""
    agreed, choices, overhead = kernels.sdpa_agreed(df), kernels.sdpa_choices(df), kernels.overhead_rows(df)
    if not agreed and not choices and not overhead:
        return []
    blocks: list[Block] = [Heading("Kernels" + suffix)]
    if agreed:
        blocks.append(Para("The kernel each sdpa backend ran (from the profiler's op names): " + " ".join(agreed)))
    if choices:
        blocks += [Para("Where a backend's kernel changed with the case: the kernel per shape family and dtype."),
                   Table(["device", "backend", "shape family", "dtype", "kernel × cases", "lengths"], choices)]
    if overhead:
        blocks += [Para("Share of a warm call spent outside the kernels (CPU: outside the aten ops), median over "
                        "the cases; launch bound: warm ≥ 2 × kernel time."),
                   Table(["device", "backend", "phase", "outside the kernels", "launch bound"], overhead)]
    return blocks


def _per_run(runs: list[RunInfo], frame: pd.DataFrame, heading: str, section, several: bool) -> list[Block]:
    """One section per run: its heading (with the run's id when there are several) and section(run, its rows)."""
    blocks: list[Block] = []
    for run in runs:
        blocks.append(Heading(heading + (f": {run.run_id}" if several else "")))
        blocks += section(run, frame[frame["run_id"] == run.run_id])
    return blocks


def build(loaded: Loaded, figures: dict[str, dict[str, str]]) -> list[Block]:
    """The whole report; `figures` maps run_id -> {figure name: PNG file} of the figures drawn for that run.

    Answers first (summary, the claims' verdicts, the best backends), then how they were measured (environment,
    models, figures, kernels), then what did not run."""
    runs, frame = loaded.runs, loaded.frame
    several = len(runs) > 1
    title = runs[0].run_id if not several else " vs ".join(r.run_id for r in runs)
    blocks: list[Block] = [Heading(f"attnbench report: {title}", 1)]
    if loaded.errors:
        blocks.append(Para("Inputs that could not be read and were left out: " + " | ".join(loaded.errors),
                           "warning"))
    for run in runs:
        blocks.append(Heading("Summary" + (f": {run.run_id} on {run.machine}" if several else "")))
        blocks += summary(run, frame[frame["run_id"] == run.run_id])
    blocks += _per_run(runs, frame, "Claims", lambda run, df: [claims_table(df, run), *plan_notes(run),
                                                              *suspect_notes(run)], several)
    blocks += _per_run(runs, frame, "Best backends", lambda run, df: best_section(df), several)
    for run in runs:
        blocks += sparse_section(frame[frame["run_id"] == run.run_id])
        blocks += traces_section(run, frame[frame["run_id"] == run.run_id])
    blocks += environment(runs, frame)
    blocks += _per_run([r for r in runs if r.models], frame, "Models", models_section, several)
    blocks += _per_run(runs, frame, "Figures", lambda run, df: figure_blocks(figures.get(run.run_id, {}))
                       or [Para("No figure has data in this run.")], several)
    for run in runs:
        blocks += kernel_section(frame[frame["run_id"] == run.run_id], f": {run.run_id}" if several else "")
    blocks += _per_run(runs, frame, "Cases that did not run", lambda run, df: not_run(df), several)
    if several:
        blocks += comparison(runs, frame)
    return blocks
