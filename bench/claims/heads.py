"""Claim: at fixed d_model, more (smaller) heads cost about the same time.

Question `heads`: >= MIN_HEADS head counts at one d_model and one length, for the textbook backend and one fused
kernel (the cheapest such sweep of a native dtype). Judged per condition (backend × dtype × mask × pass, its head sweep
at the longest length it ran): the slowest head count's time over the fastest's against HEADS_TOLERANCE, its 95%
interval from those cases' own timings.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from bench.analysis.conditions import Condition, combine, condition, listing, undecided_why
from bench.analysis.verdict import INCONCLUSIVE, NOT_MEASURED, Verdict, judged, noisy_count, noisy_note, span
from bench.claims.question import Context, Question, main_dtypes, pair, plain
from bench.claims.spec import ClaimSpec
from bench.problem.case import Case
from bench.results.meta import RunMeta
from bench.results.record import LATER_SHAPE_KEYS

if TYPE_CHECKING:
    import pandas as pd


HEADS_TOLERANCE = 1.5  # heads are "free" when time across head counts stays within this factor
MIN_HEADS = 4  # head counts that make a sweep: fewer cannot tell a trend from two configurations

SPECS = (ClaimSpec("heads", "Heads are a free lunch: at fixed d_model, more heads cost about the same time",
                   "bench.claims.heads:heads_free_lunch", "heads",
                   {"profile": "heads", "backend": "naive,sdpa-flash"}, ratio="slowest / fastest head count",
                   figures=("heads_sweep",)),)
CLAIM, COMMAND = SPECS[0].text, SPECS[0].command


# -- the question ---------------------------------------------------------------------------------------------------
def picks(c: Case) -> bool:
    """A plain MHA forward prefill of the attention call alone."""
    s = c.shape
    return (plain(c) and c.phase == "prefill" and c.pass_ == "fwd" and s.scope == "attention"
            and s.n_kv_heads == s.n_heads)


def least(cases: list[Case], ctx: Context) -> list[Case]:
    """One d_model's head counts (>= MIN_HEADS of them) at one length, for the textbook and the fused backend."""
    groups: dict[tuple, list[Case]] = defaultdict(list)
    for c in cases:
        s = c.shape
        groups[(s.n_heads * s.head_dim, s.seq_q, s.batch, s.dtype, s.mask.label)].append(c)
    sweeps = {k: g for k, g in groups.items() if len({c.shape.n_heads for c in g}) >= MIN_HEADS}
    if not sweeps:
        return []
    dtypes = main_dtypes([c for g in sweeps.values() for c in g], ctx)
    native = {k: g for k, g in sweeps.items() if k[3] in dtypes} or sweeps
    key = min(native, key=lambda k: ctx.cost(native[k]))  # the cheapest sweep that answers
    chosen = pair(native[key], ctx, lambda c: c.shape.n_heads)
    return [c for c in native[key] if c.backend in chosen]


QUESTIONS = (Question("heads", picks, least, "the heads figure"),)


