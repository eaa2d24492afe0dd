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

import numpy as np
import pandas as pd

from bench.claims import TRACE_CLOSE, spec
from bench.meta import RunMeta
from bench.report.conditions import Condition, combine, condition, undecided_why
from bench.report.frames import attention_rows, dense_rows, geomean, ok_rows, trace_rows
from bench.report.interval import ROUNDS_DECIDE, drawn
from bench.report.traits import BASELINE
from bench.report.verdict import FAILS, NO_FACTS, NOT_MEASURED, Verdict, judged

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


def _at(frame: pd.DataFrame, geometry: dict) -> pd.DataFrame:
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
    grid = _at(grid[(grid["pass"] == "fwd") & grid["backend"].isin(backends)], geometry)
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


def served_draws(times: pd.DataFrame) -> dict[str, np.ndarray]:
    """Each backend's time to serve, drawn ROUNDS times (seeded): each bucket's time uniformly within its own CI
    (bench.report.interval.drawn; its median where none was recorded), times the bucket's steps, summed."""
    draws = drawn(times) * times["steps"].to_numpy(float)
    return {str(b): draws[:, (times["backend"] == b).to_numpy()].sum(axis=1) for b in times["backend"].unique()}


RULE = (f"per trace, the grid's winner's time to serve over the fastest other backend's (the runner-up's where the "
        f"grid's winner serves it fastest), 95% interval from each bucket's time drawn within its CI and weighted by "
        f"its steps; holds when the whole interval is ≤ {TRACE_CLOSE:g}×, does not hold when it is wholly above")


def grid_vs_trace(df: pd.DataFrame, run: RunMeta = NO_FACTS) -> Verdict:
    """The claim: the backend fastest on the synthetic grid is the one that serves the real trace fastest, judged per
    trace (workload × geometry): ratio = the grid's winner's time to serve / the fastest other backend's (below 1
    where it is the fastest), its 95% interval from each bucket's CI weighted by the bucket's steps, against
    TRACE_CLOSE; a grid winner that cannot serve every bucket does not hold. The claim's word is
    bench.report.conditions' rule over the traces."""
    claim = spec("trace").text
    table = serve_table(df, run.workloads)
    if table.empty:
        return Verdict(claim, NOT_MEASURED, f"no replayed trace in this run (`{spec('trace').command}`)")
    times = trace_times(df, run.workloads)
    said: list[str] = []
    found: list[Condition] = []
    detail: list[dict] = []
    unservable = False  # a grid winner that cannot run the trace's batches in its serving layout
    for (name, *geo), grp in table.groupby(["workload", *GEOMETRY], dropna=False):
        complete = grp[grp["complete"]]
        geometry = dict(zip(GEOMETRY, geo, strict=True))
        grid, shapes = grid_winner(df, geometry, set(grp["backend"]))
        where = f"{name} (Hq={geometry['n_heads']:.0f} Hkv={geometry['n_kv_heads']:.0f} {geometry['dtype']})"
        if complete.empty or grid is None:
            said.append(f"{where}: " + ("no backend ran every bucket" if complete.empty else "no grid case ran"))
            continue
        winner = complete.iloc[0]
        grid_row = grp[grp["backend"] == grid]
        if grid_row.empty or not bool(grid_row["complete"].iloc[0]):
            unservable = True
            found.append(Condition(where, math.inf, math.inf, math.inf, FAILS,
                                   why=f"the grid's winner {grid} cannot serve every bucket"))
            detail.append({"workload": name, **geometry, "grid": grid, "rival": winner["backend"],
                           **found[-1].as_dict()})
            among, _ = grid_winner(df, geometry, set(complete["backend"]))
            among_s = float(complete.loc[complete["backend"] == among, "served_s"].iloc[0]) if among else math.nan
            then = (f"{winner['backend']} wins both" if among == winner["backend"] else
                    f"the grid's winner {among} serves it in {_s(among_s)}, {among_s / winner['served_s']:.2f}× "
                    f"the trace's winner {winner['backend']} ({_s(winner['served_s'])})") if among else \
                f"{winner['backend']} serves it in {_s(winner['served_s'])}"
            said.append(f"{where}: the grid's winner {grid} cannot serve every bucket "
                        f"({int(grid_row['buckets_ok'].iloc[0]) if not grid_row.empty else 0} of "
                        f"{int(winner['buckets'])}); among the backends that can, {then}: {FAILS}")
            continue
        others = complete[complete["backend"] != grid]  # fastest first
        grid_s = float(grid_row["served_s"].iloc[0])
        if others.empty:
            said.append(f"{where}: only {grid} served every bucket, nothing to set it against")
            continue
        rival, rival_s = str(others["backend"].iloc[0]), float(others["served_s"].iloc[0])
        mine = _at(times[times["workload"] == name], geometry)
        draws = served_draws(mine[mine["backend"].isin(complete["backend"])])
        ratios = draws[grid] / np.min([draws[b] for b in others["backend"]], axis=0)
        low, high = (float(x) for x in np.percentile(ratios, [2.5, 97.5]))
        found.append(condition(where, grid_s / rival_s, (low, high), TRACE_CLOSE, holds_above=False))
        detail.append({"workload": name, **geometry, "grid": grid, "rival": rival, **found[-1].as_dict()})
        told = f"{grid_s / rival_s:.2f}×, 95% {low:.2f}–{high:.2f}×: {found[-1].verdict}"
        if grid == winner["backend"]:
            said.append(f"{where}: {grid} wins both (grid of {shapes} shapes; serves the trace in {_s(grid_s)}, the "
                        f"runner-up {rival} in {_s(rival_s)}: {told})")
        else:
            said.append(f"{where}: the grid's winner {grid} serves it in {_s(grid_s)}, {grid_s / rival_s:.2f}× the "
                        f"trace's winner {rival} ({_s(rival_s)}; 95% {low:.2f}–{high:.2f}×: {found[-1].verdict})")
    verdict = combine(found)
    why = undecided_why(found, TRACE_CLOSE, ROUNDS_DECIDE + " and tell whether the two are within 5%")
    failing = [c.name for c in found if c.verdict == FAILS]
    if failing:
        why = (f"{'; '.join(failing)}: " + ("the grid's winner cannot run the trace's ragged batches in the layout "
                                            "its users give it (the cases that did not run say why); "
                                            if unservable else "")
               + "the trace's batches (many short rows, chunked prefills over cached context, paged decode) are not "
               "the grid's one-sequence shapes" + (". " + why if why else ""))
    return Verdict(claim, verdict, f"{RULE}: " + "; ".join(said) + ".", why, tuple(detail),
                   judged_on=judged(", ".join(sorted(run.workloads or {})), ", ".join(sorted(set(table["backend"])))),
                   conditions=tuple(found))
