"""Claim: GQA/MQA speed up decoding 2-4×, judged per kernel family.

A kernel that expands K/V to all Hq heads (the materialising backends repeat them before the product) reads as
much as MHA whatever Hkv is; a fused kernel reads each KV head once for its group. So the two families are judged
apart, and where the claim does not hold the numbers say why: the steps' share of the read-only ceiling
(pct_read_ceiling) and of the GEMM ceiling (pct_gemm_ceiling). A step held by compute, or by costs that do not
scale with the KV bytes, gains nothing from fewer of them.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd

from bench.claims import DECODE_SPEEDUP, MIN_KV_LENGTHS, NEAR, ON_CHIP, spec
from bench.report.conditions import Condition, combine, condition, listing, pairs_of, undecided_why
from bench.report.frames import dense_rows, ok_rows
from bench.report.interval import ROUNDS_DECIDE, ratio_interval
from bench.report.traits import EXPANDING, FAMILY_NAMES, FUSED, kv_family
from bench.report.verdict import (
    DEPENDS,
    FAILS,
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

KEYS = ["backend", "dtype", "batch", "n_heads", "head_dim", "seq_q", "seq_kv", "mask", "pass", *LATER_SHAPE_KEYS]
CEILINGS = ["pct_read_ceiling", "pct_gemm_ceiling"]
INTERVAL_COLUMNS = ("ci_low_s", "ci_high_s")


def decode_pairs(df: pd.DataFrame) -> pd.DataFrame:
    """Each ok GQA/MQA decode case beside the MHA case of its shape (equal Hq): speedup = MHA time / its time.

    Adds `family` (EXPANDING / FUSED by the backend's memory trait) and the MHA twin's ceilings as mha_pct_*.
    One merge, not a loop over shapes: runs have 10k cases."""
    ok = ok_rows(dense_rows(df))
    ok = ok[ok["phase"] == "decode"]
    timings = [c for c in ("median_s", *INTERVAL_COLUMNS) if c in ok]
    ids = ["case_id"] if "case_id" in ok else []  # a frame built by hand may have none: no pairs to re-measure
    mha = ok[ok["variant"] == "mha"].drop_duplicates(KEYS)[KEYS + ids + timings + CEILINGS]
    mha = mha.rename(columns={c: f"mha_{c}" for c in ids + timings + CEILINGS}).assign(
        mha_s=lambda d: d["mha_median_s"])
    sp = ok[ok["variant"] != "mha"].merge(mha, on=KEYS, how="inner").sort_values(KEYS, kind="stable")
    return sp.assign(speedup=sp["mha_s"] / sp["median_s"], group_size=sp["group_size"].astype(int),
                     family=sp["backend"].map(kv_family)).reset_index(drop=True)


def _pct(x: float) -> str:
    return f"{x:.0f}%"


def _median(values: pd.Series) -> float:
    """The median of a column that may be missing in places (NaN when nothing was recorded)."""
    return float(pd.to_numeric(values, errors="coerce").astype("float64").median())


def _why(family: str, at_longest: pd.DataFrame) -> str:
    """The reason the numbers give for a speedup below the claim's, from the ceilings at the longest KV length."""
    med = {c: _median(at_longest[c])
           for c in ("mha_pct_read_ceiling", "mha_pct_gemm_ceiling", *CEILINGS)}
    mr, mg, gr, gg = (med[c] for c in ("mha_pct_read_ceiling", "mha_pct_gemm_ceiling", *CEILINGS))
    known = all(math.isfinite(v) for v in (mr, mg, gr, gg))
    ceilings = (f"At the longest KV length the MHA step runs at {_pct(mr)} of the read-only ceiling and {_pct(mg)} "
                f"of the GEMM ceiling, the GQA/MQA steps at {_pct(gr)} and {_pct(gg)}. ") if known else ""
    if family == EXPANDING:
        return (ceilings + "These kernels expand K/V to all Hq heads before the product, so a GQA/MQA step reads and "
                "computes as much as MHA, plus the copy: fewer KV heads in the cache cannot make them faster.")
    if not known:
        return "The run recorded no ceilings (pct_read_ceiling, pct_gemm_ceiling) to tell what holds the step."
    if gg >= gr:
        reason = ("Nearer the GEMM ceiling than the read ceiling: compute-bound here, and the FLOPs are the same at "
                  "every Hkv, so fewer KV bytes gain nothing.")
    elif gr < NEAR:
        reason = (f"Near neither ceiling (both under {NEAR:g}%): costs that do not scale with the KV bytes (launch, "
                  "dispatch, the Hq heads' own work) set the step's time, so fewer KV bytes buy little.")
    else:
        reason = "Bandwidth-bound, yet the fewer KV bytes did not shorten the step as much as they shrank."
    if mr > 100:
        reason += (" The MHA step reads faster than the read-only ceiling: its KV cache is served from on-chip "
                   "caches, so there is little memory traffic for GQA/MQA to save.")
    return ceilings + reason


def _condition(family: str, key: tuple, rows: pd.DataFrame, lengths: list[int]) -> Condition:
    """One condition (backend × dtype × GQA/MQA group size) at its longest KV length, judged on its own timings:
    holds when its interval clears the claim's 2×; a shortfall is a finding only over MIN_KV_LENGTHS lengths and,
    for a fused kernel, only where the MHA step's cache is not served from on-chip caches."""
    backend, dtype, variant, group = key
    kv = int(rows["seq_kv"].iloc[0])
    name = f"{backend} · {dtype} · {variant.upper()} (Hq/Hkv {group}) at KV {kv:,}"
    found = condition(name, float(rows["speedup"].median()), ratio_interval(rows, "mha_", ""), DECODE_SPEEDUP[0],
                      holds_above=True, pairs=pairs_of(rows, "mha_case_id"))
    if found.verdict != FAILS:
        return found
    if len(lengths) < MIN_KV_LENGTHS:
        return replace(found, verdict=INCONCLUSIVE, why=f"short of the claim at KV {', '.join(map(str, lengths))} "
                       f"only: a shortfall is a finding over ≥ {MIN_KV_LENGTHS} KV lengths (--decode-kv)")
    mha_read = _median(rows["mha_pct_read_ceiling"])
    if family == FUSED and math.isfinite(mha_read) and mha_read > ON_CHIP:
        # the MHA step read its cache faster than memory can deliver: it sat in on-chip caches, where fewer KV
        # bytes save no memory traffic; only a cache that spills to memory can decide this condition
        return replace(found, verdict=INCONCLUSIVE, why=f"the MHA step reads at {mha_read:.0f}% of the read-only "
                       f"ceiling (its cache on-chip): --decode-kv {4 * kv},{16 * kv} decides it")
    return found


def _judge(df: pd.DataFrame, family: str) -> Verdict:
    """Per condition — backend × dtype × GQA/MQA group size, at that condition's longest KV length — the MHA step's
    time over the GQA/MQA step's, its 95% interval from those cases' own timings, and its word against 2×; the
    claim's word is bench.report.conditions' rule over them (holds, does not hold, depends, inconclusive). Where
    some conditions were measured at MIN_KV_LENGTHS lengths or more, the others are listed but not judged."""
    claim = spec(f"{family}-decode").text
    pairs = decode_pairs(df)
    sp = pairs[pairs["family"] == family]
    if sp.empty:
        return Verdict(claim, NOT_MEASURED, f"no decode cases of {FAMILY_NAMES[family]} with MHA and GQA/MQA "
                                            f"at equal Hq (`{spec(f'{family}-decode').command}`)")
    detail = [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
              for row in sp[KEYS + ["variant", "group_size", "speedup"]].to_dict("records")]
    judged_rows, partial = [], []  # (condition, its rows at its longest KV length); conditions left unjudged
    for key, grp in sp.groupby(["backend", "dtype", "variant", "group_size"], sort=True):
        at = grp[grp["seq_kv"] == grp["seq_kv"].max()]
        lengths = sorted(int(k) for k in grp["seq_kv"].unique())
        judged_rows.append((_condition(family, key, at, lengths), at))
        partial.append(len(lengths) < MIN_KV_LENGTHS)
    if not all(partial):  # judged on the conditions a run measured whole (the plan's least set measures some whole;
        # which others a time budget reached varies from run to run, and a verdict should not)
        shown = [c for (c, _), p in zip(judged_rows, partial, strict=True) if p]
        judged_rows = [jr for jr, p in zip(judged_rows, partial, strict=True) if not p]
    else:
        shown = []
    found = [c for c, _ in judged_rows]
    by_len = sp.groupby(["seq_kv", "variant"])["speedup"].median().unstack("variant")
    per_len = "; ".join(f"KV {int(s)}: " + ", ".join(f"{v.upper()} {x:.2f}×" for v, x in row.dropna().items())
                        for s, row in by_len.iterrows())
    low, high = DECODE_SPEEDUP
    numbers = (f"MHA step over the GQA/MQA step, per condition at its longest KV length: {listing(found)}; "
               f"median over conditions per KV length: {per_len}")
    if shown:
        numbers += (f"; not judged, measured at fewer than {MIN_KV_LENGTHS} KV lengths: "
                    + "; ".join(f"{c.name} {c.ratio:.2f}×" for c in shown))
    if max(c.ratio for c in found) > high:
        numbers += f" (some above the claimed {high:g}×)"
    ok = ok_rows(dense_rows(df))
    numbers += "." + noisy_note(ok[(ok["phase"] == "decode") & (ok["backend"].map(kv_family) == family)])
    verdict = combine(found)
    on = judged(span(sp["seq_kv"], "KV"), span(sp["n_heads"], "Hq"), ", ".join(sorted(sp["dtype"].unique())),
                ", ".join(sorted(sp["backend"].unique())))
    why = undecided_why(found, low, f"{ROUNDS_DECIDE}; more KV lengths (--decode-kv) show where the speedup is "
                        "heading")
    failing = [rows for c, rows in judged_rows if c.verdict == FAILS]
    if failing:  # the ceilings of the failing conditions say why they fall short
        why = (_why(family, pd.concat(failing)) + (" " + why if why else "")).strip()
    return Verdict(claim, verdict, numbers, why, tuple(detail), judged_on=on, conditions=tuple(found))


def fused_decode_speedup(df: pd.DataFrame, run: RunMeta = NO_FACTS) -> Verdict:
    """Fused (tiled) kernels read each KV head once: the family the tutorials' claim is about."""
    return _judge(df, FUSED)


def expanding_decode_speedup(df: pd.DataFrame, run: RunMeta = NO_FACTS) -> Verdict:
    """Materialising kernels repeat K/V to Hq heads: the claim is not expected to hold for them."""
    return _judge(df, EXPANDING)


MLA_CLAIM = spec("mla").text
MLA_KEYS = ["backend", "dtype", "batch", "n_heads", "seq_q", "seq_kv", "mask", "pass"]


def mla_decode_step(df: pd.DataFrame, run: RunMeta = NO_FACTS) -> Verdict:
    """MLA's absorbed decode step against the GQA and MQA steps of the same backend, Hq, batch and context (their
    head dim = MLA's v_head_dim, the width it was scaled from): ratio = their time / MLA's, judged per condition
    (backend × dtype × GQA or MQA, at the longest context) on its own timings against 1×. Says where MLA's step
    sits: its FLOPs per byte are ~Hq x MHA's (bench.counts.metrics), so it is the first to leave the read ceiling for
    the
    GEMM's."""
    ok = ok_rows(dense_rows(df))
    ok = ok[ok["phase"] == "decode"]
    mla = ok[ok["variant"] == "mla"]
    if mla.empty or "v_head_dim" not in ok:
        return Verdict(MLA_CLAIM, NOT_MEASURED, f"no MLA decode cases (`{spec('mla').command}`)")
    timings = [c for c in ("median_s", *INTERVAL_COLUMNS) if c in ok]
    ids = ["case_id"] if "case_id" in ok else []
    twins = ok[ok["variant"].isin(["gqa", "mqa"])][MLA_KEYS + ["variant", "head_dim", *ids, *timings]]
    pairs = mla[MLA_KEYS + ["v_head_dim", *ids, *timings, "flops", "bytes", *CEILINGS]].merge(
        twins.rename(columns={"head_dim": "v_head_dim", **{c: f"twin_{c}" for c in [*ids, *timings]}}),
        on=MLA_KEYS + ["v_head_dim"])
    if pairs.empty:
        return Verdict(MLA_CLAIM, NOT_MEASURED, "no GQA/MQA decode case at MLA's Hq, context and head dim")
    pairs = pairs.assign(ratio=pairs["twin_median_s"] / pairs["median_s"])
    at_longest = pairs[pairs["seq_kv"] == pairs["seq_kv"].max()]
    per = at_longest.groupby(["variant", "backend"])["ratio"].median().unstack("variant")
    reads = _median(at_longest["pct_read_ceiling"])
    gemms = _median(at_longest["pct_gemm_ceiling"])
    nearer = "GEMM" if gemms >= reads else "read"
    bound = ("no ceilings recorded" if not (math.isfinite(reads) and math.isfinite(gemms)) else
             f"near neither ceiling (both under {NEAR:g}%; nearer the {nearer} one): overheads set the step"
             if max(reads, gemms) < NEAR else "compute-bound here" if nearer == "GEMM" else "memory-bound here")
    numbers = (f"at KV {int(at_longest['seq_kv'].max())} (Hq {int(at_longest['n_heads'].iloc[0])}), the GQA/MQA "
               "step's time over MLA's, per backend: " + "; ".join(
                   f"{b} " + ", ".join(f"{v.upper()} {x:.2f}×" for v, x in row.dropna().items())
                   for b, row in per.iterrows())
               + f". MLA's step: {_pct(reads)} of the read ceiling, {_pct(gemms)} of the GEMM ceiling: {bound}."
               + _roofline(at_longest)
               + _kernels(mla) + noisy_note(mla))
    found = [condition(f"{b} · {d} · {v.upper()} at KV {int(grp['seq_kv'].iloc[0]):,}",
                       float(grp["ratio"].median()), ratio_interval(grp, "twin_", ""), 1.0, holds_above=True,
                       pairs=pairs_of(grp, "twin_case_id"))
             for (b, d, v), grp in at_longest.groupby(["backend", "dtype", "variant"], sort=True)]
    numbers += f" Per condition (the GQA/MQA step's time over MLA's; at least 1× holds): {listing(found)}."
    detail = tuple(pairs[MLA_KEYS + ["variant", "ratio"]].to_dict("records"))
    on = judged(span(at_longest["seq_kv"], "KV"), span(at_longest["n_heads"], "Hq"),
                ", ".join(sorted(at_longest["dtype"].unique())), ", ".join(sorted(at_longest["backend"].unique())))
    verdict = combine(found)
    why = undecided_why(found, 1.0, ROUNDS_DECIDE)
    if verdict in (FAILS, DEPENDS):
        worst = min(found, key=lambda c: c.ratio)
        why = (f"MLA's step is {1 / worst.ratio:.2f}× {worst.name.split(' at ')[0]}'s at worst: it reads fewer bytes "
               f"per token but does ~Hq× the FLOPs per byte, and is {bound}. " + why).strip()
    return Verdict(MLA_CLAIM, verdict, numbers, why, detail, judged_on=on, conditions=tuple(found))


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
    rows = rows.drop_duplicates("backend")
    intensity = pd.to_numeric(rows["flops"], errors="coerce") / pd.to_numeric(rows["bytes"], errors="coerce")
    ridge = intensity * pd.to_numeric(rows["pct_read_ceiling"], errors="coerce") / pd.to_numeric(
        rows["pct_gemm_ceiling"], errors="coerce")
    i, r = _median(intensity), _median(ridge)
    if not (math.isfinite(i) and math.isfinite(r) and r > 0):
        return ""
    return (f" On the roofline: {i:.3g} FLOP per byte against this machine's ridge at {r:.3g}: "
            f"{'right of the ridge (compute side)' if i >= r else 'left of the ridge (memory side)'}.")
