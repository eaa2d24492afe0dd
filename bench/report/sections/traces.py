"""The traces section (`--workload` runs): per replayed trace, what it was and how it was scheduled, each backend's
time to serve it, the buckets that dominate the winner's time, and the grid's winner beside the trace's
(bench.analysis.time_to_serve). A run with a prefix cache (--prefix-cache) also gets, per trace with block hashes,
the cache's hit rate and each backend's attention time with the cache and without it: the same measured buckets'
times weighed by each schedule's steps (bench.traces.replay keeps both)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from bench.analysis import time_to_serve
from bench.analysis.load import RunInfo
from bench.claims.trace import grid_vs_trace
from bench.report.blocks import Block, Heading, Para, Table
from bench.report.units import fmt_seconds

if TYPE_CHECKING:
    from bench.report.sections import Report


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


def _reuse(w: dict) -> str:
    """' 120 rows skipped (failed (0 response tokens)). 7,244 decode steps have rows sharing a prefix.' ("" if none)."""
    said = [f" {n:,} rows skipped ({why})." for why, n in (w.get("skipped") or {}).items()]
    if w.get("block_requests"):
        said.append(f" {w['block_requests']:,} requests carry prompt block hashes; {w.get('shared_steps', 0):,} decode "
                    "steps have rows sharing a prefix (what a cascade kernel could read once).")
    return "".join(said)


def cache_blocks(df: pd.DataFrame, name: str, w: dict, mine: pd.DataFrame) -> list[Block]:
    """The prefix cache's hit rate, and each backend's attention time with it and without it (nothing when the run
    had no cache)."""
    c = w.get("prefix_cache")
    if not c:
        return []
    said = (f"Prefix cache of {c['capacity']:,} blocks, least recently used evicted: {100 * c['hit_rate']:.1f}% of the "
            f"prompt tokens were cached ({c['cached_tokens']:,} of {c['prompt_tokens']:,}; {c['block_hits']:,} of "
            f"{c['blocks']:,} blocks hit, {c['evictions']:,} evicted).")
    without = c.get("without")
    if not without:
        return [Para(said + " The trace has no block hashes, so the cache cannot hit and the schedule is the same.")]
    alone = {name: w | {"buckets": without["buckets"], "checks": []}}
    bare = time_to_serve.serve_table(df, alone)
    bare = bare[bare["workload"] == name] if not bare.empty else bare
    rows, best = [], {}
    for _, r in mine.iterrows():
        geometry = time_to_serve.GEOMETRY
        other = bare[(bare["backend"] == r["backend"]) & (bare[geometry] == r[geometry]).all(axis=1)] \
            if not bare.empty else bare
        off = other.iloc[0] if not other.empty else None
        on_s = r["served_s"] if r["complete"] else float("nan")
        off_s = off["served_s"] if off is not None and off["complete"] else float("nan")
        for key, value in (("with", on_s), ("without", off_s)):
            if pd.notna(value) and (key not in best or value < best[key][1]):
                best[key] = (r["backend"], value)
        rows.append([r["backend"], _long(on_s) if pd.notna(on_s) else "incomplete",
                     _long(off_s) if pd.notna(off_s) else "incomplete",
                     f"{100 * (1 - on_s / off_s):.1f}%" if pd.notna(on_s) and pd.notna(off_s) and off_s else "—"])
    wins = "; ".join(f"{key} the cache {best[key][0]} is fastest ({_long(best[key][1])})" for key in ("with", "without")
                     if key in best)
    err = (without.get("error") or {}).get("packed")
    err = f" (bucketing error {100 * err:+.1f}% packed)" if err is not None else ""
    return [Para(f"{said} Scheduled without it: {without['steps']:,} steps against {w.get('steps', 0):,}{err}, priced "
                 f"with the same buckets, each weighed by that schedule's steps; {wins}."),
            Table(["backend", "attention time with the cache", "without", "saved"], rows)]


def section(df: pd.DataFrame, run: RunInfo, report: Report) -> list[Block] | None:
    """None for a run without replayed traces; the heading is the section's own, the same for every run."""
    workloads = run.meta.workloads or {}
    table = time_to_serve.serve_table(df, workloads)
    if table.empty:
        return None
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
                     f"pairs and {100 * err.get('padded', 0):+.1f}% as padded ones (the bucketing's error)."
                     + _reuse(w))]
        rows = []
        for _, r in mine.iterrows():
            total = r["prefill_s"] + r["decode_s"]
            served = _long(r["served_s"]) if r["complete"] else \
                f"incomplete ({_long(total)} of what ran)" if total else "ran none"
            share = f"{100 * r['prefill_s'] / total:.0f}%" if total else "—"
            fast = [f"{r[f'fast_{p:g}']:.2f}" if pd.notna(r[f"fast_{p:g}"]) else "—" for p in time_to_serve.FAST_P]
            rows.append([r["backend"], f"{r['buckets_ok']} of {r['buckets']}", served, share,
                         f"{r['tokens_per_s']:,.0f}" if r["complete"] else "—", *fast])
        out.append(Table(["backend", "buckets run", "time to serve", "prefill share", "tokens / s of attention",
                          *[f"fast_{p:g}" for p in time_to_serve.FAST_P]], rows))
        out += cache_blocks(df, name, w, mine)
        complete = mine[mine["complete"]]
        if complete.empty:
            continue
        winner = complete.iloc[0]
        top = time_to_serve.dominant_buckets(df, workloads, winner["backend"], name)
        out.append(Para(f"fast_p: the share of {time_to_serve.BASELINE}'s time to serve spent in buckets where the "
                        f"backend is at least p× faster. The buckets that take most of {winner['backend']}'s time:",
                        "caption"))
        out.append(Table(["phase", "batch (rows: N×queries:keys)", "steps", "time a step", "share"],
                         [[b["phase"], b["lengths"].removeprefix("rows:"), f"{b['steps']:,}",
                           fmt_seconds(b["median_s"]), f"{100 * b['share']:.0f}%"] for _, b in top.iterrows()]))
    verdict = grid_vs_trace(df, run.meta)
    out.append(Para(f"Grid against trace ({verdict.verdict}): {verdict.numbers}"))
    return out
