"""One backend against the fastest of its rivals at the same shapes, per shape family, with an interval: the judge
of the claims that compare a chooser or a wrapper with the kernels it could have run.

Per shape family (phase, variant, dtype, mask, pass), over the shapes where the subject and at least one rival ran
ok: the ratio subject time / fastest rival time, its geometric mean over the family's shapes, and an interval from
each case's own confidence interval (the subject's low over the rival's high, and its high over the rival's low). A
family is judged by bench.analysis.conditions' rule (at its bound, holding, where its estimate lies within the band
around the bound; else holds when the whole interval is within the bound, fails when it is wholly beyond it, and is
inconclusive when it straddles it: more rounds would decide, and the verdict says so rather than tossing a coin). The
claim's word over its families is bench.analysis.conditions' rule (some hold and some fail: depends).
"""

from __future__ import annotations

import pandas as pd

from bench.analysis.conditions import condition, pairs_of
from bench.analysis.frames import FAMILY_KEYS, SHAPE_KEYS, attention_rows, dense_rows, geomean, ok_rows
from bench.problem.case import family_label


def against_fastest(df: pd.DataFrame, subject: str, rivals: tuple[str, ...], bound: float) -> list[dict]:
    """Per shape family: subject, family, ratio (geomean), low, high, the rival fastest most often, the shapes
    compared, the worst shape's ratio and KV length, the lengths, the case pairs, and `condition`: the family as a
    Condition against `bound` (the subject's time over its fastest rival's, within it holds)."""
    ok = attention_rows(ok_rows(dense_rows(df)))
    keys = [k for k in SHAPE_KEYS if k != "backend"]
    mine, theirs = ok[ok["backend"] == subject], ok[ok["backend"].isin(rivals)]
    if mine.empty or theirs.empty:
        return []
    fastest = theirs.loc[theirs.groupby(keys, dropna=False)["median_s"].idxmin()]
    pairs = mine.merge(fastest, on=keys, suffixes=("", "_rival"))
    if pairs.empty:
        return []
    pairs = pairs.assign(ratio=pairs["median_s"] / pairs["median_s_rival"],
                         low=_ci(pairs, "low") / _ci(pairs, "high", "_rival"),
                         high=_ci(pairs, "high") / _ci(pairs, "low", "_rival"))
    out = []
    for family, grp in pairs.groupby(FAMILY_KEYS, dropna=False):
        worst = grp.loc[grp["ratio"].idxmax()]
        low, high, ratio = geomean(grp["low"]), geomean(grp["high"]), geomean(grp["ratio"])
        fastest = str(grp["backend_rival"].mode().iloc[0])
        key = {"backend": subject, **{k: str(v).upper() if k == "variant" else v
                                      for k, v in zip(FAMILY_KEYS, family, strict=True)}}
        found = condition(key, ratio, (low, high), bound, holds_above=False,
                          pairs=pairs_of(grp, "case_id", "case_id_rival"),
                          facts={"against": fastest, "shapes": len(grp), "worst": float(worst["ratio"]),
                                 "worst_kv": int(worst["seq_kv"])})
        out.append({"subject": subject, "family": family_label(*family), "ratio": ratio, "low": low, "high": high,
                    "fastest": fastest, "shapes": len(grp), "worst": float(worst["ratio"]),
                    "worst_kv": int(worst["seq_kv"]), "seq_kv": sorted(int(s) for s in grp["seq_kv"].unique()),
                    "verdict": found.verdict, "pairs": list(found.pairs), "condition": found})
    return out


def _ci(pairs: pd.DataFrame, side: str, suffix: str = "") -> pd.Series:
    """A case's CI bound (ci_low_s / ci_high_s), its median where the run recorded none."""
    median = pairs[f"median_s{suffix}"]
    column = f"ci_{side}_s{suffix}"
    return pairs[column].fillna(median) if column in pairs else median
