"""Claim: torch SDPA's automatic kernel choice is within 10% of the fastest kernel it could have been forced to.

Per shape family (phase, variant, dtype, mask, pass), over the shapes where the automatic backend and at least one
of the kernels it chooses among (the registry's `chooses` trait) ran ok: the ratio automatic time / fastest forced
time, its geometric mean over the family's shapes, and an interval from each case's own confidence interval (the
automatic case's low over the forced case's high, and its high over the forced low). A family holds when the whole
interval is within WITHIN, fails when the whole interval is beyond it, and is inconclusive when it straddles it:
more rounds would decide, and the verdict says so rather than tossing a coin.
"""

from __future__ import annotations

import math

import pandas as pd

from bench.meta import RunMeta
from bench.report.frames import FAMILY_KEYS, SHAPE_KEYS, attention_rows, dense_rows, family_label, geomean, ok_rows
from bench.report.traits import AUTOMATIC
from bench.report.verdict import FAILS, HOLDS, INCONCLUSIVE, NO_FACTS, NOT_MEASURED, Verdict, judged, span

CLAIM = "torch's automatic SDPA choice is within 10% of the fastest forced kernel"
WITHIN = 1.10


def losses(df: pd.DataFrame) -> list[dict]:
    """Per automatic backend and shape family: the geomean ratio to the fastest forced kernel, its interval, the
    kernel that was fastest most often, the worst shape's ratio, and the shapes compared."""
    ok = attention_rows(ok_rows(dense_rows(df)))
    keys = [k for k in SHAPE_KEYS if k != "backend"]
    out = []
    for auto, forced in AUTOMATIC.items():
        mine = ok[ok["backend"] == auto]
        theirs = ok[ok["backend"].isin(forced)]
        if mine.empty or theirs.empty:
            continue
        fastest = theirs.loc[theirs.groupby(keys, dropna=False)["median_s"].idxmin()]
        pairs = mine.merge(fastest, on=keys, suffixes=("", "_forced"))
        if pairs.empty:
            continue
        pairs = pairs.assign(ratio=pairs["median_s"] / pairs["median_s_forced"],
                             low=_ci(pairs, "low") / _ci(pairs, "high", "_forced"),
                             high=_ci(pairs, "high") / _ci(pairs, "low", "_forced"))
        for family, grp in pairs.groupby(FAMILY_KEYS, dropna=False):
            worst = grp.loc[grp["ratio"].idxmax()]
            out.append({"automatic": auto, "family": family_label(*family), "ratio": geomean(grp["ratio"]),
                        "low": geomean(grp["low"]), "high": geomean(grp["high"]),
                        "fastest": str(grp["backend_forced"].mode().iloc[0]), "shapes": len(grp),
                        "worst": float(worst["ratio"]), "worst_kv": int(worst["seq_kv"]),
                        "verdict": HOLDS if geomean(grp["high"]) <= WITHIN else
                        FAILS if geomean(grp["low"]) > WITHIN else INCONCLUSIVE,
                        "seq_kv": sorted(int(s) for s in grp["seq_kv"].unique())})
    return out


def _ci(pairs: pd.DataFrame, side: str, suffix: str = "") -> pd.Series:
    """A case's CI bound (ci_low_s / ci_high_s), its median where the run recorded none."""
    median = pairs[f"median_s{suffix}"]
    column = f"ci_{side}_s{suffix}"
    return pairs[column].fillna(median) if column in pairs else median


def _family(d: dict) -> str:
    interval = f"interval {d['low']:.2f}–{d['high']:.2f}×"
    where = f"{d['shapes']} shape{'s' * (d['shapes'] > 1)}"
    if d["ratio"] <= 1.0:
        return f"{d['family']}: {d['ratio']:.2f}× ({interval}, {where}; it matched or beat {d['fastest']})"
    return (f"{d['family']}: {d['ratio']:.2f}× the fastest forced kernel, {d['fastest']} ({interval}, {where}; worst "
            f"{d['worst']:.2f}× at KV {d['worst_kv']:,})")


def auto_choice(df: pd.DataFrame, run: RunMeta = NO_FACTS) -> Verdict:
    """Does the automatic choice lose more than WITHIN to the best kernel it chooses among, per shape family?"""
    found = losses(df)
    if not found:
        auto = next(iter(AUTOMATIC), "")
        command = f"python -m bench run --backend {','.join((auto, *AUTOMATIC.get(auto, ())[:2]))}"
        return Verdict(CLAIM, NOT_MEASURED, f"no shape timed with the automatic choice and a forced kernel "
                       f"(`{command}`)")
    words = [d["verdict"] for d in found]
    verdict = FAILS if FAILS in words else INCONCLUSIVE if INCONCLUSIVE in words else HOLDS
    numbers = ("automatic time over the fastest forced kernel, geometric mean per shape family: "
               + "; ".join(_family(d) for d in found)
               + f". A family holds when its whole interval is within {WITHIN:.2f}×.")
    why = ""
    if verdict == FAILS:
        worst = max((d for d in found if d["verdict"] == FAILS), key=lambda d: d["ratio"])
        why = (f"forcing {worst['fastest']} would save {100 * (1 - 1 / worst['ratio']):.0f}% in {worst['family']}: "
               "torch's dispatcher picks by what the inputs allow, not by what is fastest on this machine")
    elif verdict == INCONCLUSIVE:
        why = (f"the interval of a family straddles {WITHIN:.2f}×: more rounds (--budget) or more lengths decide it")
    seqs = [s for d in found for s in d["seq_kv"]]
    return Verdict(CLAIM, verdict, numbers, why, detail=tuple(found),
                   judged_on=judged(span(seqs, "S"), ", ".join(sorted({d["automatic"] for d in found}
                                                                     | {d["fastest"] for d in found}))))


def default_loss(df: pd.DataFrame) -> dict[str, float]:
    """family label -> the automatic choice's geomean ratio to the fastest forced kernel (for the best-backends
    table); math.nan where not measured."""
    return {d["family"]: d["ratio"] for d in losses(df) if not math.isnan(d["ratio"])}
