"""Claim: MLA decodes at least as fast as GQA/MQA (one latent read for all heads).

Question `mla`: for one MLA geometry of a native dtype, its absorbed decode steps at every context for the textbook
and the fused backend, and the GQA/MQA steps of the same backends, Hq, batch and context at head dim = MLA's value
head dim (the width it was scaled from). Judged per condition (backend × dtype × GQA or MQA, at the longest context):
their time over MLA's, on its own timings, against 1×.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from bench.analysis.conditions import SHARE, amount, combine, condition, listing, pairs_of, undecided_why
from bench.analysis.verdict import DEPENDS, FAILS, NOT_MEASURED, Verdict, judged, noisy_count, noisy_note, span
from bench.claims.decode import CEILINGS, INTERVAL_COLUMNS, NEAR, median_of
from bench.claims.question import Context, Question, main_dtypes, pair, plain
from bench.claims.spec import ClaimSpec
from bench.problem.case import Case
from bench.results.meta import RunMeta

if TYPE_CHECKING:
    import pandas as pd


SPECS = (ClaimSpec("mla", "MLA decodes at least as fast as GQA/MQA (one latent read for all heads)",
                   "bench.claims.mla:mla_decode_step", "mla",
                   {"backend": "naive,sdpa,flex", "variant": "gqa,mqa,mla", "dtype": "fp32", "mask": "causal",
                    "phase": "decode", "decode-kv": "4096,16384"}, ratio="GQA-MQA step / MLA step"),)
CLAIM, COMMAND = SPECS[0].text, SPECS[0].command
KEYS = ["backend", "dtype", "batch", "n_heads", "seq_q", "seq_kv", "mask", "pass"]


# -- the question ---------------------------------------------------------------------------------------------------
def picks(c: Case) -> bool:
    """MLA's absorbed decode steps and the GQA/MQA steps they are judged against."""
    return plain(c) and c.phase == "decode" and (c.shape.absorbed or c.shape.variant in ("gqa", "mqa"))


def least(cases: list[Case], ctx: Context) -> list[Case]:
    """For one MLA geometry of a native dtype, its steps at every context for the textbook and the fused backend,
    and the GQA/MQA steps of the same backends, Hq, batch and context at head dim = MLA's value head dim."""
    mla = [c for c in cases if c.shape.absorbed]
    dtypes = main_dtypes(mla, ctx)
    mla = [c for c in mla if c.shape.dtype in dtypes[:1]]
    if not mla:
        return []
    backends = pair(mla, ctx, lambda c: c.shape.seq_kv)
    mla = [c for c in mla if c.backend in backends]
    keys = {(c.backend, c.shape.dtype, c.shape.batch, c.shape.n_heads, c.shape.seq_q, c.shape.seq_kv,
             c.shape.mla.v_head_dim) for c in mla}
    twins = [c for c in cases if c.shape.mla is None and (c.backend, c.shape.dtype, c.shape.batch,
                                                               c.shape.n_heads, c.shape.seq_q, c.shape.seq_kv,
                                                               c.shape.head_dim) in keys]
    return mla + twins if twins else []


QUESTIONS = (Question("mla", picks, least),)


