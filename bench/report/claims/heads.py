"""Claim: at fixed d_model, more (smaller) heads cost about the same time."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.claims import HEADS_TOLERANCE, MIN_HEADS, spec
from bench.report.conditions import Condition, combine, condition, listing, undecided_why
from bench.report.frames import dense_rows, ok_rows
from bench.report.interval import ROUNDS_DECIDE, drawn
from bench.report.verdict import (
    INCONCLUSIVE,
    NO_FACTS,
    NOT_MEASURED,
    Verdict,
    judged,
    noisy_note,
    span,
)
from bench.results.meta import RunMeta
from bench.results.record import LATER_SHAPE_KEYS

CLAIM, COMMAND = spec("heads").text, spec("heads").command


def heads_free_lunch(df: pd.DataFrame, run: RunMeta = NO_FACTS) -> Verdict:
    """At fixed d_model, FLOPs do not depend on the head count; does the time not either? Judged per condition
    (backend × dtype × mask × pass, its head sweep at the longest length it ran): slowest / fastest head count
    against HEADS_TOLERANCE, its interval from those cases' own timings."""
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
    why = undecided_why(found, HEADS_TOLERANCE, ROUNDS_DECIDE)
    return Verdict(CLAIM, verdict, numbers, why, detail=tuple(detail), judged_on=on, conditions=tuple(found))


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
    times = drawn(grp)
    spreads = times.max(axis=1) / times.min(axis=1)
    low, high = np.percentile(spreads, [2.5, 97.5])
    first = grp.iloc[0]
    name = f"{first['backend']} · {first['dtype']} · {first['mask']} · {first['pass']} at S {int(first['seq_kv']):,}"
    slowest, fastest = grp.loc[grp["median_s"].idxmax()], grp.loc[grp["median_s"].idxmin()]
    pairs = [(slowest["case_id"], fastest["case_id"])] if "case_id" in grp else []  # what blocks would re-measure
    return condition(name, float(grp["median_s"].max() / grp["median_s"].min()), (float(low), float(high)),
                     HEADS_TOLERANCE, holds_above=False, pairs=pairs)
