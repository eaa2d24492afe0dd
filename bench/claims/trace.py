"""Claim: the backend fastest on the synthetic grid serves real traffic (a replayed trace) fastest.

Question `trace`: every bucket of the replayed traces, with the grid's plain causal forward cases of the same
backends and head geometry (the grid's winner is judged against the trace's). The judge: per trace, the grid winner's
time to serve over the fastest other backend's, against TRACE_CLOSE, from bench.analysis.time_to_serve's times to
serve, grid winner and buckets' check in time (read lazily, in the judge).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from bench.analysis.conditions import MORE_ROUNDS, Condition, combine, condition, decide_by, undecided_why
from bench.analysis.sampled_steps import FIT_STEPS
from bench.analysis.verdict import FAILS, INCONCLUSIVE, NO_FACTS, NOT_MEASURED, Verdict, judged
from bench.claims.question import Context, Question, plain
from bench.claims.spec import ClaimSpec
from bench.problem.case import Case
from bench.results.meta import RunMeta

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


TRACE_CLOSE = 1.05  # two backends within 5% on a trace: it cannot tell them apart

SPECS = (ClaimSpec("trace", "The backend fastest on the synthetic grid serves real traffic (a replayed trace) fastest",
                   "bench.claims.trace:grid_vs_trace", "trace",
                   {"backend": "naive,sdpa-flash", "kv-heads": "2", "workload": "azure-conv", "buckets": "4"},
                   ratio="grid's winner / fastest other, time to serve", figures=("trace_serving",)),)
CLAIM, COMMAND = SPECS[0].text, SPECS[0].command


def _is_trace(c: Case) -> bool:
    return c.shape.serving is not None and c.shape.serving.rows is not None


def picks(c: Case) -> bool:
    """A replayed trace's bucket, or a plain causal forward case of the synthetic grid it is compared with."""
    return _is_trace(c) or (plain(c) and c.pass_ == "fwd" and c.shape.mask.label == "causal"
                            and c.shape.scope == "attention" and c.shape.mla is None)


def least(cases: list[Case], ctx: Context) -> list[Case]:
    """Every bucket of the traces, with the grid's cases of the same backends and head geometry (the grid's winner
    is judged against the trace's)."""
    trace = [c for c in cases if _is_trace(c)]

    def geometry(c: Case) -> tuple:
        return (c.shape.n_heads, c.shape.n_kv_heads, c.shape.head_dim, c.shape.dtype)

    geometries, backends = {geometry(c) for c in trace}, {c.backend for c in trace}
    grid = [c for c in cases if not _is_trace(c) and geometry(c) in geometries and c.backend in backends]
    return trace + grid if trace and grid else []


QUESTIONS = (Question("trace", picks, least),)


# -- the judge ------------------------------------------------------------------------------------------------------
RULE = (f"per trace, the grid's winner's time to serve over the fastest other backend's (the runner-up's where the "
        f"grid's winner serves it fastest), each estimated from the buckets and the sampled real steps timed exactly "
        f"(with {FIT_STEPS} steps or more, each backend's steps fitted to their buckets' times scaled by their own "
        f"packed and padded work, the fit summed over every step plus the sample's residuals; else the buckets plus, "
        f"per kind of step, its steps times the sample's mean error); 95% interval from each bucket's time drawn "
        f"within its CI and weighted by its steps, and the sample resampled within each kind (without a sample for "
        f"every backend: widened by how differently the buckets predict them instead); holds when the whole interval "
        f"is ≤ {TRACE_CLOSE:g}×, does not hold when it is wholly above")