# -- the judge ------------------------------------------------------------------------------------------------------
def mla_decode_step(df: pd.DataFrame, run: RunMeta | None = None) -> Verdict:
    """MLA's absorbed decode step against the GQA and MQA steps of the same backend, Hq, batch and context (their
    head dim = MLA's v_head_dim, the width it was scaled from): ratio = their time / MLA's, judged per condition
    (backend × dtype × GQA or MQA, at the longest context) on its own timings against 1×. Says where MLA's step
    sits: its FLOPs per byte are ~Hq x MHA's (bench.counts.metrics), so it is the first to leave the read ceiling for
    the GEMM's."""
    from bench.analysis.frames import dense_rows, ok_rows
    from bench.analysis.interval import ratio_interval

    ok = ok_rows(dense_rows(df))
    ok = ok[ok["phase"] == "decode"]
    mla = ok[ok["variant"] == "mla"]
    if mla.empty or "v_head_dim" not in ok:
        return Verdict(CLAIM, NOT_MEASURED, f"no MLA decode cases (`{COMMAND}`)")
    timings = [c for c in ("median_s", *INTERVAL_COLUMNS) if c in ok]
    ids = ["case_id"] if "case_id" in ok else []
    twins = ok[ok["variant"].isin(["gqa", "mqa"])][KEYS + ["variant", "head_dim", *ids, *timings]]
    pairs = mla[KEYS + ["v_head_dim", *ids, *timings, "flops", "bytes", *CEILINGS]].merge(
        twins.rename(columns={"head_dim": "v_head_dim", **{c: f"twin_{c}" for c in [*ids, *timings]}}),
        on=KEYS + ["v_head_dim"])
    if pairs.empty:
        return Verdict(CLAIM, NOT_MEASURED, "no GQA/MQA decode case at MLA's Hq, context and head dim")
    pairs = pairs.assign(ratio=pairs["twin_median_s"] / pairs["median_s"])
    at_longest = pairs[pairs["seq_kv"] == pairs["seq_kv"].max()]
    per = at_longest.groupby(["variant", "backend"])["ratio"].median().unstack("variant")
    reads = median_of(at_longest["pct_read_ceiling"]) / 100  # shares of the ceilings (the records give percents)
    gemms = median_of(at_longest["pct_gemm_ceiling"]) / 100
    nearer = "GEMM" if gemms >= reads else "read"
    bound = ("no ceilings recorded" if not (math.isfinite(reads) and math.isfinite(gemms)) else
             f"near neither ceiling (both under {NEAR:g}%; nearer the {nearer} one): overheads set the step"
             if max(reads, gemms) < NEAR / 100 else "compute-bound here" if nearer == "GEMM" else "memory-bound here")
    ceilings = f"{amount(reads, SHARE)} of the read ceiling, {amount(gemms, SHARE)} of the GEMM ceiling: {bound}"
    notes = (f"At KV {int(at_longest['seq_kv'].max())} (Hq {int(at_longest['n_heads'].iloc[0])}), MLA's step runs at "
             f"{ceilings}." + _roofline(at_longest) + _kernels(mla))
    numbers = (f"at KV {int(at_longest['seq_kv'].max())} (Hq {int(at_longest['n_heads'].iloc[0])}), the GQA/MQA "
               "step's time over MLA's, per backend: " + "; ".join(
                   f"{b} " + ", ".join(f"{v.upper()} {x:.2f}×" for v, x in row.dropna().items())
                   for b, row in per.iterrows())
               + f". MLA's step: {ceilings}."
               + _roofline(at_longest)
               + _kernels(mla) + noisy_note(mla))
    found = [condition({"backend": b, "dtype": d, "against": v.upper(), "seq_kv": int(grp["seq_kv"].iloc[0])},
                       float(grp["ratio"].median()), ratio_interval(grp, "twin_", ""), 1.0, holds_above=True,
                       pairs=pairs_of(grp, "twin_case_id"))
             for (b, d, v), grp in at_longest.groupby(["backend", "dtype", "variant"], sort=True)]
    numbers += f" Per condition (the GQA/MQA step's time over MLA's; at least 1× holds): {listing(found)}."
    detail = tuple(pairs[KEYS + ["variant", "ratio"]].to_dict("records"))
    on = judged(span(at_longest["seq_kv"], "KV"), span(at_longest["n_heads"], "Hq"),
                ", ".join(sorted(at_longest["dtype"].unique())), ", ".join(sorted(at_longest["backend"].unique())))
    verdict = combine(found)
    why = undecided_why(found)
    if verdict in (FAILS, DEPENDS):
        worst = min(found, key=lambda c: c.ratio)
        slower = f"{worst.fields['backend']} · {worst.fields['dtype']} · {worst.fields['against']}"
        why = (f"MLA's step is {1 / worst.ratio:.2f}× {slower}'s at worst: it reads fewer bytes per token but does "
               f"~Hq× the FLOPs per byte, and is {bound}. " + why).strip()
    return Verdict(CLAIM, verdict, numbers, why, detail, judged_on=on, conditions=tuple(found), notes=notes,
                   noisy=noisy_count(mla))


def _kernels(rows: pd.DataFrame) -> str:
    """Which SDPA kernel ran MLA (torch's CPU flash kernel needs D_v = D_qk: its automatic choice falls to math)."""
    if "sdpa_kernel" not in rows:
        return ""
    ran = rows.dropna(subset=["sdpa_kernel"]).drop_duplicates("backend")
    pairs = ", ".join(f"{b} ran {k}" for b, k in zip(ran["backend"], ran["sdpa_kernel"], strict=True))
    return f" SDPA's kernel for MLA: {pairs}." if len(ran) else ""


def _roofline(rows: pd.DataFrame) -> str:
    """MLA's step on this machine's roofline: its FLOPs per byte against the ridge (GEMM ceiling / read ceiling,
    recovered from the two percentages: ridge = intensity x pct_read / pct_gemm)."""
    import pandas as pd

    rows = rows.drop_duplicates("backend")
    intensity = pd.to_numeric(rows["flops"], errors="coerce") / pd.to_numeric(rows["bytes"], errors="coerce")
    ridge = intensity * pd.to_numeric(rows["pct_read_ceiling"], errors="coerce") / pd.to_numeric(
        rows["pct_gemm_ceiling"], errors="coerce")
    i, r = median_of(intensity), median_of(ridge)
    if not (math.isfinite(i) and math.isfinite(r) and r > 0):
        return ""
    return (f" On the roofline: {i:.3g} FLOP per byte against this machine's ridge at {r:.3g}: "
            f"{'right of the ridge (compute side)' if i >= r else 'left of the ridge (memory side)'}.")