# -- the judge ------------------------------------------------------------------------------------------------------
def heads_free_lunch(df: pd.DataFrame, run: RunMeta | None = None) -> Verdict:
    """At fixed d_model, FLOPs do not depend on the head count; does the time not either? Judged per condition
    (backend × dtype × mask × pass, its head sweep at the longest length it ran): slowest / fastest head count
    against HEADS_TOLERANCE, its interval from those cases' own timings."""
    import pandas as pd

    from bench.analysis.frames import dense_rows, ok_rows

    ok = ok_rows(dense_rows(df))
    ok = ok[(ok["phase"] == "prefill") & (ok["variant"] == "mha")]
    keys = ["backend", "dtype", "mask", "pass", "batch", "d_model", "seq_kv", *LATER_SHAPE_KEYS]
    detail, used, short = [], [], []
    for key, grp in ok.groupby(keys, dropna=False):
        if grp["n_heads"].nunique() < 2:
            continue
        if grp["n_heads"].nunique() < MIN_HEADS:  # a sweep, not a few configurations that happen to share d_model
            short.append(grp)
            continue
        grp = grp.sort_values("n_heads")
        used.append(grp)
        detail.append({**dict(zip(keys, key, strict=True)), "heads": [int(h) for h in grp["n_heads"]],
                       "spread": float(grp["median_s"].max() / grp["median_s"].min()),
                       "most_vs_fewest": float(grp["median_s"].iloc[-1] / grp["median_s"].iloc[0])})
    if not detail and short:
        rows = pd.concat(short)
        return Verdict(CLAIM, INCONCLUSIVE, f"only {rows['n_heads'].nunique()} head counts at one d_model were "
                       f"measured (Hq {', '.join(str(int(h)) for h in sorted(rows['n_heads'].unique()))}); at least "
                       f"{MIN_HEADS} decide it (`{COMMAND}`)",
                       judged_on=judged(span(rows["n_heads"], "Hq"), span(rows["seq_kv"], "S"),
                                        ", ".join(sorted(rows["backend"].unique()))))
    if not detail:
        return Verdict(CLAIM, NOT_MEASURED, f"no heads sweep at fixed d_model (`{COMMAND}`)")
    spreads = pd.DataFrame(detail)
    median = float(spreads["spread"].median())
    worst = spreads.loc[spreads["spread"].idxmax()]
    per_backend = spreads.groupby("backend")["spread"].median().sort_values()
    heads = sorted({h for d in detail for h in d["heads"]})
    notes = (f"d_model {', '.join(str(int(d)) for d in sorted(spreads['d_model'].unique()))}, Hq {heads[0]}–"
             f"{heads[-1]}: FLOPs are equal at every head count by construction.")
    numbers = (f"d_model {', '.join(str(int(d)) for d in sorted(spreads['d_model'].unique()))}, "
               f"Hq {heads[0]}–{heads[-1]}: slowest/fastest head count {median:.2f}× (median of {len(detail)} "
               f"backend × length groups; free if ≤ {HEADS_TOLERANCE}×); per backend: "
               + ", ".join(f"{b} {v:.2f}×" for b, v in per_backend.items())
               + f"; worst {worst['backend']} at S={int(worst['seq_kv'])} {worst['spread']:.2f}×. "
               "FLOPs are equal at every head count by construction." + noisy_note(pd.concat(used)))
    rows = pd.concat(used)
    on = judged(span(rows["n_heads"], "Hq"), span(rows["d_model"], "d_model"), span(rows["seq_kv"], "S"),
                ", ".join(sorted(rows["dtype"].unique())), ", ".join(sorted(rows["backend"].unique())))
    found = [_condition(grp) for grp in _longest_per_unit(used)]
    numbers += f" Per backend × dtype at its longest S (free within {HEADS_TOLERANCE:g}×): {listing(found)}."
    verdict = combine(found)
    why = undecided_why(found)
    return Verdict(CLAIM, verdict, numbers, why, detail=tuple(detail), judged_on=on, conditions=tuple(found),
                   notes=notes, noisy=noisy_count(rows))


def _longest_per_unit(groups: list[pd.DataFrame]) -> list[pd.DataFrame]:
    """The condition's group of each backend × dtype × mask × pass: the head sweep at its longest length."""
    best: dict[tuple, pd.DataFrame] = {}
    for grp in groups:
        unit = tuple(grp[["backend", "dtype", "mask", "pass"]].iloc[0])
        if unit not in best or grp["seq_kv"].iloc[0] > best[unit]["seq_kv"].iloc[0]:
            best[unit] = grp
    return [best[u] for u in sorted(best)]


def _condition(grp: pd.DataFrame) -> Condition:
    """One head sweep judged: slowest / fastest head count, its 95% interval from each time drawn within its CI."""
    import numpy as np

    from bench.analysis.interval import drawn

    times = drawn(grp)
    spreads = times.max(axis=1) / times.min(axis=1)
    low, high = np.percentile(spreads, [2.5, 97.5])
    first = grp.iloc[0]
    key = {"backend": first["backend"], "dtype": first["dtype"], "mask": first["mask"], "pass": first["pass"],
           "seq": int(first["seq_kv"])}
    slowest, fastest = grp.loc[grp["median_s"].idxmax()], grp.loc[grp["median_s"].idxmin()]
    pairs = [(slowest["case_id"], fastest["case_id"])] if "case_id" in grp else []  # what blocks would re-measure
    return condition(key, float(grp["median_s"].max() / grp["median_s"].min()), (float(low), float(high)),
                     HEADS_TOLERANCE, holds_above=False, pairs=pairs,
                     facts={"slowest_heads": int(slowest["n_heads"]), "fastest_heads": int(fastest["n_heads"])})
