"""Serving batches in one run's tidy frame -> plain data: time per real token by length distribution, paged against
contiguous decode, and the claim about what paging costs.

A serving row has `lengths` or `page_size` set (bench.serving); a replayed trace's buckets (lengths rows:...) are
bench.report.traces'. Time per real token = median_s / real_tokens
(padding never counts as a token). Paged and contiguous decode steps are paired when everything but the page size
matches: same backend and every other shape field (heads, dtype, mask, batch, context distribution, seq_kv, ...).
"""

from __future__ import annotations

import pandas as pd

from bench.claims import PAGING_WITHIN, spec
from bench.report.conditions import combine, condition, listing, pairs_of, undecided_why
from bench.report.frames import ok_rows, serving_rows, shape_keys_but, trace_rows
from bench.report.interval import ROUNDS_DECIDE, ratio_interval
from bench.report.traits import PAGED_KERNELS
from bench.report.verdict import FAILS, NO_FACTS, NOT_MEASURED, Verdict, noisy_note
from bench.results.meta import RunMeta

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


def paging_cost(df: pd.DataFrame, run: RunMeta = NO_FACTS) -> Verdict:
    """The claim: a paged KV cache costs little against a contiguous one, for backends with a real paged kernel
    (PAGED_KERNELS: their paged layout reads the pages in place instead of gathering them), judged per condition
    (such a backend × page size: the median paged / contiguous ratio, its interval from those cases' own timings)."""
    claim = spec("paging").text
    pairs = paged_vs_contiguous(df)
    if pairs.empty:
        return Verdict(claim, NOT_MEASURED,
                       f"no paged decode case with its contiguous twin (`{spec('paging').command}`)")
    by = pairs.groupby(["backend", "page_size"])["ratio"].median()
    detail = tuple({"backend": b, "page_size": int(p), "ratio": float(r)} for (b, p), r in by.items())
    shown = "; ".join(f"{b} pages of {int(p)}: {r:.2f}×" for (b, p), r in by.items())
    in_place = by[by.index.get_level_values("backend").isin(PAGED_KERNELS)]
    if in_place.empty:
        return Verdict(claim, NOT_MEASURED, f"only gathering backends ran paged: {shown}",
                       f"the claim is about kernels that read pages in place ({', '.join(PAGED_KERNELS)}); none "
                       "ran a paged case here", detail)
    found = [condition(f"{b} pages of {int(p)}", float(grp["ratio"].median()), ratio_interval(grp, "", "contiguous_"),
                       PAGING_WITHIN, holds_above=False, pairs=pairs_of(grp, "case_id", "contiguous_case_id"))
             for (b, p), grp in pairs[pairs["backend"].isin(PAGED_KERNELS)].groupby(["backend", "page_size"])]
    numbers = (f"paged / contiguous decode time, median per backend and page size: {shown}; judged per kernel that "
               f"reads pages in place and page size (within {PAGING_WITHIN:g}× holds): {listing(found)}."
               + noisy_note(pairs))
    verdict = combine(found)
    why = undecided_why(found, PAGING_WITHIN, ROUNDS_DECIDE)
    failing = [c for c in found if c.verdict == FAILS]
    if failing:
        why = (f"{', '.join(c.name for c in failing)} pay{'s' * (len(failing) == 1)} more than {PAGING_WITHIN:g}×: "
               "the pages' scattered reads cost more here than vLLM measured." + (" " + why if why else ""))
    return Verdict(claim, verdict, numbers, why, detail, conditions=tuple(found))