def grid_vs_trace(df: pd.DataFrame, run: RunMeta | None = None) -> Verdict:
    """The claim: the backend fastest on the synthetic grid is the one that serves the real trace fastest, judged per
    trace (workload × geometry): ratio = the grid's winner's time to serve / the fastest other backend's (below 1
    where it is the fastest), each time estimated from the buckets and the sampled real steps
    (bench.analysis.sampled_steps: a regression on the steps' counted work, or the difference estimator), its 95%
    interval from each bucket's CI weighted by the bucket's steps and the sample resampled; without a sample
    for every backend (results written before), the buckets' times, the interval widened by the buckets' checked
    error in time instead (widened_ratios). Against TRACE_CLOSE; a grid winner that cannot serve every bucket does
    not hold. The claim's word is bench.analysis.conditions' rule over the traces."""
    from bench.analysis.sampled_steps import estimated, work_totals
    from bench.analysis.time_to_serve import (
        GEOMETRY,
        at_geometry,
        check_table,
        grid_winner,
        serve_table,
        step_checks,
        trace_times,
    )

    run = NO_FACTS if run is None else run
    table = serve_table(df, run.workloads)
    if table.empty:
        return Verdict(CLAIM, NOT_MEASURED, f"no replayed trace in this run (`{COMMAND}`)")
    times = trace_times(df, run.workloads)
    checks, steps = check_table(df, run.workloads), step_checks(df, run.workloads)
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
        key = {"workload": name, "n_heads": int(geometry["n_heads"]), "n_kv_heads": int(geometry["n_kv_heads"]),
               "dtype": geometry["dtype"]}
        if complete.empty or grid is None:
            said.append(f"{where}: " + ("no backend ran every bucket" if complete.empty else "no grid case ran"))
            continue
        winner = complete.iloc[0]
        grid_row = grp[grp["backend"] == grid]
        if grid_row.empty or not bool(grid_row["complete"].iloc[0]):
            unservable = True
            found.append(Condition(key, math.inf, math.inf, math.inf, FAILS, TRACE_CLOSE, False,
                                   why=f"the grid's winner {grid} cannot serve every bucket",
                                   facts={"grid_winner": grid, "trace_winner": winner["backend"]}))
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
        if len(complete) < 2:
            said.append(f"{where}: only {grid} served every bucket, nothing to set it against")
            continue
        mine = at_geometry(times[times["workload"] == name], geometry)
        draws = served_draws(mine[mine["backend"].isin(complete["backend"])])
        checked = at_geometry(checks[checks["workload"] == name], geometry)
        errors = dict(zip(checked["backend"], checked["total"], strict=True))
        buckets = dict(zip(complete["backend"].astype(str), complete["served_s"].astype(float), strict=True))
        sample = at_geometry(steps[steps["workload"] == name], geometry)
        fixed = estimated(buckets, draws, sample, run.workloads[name].get("kinds") or {}, work_totals(mine))
        served, estimator = buckets, None
        if fixed is not None:  # the sampled real steps take the buckets' error out of each backend's time
            served, draws, estimator = fixed
        rival = min((b for b in served if b != grid), key=served.__getitem__)
        grid_s, rival_s = served[grid], served[rival]
        factors = {b: 1.0 for b in served if b != grid} if fixed else pair_factors(errors, grid, [
            b for b in served if b != grid])
        low, high = widened_ratios(draws, grid, factors)
        # at its bound (within the band of 5% slower than the best) the grid's winner serves about as fast: holds
        found.append(condition(key, grid_s / rival_s, (low, high), TRACE_CLOSE, holds_above=False,
                               facts={"grid_winner": grid, "against": rival, "grid_served_s": grid_s,
                                      "against_served_s": rival_s, "corrected": fixed is not None,
                                      "estimator": estimator}))
        detail.append({"workload": name, **geometry, "grid": grid, "rival": rival, "check_errors": errors,
                       "corrected": fixed is not None, "estimator": estimator, **found[-1].as_dict()})
        worst = max(factors, key=lambda b: factors[b])
        if found[-1].verdict == INCONCLUSIVE and factors[worst] > 1:
            off.append(f"{where}: its interval is widened by the buckets' error on real steps (they predict {grid} "
                       f"against {worst} off by {factors[worst]:.2f}×)")
        told = (f"95% {low:.2f}–{high:.2f}×{f' ({estimator})' if estimator else ''}: {found[-1].verdict}"
                + (f"; the buckets alone say {grid} {_s(buckets[grid])}, {rival} {_s(buckets[rival])}" if fixed else "")
                + _checked(checked, list(complete["backend"]), len(run.workloads[name].get("checks") or ())))
        if grid_s <= rival_s:
            said.append(f"{where}: {grid} wins both (grid of {shapes} shapes; serves the trace in {_s(grid_s)}, the "
                        f"runner-up {rival} in {_s(rival_s)}: {grid_s / rival_s:.2f}×, {told})")
        else:
            said.append(f"{where}: the grid's winner {grid} serves it in {_s(grid_s)}, {grid_s / rival_s:.2f}× the "
                        f"trace's winner {rival} ({_s(rival_s)}; {told})")
    verdict = combine(found)
    why = undecided_why(found, decide_by(MORE_ROUNDS) + " and tell whether the two are within 5%")
    if off:
        why += (" " if why else "") + "; ".join(off) + "; more buckets (--buckets) bring them nearer their steps."
    failing = [_where(c) for c in found if c.verdict == FAILS]
    if failing:
        why = (f"{'; '.join(failing)}: " + ("the grid's winner cannot run the trace's ragged batches in the layout "
                                            "its users give it (the cases that did not run say why); "
                                            if unservable else "")
               + "the trace's batches (many short rows, chunked prefills over cached context, paged decode) are not "
               "the grid's one-sequence shapes" + (". " + why if why else ""))
    return Verdict(CLAIM, verdict, f"{RULE}: " + "; ".join(said) + ".", why, tuple(detail),
                   judged_on=judged(", ".join(sorted(run.workloads or {})), ", ".join(sorted(set(table["backend"])))),
                   conditions=tuple(found))


