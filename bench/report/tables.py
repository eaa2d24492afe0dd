"""The report's answer tables from one run's frame: speedups over the baseline, the best backend per family, the
headline speedups per phase. Plain lists of dicts, so the document, `bench run`'s summary and the tests read
numbers."""

from __future__ import annotations

import math

import pandas as pd

from bench.analysis.frames import (
    FAMILY_KEYS,
    SHAPE_KEYS,
    attention_rows,
    dense_rows,
    geomean,
    ok_rows,
    shape_label,
)
from bench.analysis.traits import BASELINE
from bench.problem.case import family_label


def speedups_over(df: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """One row per ok case whose shape the baseline also ran: speedup = baseline time / backend time."""
    ok = ok_rows(df)
    base = ok[ok["backend"] == baseline][SHAPE_KEYS + ["median_s"]].rename(columns={"median_s": "base_s"})
    others = ok[ok["backend"] != baseline]
    merged = others.merge(base, on=SHAPE_KEYS, how="inner")
    merged["speedup"] = merged["base_s"] / merged["median_s"]
    return merged


def best_backends(df: pd.DataFrame) -> list[dict]:
    """Per shape family: the backend fastest at the most shapes (ties: the smaller geomean time vs the best).

    Dense attention-alone rows only. `speedup_vs_naive` is the best's geomean speedup over BASELINE (the key keeps
    its old name: `bench run`'s summary reads it)."""
    ok = attention_rows(ok_rows(dense_rows(df)))
    all_vs_base = dict(list(speedups_over(ok).groupby(FAMILY_KEYS, dropna=False)))  # once, not per family
    keys = [k for k in SHAPE_KEYS if k not in FAMILY_KEYS]
    out = []
    for family, fam in ok.groupby(FAMILY_KEYS, dropna=False):
        best_s = fam.groupby(keys, dropna=False)["median_s"].transform("min")
        rel = fam.assign(rel=fam["median_s"] / best_s)
        wins = rel[rel["rel"] == 1.0].groupby("backend").size()
        ranking = sorted(rel["backend"].unique(),
                         key=lambda b: (-int(wins.get(b, 0)), geomean(rel.loc[rel["backend"] == b, "rel"]) or math.inf))
        best = ranking[0]
        vs_base = all_vs_base.get(family, fam.iloc[:0].assign(speedup=[]))
        out.append({
            "family": family_label(*family), "best": best, "wins": int(wins.get(best, 0)),
            "shapes": int(fam.groupby(keys, dropna=False).ngroups),
            "runner_up": ranking[1] if len(ranking) > 1 else None,
            "speedup_vs_naive": geomean(vs_base.loc[vs_base["backend"] == best, "speedup"]),
        })
    return out


def headline_speedups(df: pd.DataFrame) -> list[dict]:
    """Per phase and backend: geometric-mean and largest speedup over BASELINE across the shapes both ran.

    Phases apart: a decode step's ~1x would drag a prefill headline down. Fastest first within a phase."""
    sp = speedups_over(dense_rows(df))
    out = []
    for (phase, backend), rows in sp.groupby(["phase", "backend"]):
        top = rows.loc[rows["speedup"].idxmax()]
        out.append({"phase": phase, "backend": backend, "geomean": geomean(rows["speedup"]),
                    "max": float(top["speedup"]), "at": shape_label(top), "shapes": len(rows)})
    return sorted(out, key=lambda r: (r["phase"] != "prefill", r["phase"], -r["geomean"]))
