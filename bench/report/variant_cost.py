"""Attention variants against plain causal: each (softcap, ALiBi, sinks, chunk) case's time over the same backend's
plain causal case of the same shape, the figure's data and the claim on the fused kernels that take every variant.

A variant row is a dense attention case with a score variant under a causal mask, or a chunk mask with no score
variant; its twin is the case with mask causal and score none, every other shape field equal. Which backends the
claim is about is read from the registry's traits (bench.report.traits.ALL_VARIANT_KERNELS), never named here.
"""

from __future__ import annotations

import pandas as pd

from bench.claims import VARIANTS_WITHIN, spec
from bench.report.conditions import combine, condition, listing, pairs_of, undecided_why
from bench.report.frames import attention_rows, dense_rows, geomean, ok_rows, shape_keys_but
from bench.report.interval import ROUNDS_DECIDE, ratio_interval
from bench.report.traits import ALL_VARIANT_KERNELS
from bench.report.verdict import FAILS, NO_FACTS, NOT_MEASURED, Verdict, noisy_note
from bench.results.meta import RunMeta

CLAIM = spec("variants").text


def variant_name(mask: str, score: str) -> str | None:
    """'softcap:30' / 'alibi' / 'sinks' (under causal), 'chunk:C' (no score variant), or None (not a variant row)."""
    score = score if isinstance(score, str) else "none"
    if mask == "causal" and score != "none":
        return score
    if isinstance(mask, str) and mask.startswith("chunk:") and score == "none":
        return mask
    return None


def variant_costs(df: pd.DataFrame) -> pd.DataFrame:
    """One row per variant case with a plain causal twin: backend, variant, the shape keys, median_s, plain_s and
    ratio (variant time / plain causal time)."""
    if "score" not in df:
        return pd.DataFrame()
    ok = ok_rows(attention_rows(dense_rows(df))).copy()
    ok["attn_variant"] = [variant_name(m, s) for m, s in zip(ok["mask"], ok["score"], strict=True)]
    plain = ok[(ok["mask"] == "causal") & (ok["score"] == "none")]
    varied = ok[ok["attn_variant"].notna()]
    if plain.empty or varied.empty:
        return pd.DataFrame()
    keys = ["backend", *shape_keys_but("mask", "score")]
    timings = [c for c in ("median_s", "ci_low_s", "ci_high_s") if c in ok]
    ids = ["case_id"] if "case_id" in ok else []  # a frame built by hand may have none: no pairs to re-measure
    twin = plain[keys + ids + timings].rename(columns={c: f"plain_{c}" for c in ids + timings})
    twin["plain_s"] = twin["plain_median_s"]
    out = varied.merge(twin, on=keys, how="inner")
    out["ratio"] = out["median_s"] / out["plain_s"]
    return out


def variants_within(df: pd.DataFrame, run: RunMeta = NO_FACTS) -> Verdict:
    """Per condition — a backend among ALL_VARIANT_KERNELS × a variant — the geometric mean of variant / plain causal
    time over the sizes run, with its 95% interval from those cases' own timings, against VARIANTS_WITHIN; the
    claim's word is bench.report.conditions' rule over them."""
    costs = variant_costs(df)
    if not costs.empty:
        costs = costs[costs["backend"].isin(ALL_VARIANT_KERNELS)]
    if costs.empty:
        return Verdict(CLAIM, NOT_MEASURED, "no variant case with its plain causal twin for "
                       f"{', '.join(ALL_VARIANT_KERNELS) or 'any backend taking every variant'} (`"
                       f"{spec('variants').command}`)")
    found, detail = [], []
    for (backend, variant), grp in costs.groupby(["backend", "attn_variant"]):
        ratio = geomean(grp["ratio"])
        found.append(condition(f"{backend} {variant}", ratio, ratio_interval(grp, "", "plain_", "geomean"),
                               VARIANTS_WITHIN, holds_above=False, pairs=pairs_of(grp, "case_id", "plain_case_id")))
        detail.append({"backend": backend, "variant": variant, "ratio": ratio, "cases": len(grp),
                       "worst": float(grp["ratio"].max())})
    numbers = (f"variant / plain causal time, geometric mean over {costs['seq_kv'].nunique()} size(s), per backend "
               f"and variant (within {VARIANTS_WITHIN:g}× holds): {listing(found)}." + noisy_note(costs))
    verdict = combine(found)
    why = undecided_why(found, VARIANTS_WITHIN, ROUNDS_DECIDE)
    failing = [c for c in found if c.verdict == FAILS]
    if failing:
        worst = max(failing, key=lambda c: c.ratio)
        why = (f"{worst.name} costs {worst.ratio:.2f}× plain causal"
               + (": its sinks add an extra key (a K/V copy) on every call" if worst.name.endswith("sinks") else "")
               + (". " + why if why else ""))
    return Verdict(CLAIM, verdict, numbers, why, detail=tuple(detail), conditions=tuple(found))
