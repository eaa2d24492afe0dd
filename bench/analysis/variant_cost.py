"""Attention variants against plain causal: each (softcap, ALiBi, sinks, chunk) case's time over the same backend's
plain causal case of the same shape: the figure's data, and what the variants claim (bench.claims.variants) judges.

A variant row is a dense attention case with a score variant under a causal mask, or a chunk mask with no score
variant; its twin is the case with mask causal and score none, every other shape field equal.
"""

from __future__ import annotations

import pandas as pd

from bench.analysis.frames import attention_rows, dense_rows, ok_rows, shape_keys_but


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
