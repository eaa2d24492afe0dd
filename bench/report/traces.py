"""Replayed traces in one run's tidy frame -> plain data: each backend's time to serve a trace, its fast_p, the
buckets that dominate, and the claim that the synthetic grid's winner is the trace's.

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

from bench.claims import TRACE_CLOSE, spec
from bench.report.conditions import Condition, combine, condition, undecided_why
from bench.report.frames import attention_rows, dense_rows, geomean, ok_rows, trace_rows
from bench.report.interval import ROUNDS_DECIDE, drawn
from bench.report.traits import BASELINE
from bench.report.verdict import FAILS, INCONCLUSIVE, NO_FACTS, NOT_MEASURED, Verdict, judged
from bench.results.meta import RunMeta

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


CHECK_COLUMNS = ["workload", *GEOMETRY, "backend", "index", "kind", "measured_s", "predicted_s", "error"]


def step_checks(df: pd.DataFrame, workloads: dict | None) -> pd.DataFrame:
    """One row per (workload, geometry, backend, sampled step) whose halves and their buckets all ran ok: the step's
    measured_s (its halves' exact times), predicted_s (its halves' buckets' times), error = predicted / measured - 1."""
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
                out.append({"workload": name, **dict(zip(keys, key, strict=True)), "index": c["index"],
                            "kind": c["kind"], "measured_s": sum(measured), "predicted_s": sum(predicted),
                            "error": sum(predicted) / sum(measured) - 1})
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


def _checked(checks: pd.DataFrame, backends: list[str], sampled: int) -> str:
    """'; the buckets' prediction of 12 sampled real steps against their own times: naive: median -3%, worst -12%,
    total -4%; flex: not checked' ("" without a sample)."""
    if not sampled:
        return ""
    mine = checks.set_index("backend")
    said = [f"{b}: median {100 * mine.loc[b, 'median']:+.0f}%, worst {100 * mine.loc[b, 'worst']:+.0f}%, total "
            f"{100 * mine.loc[b, 'total']:+.0f}%" + ("" if mine.loc[b, "steps"] == sampled else
                                                     f" ({mine.loc[b, 'steps']} steps ran)")
            if b in mine.index else f"{b}: not checked" for b in backends]
    return f"; the buckets' prediction of {sampled} sampled real steps against their own times: " + "; ".join(said)


def pair_factors(errors: dict[str, float], grid: str, others: list[str]) -> dict[str, float]:
    """Per other backend, how far the buckets' prediction of grid / other is off on the checked steps, as a factor >= 1
    either way: f = (1 + e_grid) / (1 + e_other) or its inverse, e each backend's checked total error (check_table);
    1 where either side is unchecked, inf where an error reaches -100%."""
    out = {}
    for b in others:
        if grid not in errors or b not in errors:
            out[b] = 1.0
            continue
        f = (1 + errors[grid]) / (1 + errors[b]) if errors[b] > -1 else math.inf
        out[b] = max(f, 1 / f) if 0 < f < math.inf else math.inf
    return out


def widened_ratios(draws: dict[str, np.ndarray], grid: str, factors: dict[str, float]) -> tuple[float, float]:
    """95% interval of the grid's winner's time to serve over the fastest other's (the others: `factors`' keys),
    widened by the buckets' checked error in time: each other backend's drawn time is taken `factors[b]` times for the
    low end and 1 / `factors[b]` times for the high end (pair_factors). Widened by the pair's error and not by each
    backend's own: a step lighter than its bucket's batch is over-predicted for every backend alike, which leaves the
    ratio where it was, and a dozen steps against buckets that span an octave estimate each backend's own error far
    more loosely than the pair's."""
    with np.errstate(divide="ignore", invalid="ignore"):
        low = draws[grid] / np.min([draws[b] * f for b, f in factors.items()], axis=0)
        high = draws[grid] / np.min([draws[b] / f for b, f in factors.items()], axis=0)
    return float(np.percentile(low, 2.5)), float(np.percentile(high, 97.5))


def _s(seconds: float) -> str:
    return f"{seconds:,.0f} s" if seconds >= 100 else f"{seconds:.3g} s"


def served_draws(times: pd.DataFrame) -> dict[str, np.ndarray]:
    """Each backend's time to serve, drawn ROUNDS times (seeded): each bucket's time uniformly within its own CI
    (bench.report.interval.drawn; its median where none was recorded), times the bucket's steps, summed."""
    draws = drawn(times) * times["steps"].to_numpy(float)
    return {str(b): draws[:, (times["backend"] == b).to_numpy()].sum(axis=1) for b in times["backend"].unique()}


RULE = (f"per trace, the grid's winner's time to serve over the fastest other backend's (the runner-up's where the "
        f"grid's winner serves it fastest), 95% interval from each bucket's time drawn within its CI and weighted by "
        f"its steps and widened by how differently the buckets predict the two backends' times on real steps timed "
        f"exactly; holds when the whole "
        f"interval is ≤ {TRACE_CLOSE:g}×, does not hold when it is wholly above")


def grid_vs_trace(df: pd.DataFrame, run: RunMeta = NO_FACTS) -> Verdict:
    """The claim: the backend fastest on the synthetic grid is the one that serves the real trace fastest, judged per
    trace (workload × geometry): ratio = the grid's winner's time to serve / the fastest other backend's (below 1
    where it is the fastest), its 95% interval from each bucket's CI weighted by the bucket's steps and widened by
    the buckets' checked error in time, the grid's winner's against each other backend's (widened_ratios: a bucket
    estimate that is off for one backend leaves the condition inconclusive rather than wrongly decided), against
    TRACE_CLOSE; a grid winner that cannot serve every bucket does not hold. The claim's word is
    bench.report.conditions' rule over the traces."""
    claim = spec("trace").text
    table = serve_table(df, run.workloads)
    if table.empty:
        return Verdict(claim, NOT_MEASURED, f"no replayed trace in this run (`{spec('trace').command}`)")
    times = trace_times(df, run.workloads)
    checks = check_table(df, run.workloads)
    said: list[str] = []
    off: list[str] = []  # undecided traces whose interval the buckets' error in time widened
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
        checked = _at(checks[checks["workload"] == name], geometry)
        errors = dict(zip(checked["backend"], checked["total"], strict=True))
        factors = pair_factors(errors, grid, list(others["backend"]))
        low, high = widened_ratios(draws, grid, factors)
        found.append(condition(where, grid_s / rival_s, (low, high), TRACE_CLOSE, holds_above=False))
        detail.append({"workload": name, **geometry, "grid": grid, "rival": rival, "check_errors": errors,
                       **found[-1].as_dict()})
        worst = max(factors, key=lambda b: factors[b])
        if found[-1].verdict == INCONCLUSIVE and factors[worst] > 1:
            off.append(f"{where}: its interval is widened by the buckets' error on real steps (they predict {grid} "
                       f"against {worst} off by {factors[worst]:.2f}×)")
        told = f"95% {low:.2f}–{high:.2f}×: {found[-1].verdict}" + \
            _checked(checked, list(complete["backend"]), len(run.workloads[name].get("checks") or ()))
        if grid == winner["backend"]:
            said.append(f"{where}: {grid} wins both (grid of {shapes} shapes; serves the trace in {_s(grid_s)}, the "
                        f"runner-up {rival} in {_s(rival_s)}: {grid_s / rival_s:.2f}×, {told})")
        else:
            said.append(f"{where}: the grid's winner {grid} serves it in {_s(grid_s)}, {grid_s / rival_s:.2f}× the "
                        f"trace's winner {rival} ({_s(rival_s)}; {told})")
    verdict = combine(found)
    why = undecided_why(found, TRACE_CLOSE, ROUNDS_DECIDE + " and tell whether the two are within 5%")
    if off:
        why += (" " if why else "") + "; ".join(off) + "; more buckets (--buckets) bring them nearer their steps."
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
