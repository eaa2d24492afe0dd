"""Replayed traces in one run's tidy frame -> plain data: each backend's time to serve a trace, its fast_p, the
buckets that dominate, the synthetic grid's winner and the buckets' check in time (what the trace claim,
bench.claims.trace, judges).

A trace row is a serving batch with explicit rows (`lengths` rows:...), one bucket of a workload (bench.traces);
the run's `workloads` section gives each bucket's steps. Time to serve = sum over buckets of steps x median_s, for a
backend that ran every bucket ok (else it is incomplete, and named as such). fast_p against the baseline (the first
materialising backend, naive, which runs every batch): the share of the baseline's time to serve spent in buckets
where the backend is at least p times faster. The grid: the run's dense attention cases (one sequence, prefill and
decode) at the trace's heads, dtype and mask; its winner wins the most of its shapes (ties: the lowest
geometric-mean time over the fastest).
The buckets' check in time: the replay's sampled real steps (bench.traces.sample; `checks` in the workload) ran as
their own cases. Per backend, each sampled step's measured time (its halves' exact batches) is set against what the
buckets predict for it (the time of the bucket each half falls in, as time to serve counts it): error = predicted /
measured - 1, its median and worst over the steps, and the total, each step weighted by the steps of its kind it
stands for (a step of a kind with K steps in the trace and n checked stands for K / n): the time to serve's error.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pandas as pd

from bench.analysis.frames import attention_rows, dense_rows, geomean, ok_rows, trace_rows
from bench.analysis.traits import BASELINE
from bench.traces.buckets import batch_work

FAST_P = (1.0, 1.2, 2.0)
GEOMETRY = ["n_heads", "n_kv_heads", "head_dim", "dtype", "mask"]


def bucket_table(workload: dict) -> pd.DataFrame:
    """A workload's buckets: phase, lengths, steps (and the work models' totals)."""
    return pd.DataFrame(workload.get("buckets") or [], columns=["phase", "lengths", "steps", "rows", "q_tokens",
                                                                "kv_tokens", "packed", "padded"])


def trace_times(df: pd.DataFrame, workloads: dict | None) -> pd.DataFrame:
    """One row per (workload, geometry, backend, bucket) that ran ok: its median_s, steps and time = steps x median;
    and the bucket's time scaled to its real steps' counted work under each work model (time_packed_s: median x the
    steps' packed work / the batch's; time_padded_s: the same, padded), NaN where the workload does not give the
    steps' work."""
    rows = ok_rows(df[trace_rows(df)]) if not df.empty else df
    out = []
    for name, w in (workloads or {}).items():
        buckets = bucket_table(w)
        if buckets.empty or rows.empty:
            continue
        buckets = buckets.rename(columns={"packed": "steps_packed", "padded": "steps_padded"})
        merged = rows.merge(buckets[["phase", "lengths", "steps", "steps_packed", "steps_padded"]],
                            on=["phase", "lengths"], how="inner")
        merged["workload"] = name
        merged["time_s"] = merged["steps"] * merged["median_s"]
        work = np.array([batch_work(lengths) for lengths in merged["lengths"]], dtype=float).reshape(-1, 2)
        for i, model in enumerate(("packed", "padded")):
            steps_work = pd.to_numeric(merged.pop(f"steps_{model}"), errors="coerce").to_numpy(float)
            merged[f"time_{model}_s"] = merged["median_s"].to_numpy(float) * steps_work / work[:, i]
        out.append(merged)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def serve_table(df: pd.DataFrame, workloads: dict | None) -> pd.DataFrame:
    """Per workload, geometry and backend: time to serve (prefill, decode), buckets run of all, tokens per second of
    attention, and fast_p against the baseline; sorted fastest first (incomplete backends last)."""
    times = trace_times(df, workloads)
    if times.empty:
        return pd.DataFrame()
    out = []
    for (name, *geo), grp in times.groupby(["workload", *GEOMETRY], dropna=False):
        w = workloads[name]
        total = len(bucket_table(w))
        tokens = (w.get("prompt_tokens") or 0) + (w.get("output_tokens") or 0)
        base = grp[grp["backend"] == BASELINE].set_index(["phase", "lengths"])
        for backend, mine in grp.groupby("backend"):
            served = float(mine["time_s"].sum())
            complete = len(mine) == total
            row = {"workload": name, **dict(zip(GEOMETRY, geo, strict=True)), "backend": backend,
                   "buckets_ok": len(mine), "buckets": total, "complete": complete,
                   "served_s": served if complete else math.nan,
                   "prefill_s": float(mine.loc[mine["phase"] == "prefill", "time_s"].sum()),
                   "decode_s": float(mine.loc[mine["phase"] == "decode", "time_s"].sum()),
                   "tokens_per_s": tokens / served if complete and served else math.nan}
            row |= fast_p(mine.set_index(["phase", "lengths"]), base)
            out.append(row)
    ran = {(r["workload"], *(r[k] for k in GEOMETRY), r["backend"]) for r in out}
    for name, w in (workloads or {}).items():  # a backend that ran no bucket of a trace ok is listed too
        tried = df[trace_rows(df)].merge(bucket_table(w)[["phase", "lengths"]], on=["phase", "lengths"])
        for (*geo, backend), _ in tried.groupby([*GEOMETRY, "backend"], dropna=False):
            if (name, *geo, backend) not in ran and (name, *geo) in {key[:-1] for key in ran}:
                out.append({"workload": name, **dict(zip(GEOMETRY, geo, strict=True)), "backend": backend,
                            "buckets_ok": 0, "buckets": len(bucket_table(w)), "complete": False,
                            "served_s": math.nan, "prefill_s": 0.0, "decode_s": 0.0, "tokens_per_s": math.nan,
                            **{f"fast_{p:g}": 0.0 for p in FAST_P}})
    table = pd.DataFrame(out)
    return table.sort_values(["workload", "complete", "served_s"], ascending=[True, False, True],
                             ignore_index=True)