def _where(c: Condition) -> str:
    """'azure-conv (Hq=8 Hkv=2 fp32)': a trace condition as the numbers name it."""
    f = c.fields
    return f"{f['workload']} (Hq={f['n_heads']} Hkv={f['n_kv_heads']} {f['dtype']})"


def served_draws(times: pd.DataFrame) -> dict[str, np.ndarray]:
    """Each backend's time to serve, drawn ROUNDS times (seeded): each bucket's time uniformly within its own CI
    (bench.analysis.interval.drawn; its median where none was recorded), times the bucket's steps, summed."""
    from bench.analysis.interval import drawn

    draws = drawn(times) * times["steps"].to_numpy(float)
    return {str(b): draws[:, (times["backend"] == b).to_numpy()].sum(axis=1) for b in times["backend"].unique()}


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
    import numpy as np

    with np.errstate(divide="ignore", invalid="ignore"):
        low = draws[grid] / np.min([draws[b] * f for b, f in factors.items()], axis=0)
        high = draws[grid] / np.min([draws[b] / f for b, f in factors.items()], axis=0)
    return float(np.percentile(low, 2.5)), float(np.percentile(high, 97.5))


def _s(seconds: float) -> str:
    return f"{seconds:,.0f} s" if seconds >= 100 else f"{seconds:.3g} s"


def _checked(checks: pd.DataFrame, backends: list[str], sampled: int) -> str:
    """'; the buckets' prediction of 32 sampled real steps against their own times: naive: median -3%, worst -12%,
    total -4%; flex: not checked' ("" without a sample)."""
    if not sampled:
        return ""
    mine = checks.set_index("backend")
    said = [f"{b}: median {100 * mine.loc[b, 'median']:+.0f}%, worst {100 * mine.loc[b, 'worst']:+.0f}%, total "
            f"{100 * mine.loc[b, 'total']:+.0f}%" + ("" if mine.loc[b, "steps"] == sampled else
                                                     f" ({mine.loc[b, 'steps']} steps ran)")
            if b in mine.index else f"{b}: not checked" for b in backends]
    return f"; the buckets' prediction of {sampled} sampled real steps against their own times: " + "; ".join(said)
