"""Serving batches in one run's tidy frame -> plain data: time per real token by length distribution, paged against
contiguous decode (the pairs the paging claim, bench.claims.paging, judges).

A serving row has `lengths` or `page_size` set (bench.serving); a replayed trace's buckets (lengths rows:...) are
bench.analysis.time_to_serve'. Time per real token = median_s / real_tokens
(padding never counts as a token). Paged and contiguous decode steps are paired when everything but the page size
matches: same backend and every other shape field (heads, dtype, mask, batch, context distribution, seq_kv, ...).
"""

from __future__ import annotations

import pandas as pd

from bench.analysis.frames import ok_rows, serving_rows, shape_keys_but, trace_rows

# What pairs a paged decode step with its contiguous twin: the backend and every shape field but the page size
# (the one thing this comparison varies), so a field added later keeps different cases apart.
VARIED = ("page_size",)
PAIR_KEYS = ["backend", *shape_keys_but(*VARIED)]


def per_token(df: pd.DataFrame) -> pd.DataFrame:
    """The run's ok prefill serving rows with `s_per_token`: median seconds per real query token."""
    ok = ok_rows(df[serving_rows(df) & ~trace_rows(df)])
    ok = ok[(ok["phase"] == "prefill") & ok["real_tokens"].notna()].copy()
    ok["s_per_token"] = ok["median_s"] / ok["real_tokens"]
    return ok


def paged_vs_contiguous(df: pd.DataFrame) -> pd.DataFrame:
    """One row per ok paged decode case whose contiguous twin ran ok: `ratio` = paged time / contiguous time."""
    ok = ok_rows(df[serving_rows(df) & ~trace_rows(df)])
    ok = ok[ok["phase"] == "decode"]
    timings = [c for c in ("median_s", "ci_low_s", "ci_high_s") if c in ok]
    ids = ["case_id"] if "case_id" in ok else []  # a frame built by hand may have none: no pairs to re-measure
    contiguous = ok[ok["page_size"].isna()][PAIR_KEYS + ids + timings].rename(
        columns={c: f"contiguous_{c}" for c in ids + timings}).assign(
        contiguous_s=lambda d: d["contiguous_median_s"])
    paged = ok[ok["page_size"].notna()]
    merged = paged.merge(contiguous, on=PAIR_KEYS, how="inner")
    merged["ratio"] = merged["median_s"] / merged["contiguous_s"]
    return merged