def fast_p(mine: pd.DataFrame, base: pd.DataFrame) -> dict[str, float]:
    """fast_<p>: the share of the baseline's time to serve in buckets where `mine` is at least p x faster (a bucket
    it did not run counts as not faster)."""
    if base.empty:
        return {f"fast_{p:g}": math.nan for p in FAST_P}
    weight = base["time_s"]
    speedup = (base["median_s"] / mine["median_s"].reindex(base.index)).fillna(0.0)
    return {f"fast_{p:g}": float(weight[speedup >= p].sum() / weight.sum()) for p in FAST_P}


def dominant_buckets(df: pd.DataFrame, workloads: dict | None, backend: str, name: str, top: int = 5
                     ) -> pd.DataFrame:
    """The buckets that take most of `backend`'s time to serve workload `name`: phase, lengths, steps, median_s and
    share."""
    times = trace_times(df, {name: workloads[name]} if workloads and name in workloads else None)
    mine = times[times["backend"] == backend] if not times.empty else times
    if mine.empty:
        return mine
    mine = mine.assign(share=mine["time_s"] / mine["time_s"].sum())
    return mine.sort_values("share", ascending=False).head(top)[["phase", "lengths", "steps", "median_s", "share"]]


def at_geometry(frame: pd.DataFrame, geometry: dict) -> pd.DataFrame:
    """The rows of one geometry."""
    for key, value in geometry.items():
        frame = frame[frame[key] == value]
    return frame


def grid_winner(df: pd.DataFrame, geometry: dict, backends: set[str]) -> tuple[str | None, int]:
    """The backend (among `backends`) fastest on the run's grid at this geometry: (name, shapes) or (None, 0)."""
    grid = ok_rows(dense_rows(df))
    if grid.empty:
        return None, 0
    grid = attention_rows(grid)
    grid = at_geometry(grid[(grid["pass"] == "fwd") & grid["backend"].isin(backends)], geometry)
    if grid.empty:
        return None, 0
    shape = ["phase", "batch", "seq_q", "seq_kv"]
    best = grid.groupby(shape)["median_s"].transform("min")
    grid = grid.assign(over=grid["median_s"] / best)
    wins = grid[grid["over"] == 1.0].groupby("backend").size()
    shapes = grid.groupby(shape).ngroups
    score = pd.DataFrame({"wins": wins, "gm": grid.groupby("backend")["over"].apply(geomean)}).fillna({"wins": 0})
    score = score.sort_values(["wins", "gm"], ascending=[False, True])
    return str(score.index[0]), shapes


