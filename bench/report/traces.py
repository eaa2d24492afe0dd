"""Replayed traces in one run's tidy frame -> plain data: each backend's time to serve a trace, its fast_p, the
buckets that dominate, and the claim that the synthetic grid's winner is the trace's.

A trace row is a serving batch with explicit rows (`lengths` rows:...), one bucket of a workload (bench.traces);
the run's `workloads` section gives each bucket's steps. Time to serve = sum over buckets of steps x median_s, for a
backend that ran every bucket ok (else it is incomplete, and named as such). fast_p against the baseline (the first
materialising backend, naive, which runs every batch): the share of the baseline's time to serve spent in buckets
where the backend is at least p times faster. The grid: the run's dense attention cases (one sequence, prefill and
decode) at the trace's heads, dtype and mask; its winner wins the most of its shapes (ties: the lowest
geometric-mean time over the fastest).
"""

from __future__ import annotations

import math

import pandas as pd

from bench.claims import TRACE_CLOSE, spec
from bench.meta import RunMeta
from bench.report.frames import attention_rows, dense_rows, geomean, ok_rows, trace_rows
from bench.report.traits import BASELINE
from bench.report.verdict import FAILS, HOLDS, INCONCLUSIVE, NO_FACTS, NOT_MEASURED, Verdict, judged

FAST_P = (1.0, 1.2, 2.0)
GEOMETRY = ["n_heads", "n_kv_heads", "head_dim", "dtype", "mask"]


def bucket_table(workload: dict) -> pd.DataFrame:
    """A workload's buckets: phase, lengths, steps (and the work models' totals)."""
    return pd.DataFrame(workload.get("buckets") or [], columns=["phase", "lengths", "steps", "rows", "q_tokens",
                                                                "kv_tokens", "packed", "padded"])


def trace_times(df: pd.DataFrame, workloads: dict | None) -> pd.DataFrame:
    """One row per (workload, geometry, backend, bucket) that ran ok: its median_s, steps and time = steps x median."""
    rows = ok_rows(df[trace_rows(df)]) if not df.empty else df
    out = []
    for name, w in (workloads or {}).items():
        buckets = bucket_table(w)
        if buckets.empty or rows.empty:
            continue
        merged = rows.merge(buckets[["phase", "lengths", "steps"]], on=["phase", "lengths"], how="inner")
        merged["workload"] = name
        merged["time_s"] = merged["steps"] * merged["median_s"]
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


def grid_winner(df: pd.DataFrame, geometry: dict, backends: set[str]) -> tuple[str | None, int]:
    """The backend (among `backends`) fastest on the run's grid at this geometry: (name, shapes) or (None, 0)."""
    grid = ok_rows(dense_rows(df))
    if grid.empty:
        return None, 0
    grid = attention_rows(grid)
    grid = grid[(grid["pass"] == "fwd") & grid["backend"].isin(backends)]
    for key, value in geometry.items():
        grid = grid[grid[key] == value]
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


def _s(seconds: float) -> str:
    return f"{seconds:,.0f} s" if seconds >= 100 else f"{seconds:.3g} s"


def grid_vs_trace(df: pd.DataFrame, run: RunMeta = NO_FACTS) -> Verdict:
    """The claim: the backend fastest on the synthetic grid is the one that serves the real trace fastest."""
    claim = spec("trace").text
    table = serve_table(df, run.workloads)
    if table.empty:
        return Verdict(claim, NOT_MEASURED, f"no replayed trace in this run (`{spec('trace').command}`)")
    found, verdicts = [], []
    unservable = False  # a grid winner that cannot run the trace's batches in its serving layout
    for (name, *geo), grp in table.groupby(["workload", *GEOMETRY], dropna=False):
        complete = grp[grp["complete"]]
        geometry = dict(zip(GEOMETRY, geo, strict=True))
        grid, shapes = grid_winner(df, geometry, set(grp["backend"]))
        where = f"{name} (Hq={geometry['n_heads']:.0f} Hkv={geometry['n_kv_heads']:.0f} {geometry['dtype']})"
        if complete.empty or grid is None:
            found.append(f"{where}: " + ("no backend ran every bucket" if complete.empty else "no grid case ran"))
            verdicts.append(NOT_MEASURED)
            continue
        winner = complete.iloc[0]
        grid_row = grp[grp["backend"] == grid]
        grid_s = float(grid_row["served_s"].iloc[0]) if not grid_row.empty else math.nan
        if grid == winner["backend"]:
            verdicts.append(HOLDS)
            found.append(f"{where}: {grid} wins both (grid of {shapes} shapes; serves the trace in "
                         f"{_s(winner['served_s'])})")
        elif math.isnan(grid_s):
            verdicts.append(FAILS)
            unservable = True
            among, _ = grid_winner(df, geometry, set(complete["backend"]))
            among_s = float(complete.loc[complete["backend"] == among, "served_s"].iloc[0]) if among else math.nan
            then = (f"{winner['backend']} wins both" if among == winner["backend"] else
                    f"the grid's winner {among} serves it in {_s(among_s)}, {among_s / winner['served_s']:.2f}× "
                    f"the trace's winner {winner['backend']} ({_s(winner['served_s'])})") if among else \
                f"{winner['backend']} serves it in {_s(winner['served_s'])}"
            found.append(f"{where}: the grid's winner {grid} cannot serve every bucket "
                         f"({int(grid_row['buckets_ok'].iloc[0]) if not grid_row.empty else 0} of "
                         f"{int(winner['buckets'])}); among the backends that can, {then}")
        else:
            ratio = grid_s / winner["served_s"]
            verdicts.append(INCONCLUSIVE if ratio < TRACE_CLOSE else FAILS)
            found.append(f"{where}: the grid's winner {grid} serves it in {_s(grid_s)}, {ratio:.2f}× the trace's "
                         f"winner {winner['backend']} ({_s(winner['served_s'])})")
    verdict = next((v for v in (FAILS, INCONCLUSIVE, HOLDS) if v in verdicts), NOT_MEASURED)
    why = "" if verdict == HOLDS else ("the winners are within 5% of each other: a rerun may swap them"
                                       if verdict == INCONCLUSIVE else
                                       ("the grid's winner cannot run the trace's ragged batches in the layout its "
                                        "users give it (the cases that did not run say why); " if unservable else "")
                                       + "the trace's batches (many short rows, chunked prefills over cached "
                                       "context, paged decode) are not the grid's one-sequence shapes")
    return Verdict(claim, verdict, "; ".join(found) + ".", why if verdict != NOT_MEASURED else "",
                   judged_on=judged(", ".join(sorted(run.workloads or {})), ", ".join(sorted(set(table["backend"])))))