CHECK_COLUMNS = ["workload", *GEOMETRY, "backend", "index", "kind", "measured_s", "predicted_s", "error",
                 "predicted_packed_s", "predicted_padded_s"]


def step_checks(df: pd.DataFrame, workloads: dict | None) -> pd.DataFrame:
    """One row per (workload, geometry, backend, sampled step) whose halves and their buckets all ran ok: the step's
    measured_s (its halves' exact times), predicted_s (its halves' buckets' times), error = predicted / measured - 1;
    and predicted_packed_s, predicted_padded_s: each half's bucket's time scaled by the half's counted work over the
    bucket's batch's, under each work model (what trace_times' time_packed_s and time_padded_s sum over every step)."""
    rows = ok_rows(df[trace_rows(df)]) if not df.empty else df
    out: list[dict] = []
    if rows.empty:
        return pd.DataFrame(out, columns=CHECK_COLUMNS)
    keys = [*GEOMETRY, "backend"]
    time = dict(zip(rows[[*keys, "phase", "lengths"]].itertuples(index=False, name=None), rows["median_s"],
                    strict=True))
    for name, w in (workloads or {}).items():
        for key in dict.fromkeys(rows[keys].itertuples(index=False, name=None)):
            for c in w.get("checks") or ():
                halves = [(phase, c[phase], c[f"{phase}_bucket"]) for phase in ("prefill", "decode") if c[phase]]
                measured = [time.get((*key, phase, exact)) for phase, exact, _ in halves]
                predicted = [time.get((*key, phase, bucket)) for phase, _, bucket in halves]
                if None in measured or None in predicted:
                    continue  # a half, or its bucket, did not run ok here
                scaled = [(t * np.array(batch_work(exact), float) / np.array(batch_work(bucket), float))
                          for t, (_, exact, bucket) in zip(predicted, halves, strict=True)]
                out.append({"workload": name, **dict(zip(keys, key, strict=True)), "index": c["index"],
                            "kind": c["kind"], "measured_s": sum(measured), "predicted_s": sum(predicted),
                            "error": sum(predicted) / sum(measured) - 1,
                            "predicted_packed_s": float(sum(x[0] for x in scaled)),
                            "predicted_padded_s": float(sum(x[1] for x in scaled))})
    return pd.DataFrame(out, columns=CHECK_COLUMNS)


def check_table(df: pd.DataFrame, workloads: dict | None) -> pd.DataFrame:
    """Per workload, geometry and backend: steps checked of those sampled, the median and the worst (largest in size)
    relative error, and the total, weighted by the steps each checked step stands for (the module docstring)."""
    checks = step_checks(df, workloads)
    out = []
    for (name, *geo, backend), grp in checks.groupby(["workload", *GEOMETRY, "backend"], dropna=False):
        kinds, n = workloads[name].get("kinds") or {}, Counter(grp["kind"])
        weight = grp["kind"].map({k: kinds.get(k, n[k]) / n[k] for k in n})
        worst = grp["error"].iloc[int(np.argmax(grp["error"].abs().to_numpy()))]
        out.append({"workload": name, **dict(zip(GEOMETRY, geo, strict=True)), "backend": backend,
                    "steps": len(grp), "sampled": len(workloads[name].get("checks") or ()),
                    "median": float(grp["error"].median()), "worst": float(worst),
                    "total": float((weight * grp["predicted_s"]).sum() / (weight * grp["measured_s"]).sum() - 1)})
    return pd.DataFrame(out, columns=["workload", *GEOMETRY, "backend", "steps", "sampled", "median", "worst",
                                      "total"])
