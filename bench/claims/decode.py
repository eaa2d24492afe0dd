"""Claim: GQA/MQA speed up decoding 2-4×, judged per kernel family (two claims: fused kernels, and kernels that
expand K/V to Hq heads).

Question `decode` (both claims and the decode figure): for one geometry (Hq, D, batch, queries per step) of each
native dtype, MHA, GQA and MQA each at >= MIN_KV_LENGTHS KV lengths, for the textbook and the fused backend. Every
native dtype: the claims are judged per kernel x dtype x group size, and a condition only some runs reach (as depth,
when time allows) would make the verdict differ from run to run.

A kernel that expands K/V to all Hq heads (the materialising backends repeat them before the product) reads as
much as MHA whatever Hkv is; a fused kernel reads each KV head once for its group. So the two families are judged
apart, and where the claim does not hold the numbers say why: the steps' share of the read-only ceiling
(pct_read_ceiling) and of the GEMM ceiling (pct_gemm_ceiling). A step held by compute, or by costs that do not
scale with the KV bytes, gains nothing from fewer of them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace
from typing import TYPE_CHECKING

from bench.analysis.conditions import (
    MORE_ROUNDS,
    SHARE,
    TIME_RATIO,
    Condition,
    amount,
    combine,
    condition,
    decide_by,
    listing,
    not_judged,
    pairs_of,
    undecided_why,
)
from bench.analysis.traits import EXPANDING, FAMILY_NAMES, FUSED, kv_family
from bench.analysis.verdict import (
    FAILS,
    INCONCLUSIVE,
    NOT_MEASURED,
    Series,
    Verdict,
    judged,
    noisy_count,
    noisy_note,
    span,
)
from bench.backends import BACKENDS
from bench.claims.question import Context, Question, main_dtypes, plain, uncompiled, with_emulated
from bench.claims.spec import ClaimSpec
from bench.problem.case import Case
from bench.results.meta import RunMeta
from bench.results.record import LATER_SHAPE_KEYS

if TYPE_CHECKING:
    import pandas as pd


DECODE_SPEEDUP = (2.0, 4.0)  # "GQA/MQA speed up decoding 2–4×"
MIN_KV_LENGTHS = 3  # a decode speedup short of the claim is only a finding over this many KV lengths
NEAR = 50.0  # % of a ceiling from which a decode step counts as held by that ceiling
ON_CHIP = 100.0  # % of the read-only ceiling above which a KV cache is served from on-chip caches, not memory

DECODE = {"backend": "naive,sdpa", "kv-heads": "8,2,1", "dtype": "fp32", "mask": "causal", "phase": "decode",
          "decode-kv": "1024,4096,16384"}
_SAYS = f"GQA/MQA speed up decoding {DECODE_SPEEDUP[0]:g}–{DECODE_SPEEDUP[1]:g}×"
SPECS = (ClaimSpec("fused-decode", f"{_SAYS} (fused kernels)", "bench.claims.decode:fused_decode_speedup", "decode",
                   DECODE, ratio="MHA step / GQA-MQA step", figures=("decode",)),
         ClaimSpec("expanding-decode", f"{_SAYS} (kernels that expand K/V to Hq heads)",
                   "bench.claims.decode:expanding_decode_speedup", "decode", DECODE, ratio="MHA step / GQA-MQA step",
                   figures=("decode",)))

KEYS = ["backend", "dtype", "batch", "n_heads", "head_dim", "seq_q", "seq_kv", "mask", "pass"]  # + LATER_SHAPE_KEYS
CEILINGS = ["pct_read_ceiling", "pct_gemm_ceiling"]
MODE = ["timing_mode", "partly_warm"]  # how the MHA twin was timed: a cold step cannot have its cache on-chip
INTERVAL_COLUMNS = ("ci_low_s", "ci_high_s")


# -- the question ---------------------------------------------------------------------------------------------------
def picks(c: Case) -> bool:
    """A plain decode step (MLA's are the mla question's)."""
    return plain(c) and c.phase == "decode" and c.shape.mla is None


def least(cases: list[Case], ctx: Context) -> list[Case]:
    """For one geometry (Hq, D, batch, queries per step) of each native dtype: MHA, GQA and MQA each at
    >= MIN_KV_LENGTHS KV lengths, for the textbook backend, the fused kernel and every other kernel that runs them
    without compiling: each kernel is a condition of the decode claims, so each is in every run that answers them."""
    groups: dict[tuple, list[Case]] = defaultdict(list)
    for c in cases:
        s = c.shape
        groups[(s.dtype, s.batch, s.n_heads, s.head_dim, s.seq_q, s.mask.label)].append(c)

    def answers(group: list[Case]) -> bool:
        by_variant: dict[str, set[int]] = defaultdict(set)
        for c in group:
            by_variant[c.shape.variant].add(c.shape.seq_kv)
        return "mha" in by_variant and len(by_variant) >= 2 and all(
            len(kv) >= MIN_KV_LENGTHS for kv in by_variant.values())

    good = {k: g for k, g in groups.items() if answers(g)}
    chosen: list[Case] = []
    for dtype in main_dtypes([c for g in good.values() for c in g], ctx):
        mine = {k: g for k, g in good.items() if k[0] == dtype}
        if not mine:
            continue
        key = min(mine, key=lambda k: (k[4], ctx.cost(mine[k])))  # one query per step first
        backends = uncompiled(mine[key], ctx, lambda c: c.shape.seq_kv * 1000 + c.shape.n_kv_heads)
        chosen += [c for c in mine[key] if c.backend in backends]
    return with_emulated(chosen, cases, ctx)


QUESTIONS = (Question("decode", picks, least, "the decode figure"),)


# -- the judges -----------------------------------------------------------------------------------------------------
def decode_pairs(df: pd.DataFrame) -> pd.DataFrame:
    """Each ok GQA/MQA decode case beside the MHA case of its shape (equal Hq): speedup = MHA time / its time.

    Adds `family` (EXPANDING / FUSED by the backend's memory trait) and the MHA twin's ceilings as mha_pct_*.
    One merge, not a loop over shapes: runs have 10k cases."""
    from bench.analysis.frames import dense_rows, ok_rows

    keys = [*KEYS, *LATER_SHAPE_KEYS]
    ok = ok_rows(dense_rows(df))
    ok = ok[ok["phase"] == "decode"]
    timings = [c for c in ("median_s", *INTERVAL_COLUMNS) if c in ok]
    ids = ["case_id"] if "case_id" in ok else []  # a frame built by hand may have none: no pairs to re-measure
    mode = [c for c in MODE if c in ok]
    mha = ok[ok["variant"] == "mha"].drop_duplicates(keys)[keys + ids + timings + CEILINGS + mode]
    mha = mha.rename(columns={c: f"mha_{c}" for c in ids + timings + CEILINGS + mode}).assign(
        mha_s=lambda d: d["mha_median_s"])
    sp = ok[ok["variant"] != "mha"].merge(mha, on=keys, how="inner").sort_values(keys, kind="stable")
    return sp.assign(speedup=sp["mha_s"] / sp["median_s"], group_size=sp["group_size"].astype(int),
                     family=sp["backend"].map(kv_family)).reset_index(drop=True)


def median_of(values: pd.Series) -> float:
    """The median of a column that may be missing in places (NaN when nothing was recorded)."""
    import pandas as pd

    return float(pd.to_numeric(values, errors="coerce").astype("float64").median())


def _why(family: str, at_longest: pd.DataFrame) -> str:
    """The reason the numbers give for a speedup below the claim's, from the ceilings at the longest KV length."""
    # each step's shares of the two ceilings (the records give percentages)
    mr, mg, gr, gg = (median_of(at_longest[c]) / 100 for c in ("mha_pct_read_ceiling", "mha_pct_gemm_ceiling",
                                                                 *CEILINGS))
    known = all(math.isfinite(v) for v in (mr, mg, gr, gg))
    ceilings = (f"At the longest KV length the MHA step runs at {amount(mr, SHARE)} of the read-only ceiling and "
                f"{amount(mg, SHARE)} of the GEMM ceiling, the GQA/MQA steps at {amount(gr, SHARE)} and "
                f"{amount(gg, SHARE)}. ") if known else ""
    if family == EXPANDING:
        return (ceilings + "These kernels expand K/V to all Hq heads before the product, so a GQA/MQA step reads and "
                "computes as much as MHA, plus the copy: fewer KV heads in the cache cannot make them faster.")
    if not known:
        return "The run recorded no ceilings (pct_read_ceiling, pct_gemm_ceiling) to tell what holds the step."
    if gg >= gr:
        reason = ("Nearer the GEMM ceiling than the read ceiling: compute-bound here, and the FLOPs are the same at "
                  "every Hkv, so fewer KV bytes gain nothing.")
    elif gr < NEAR / 100:
        reason = (f"Near neither ceiling (both under {NEAR:g}%): costs that do not scale with the KV bytes (launch, "
                  "dispatch, the Hq heads' own work) set the step's time, so fewer KV bytes buy little.")
    else:
        reason = "Bandwidth-bound, yet the fewer KV bytes did not shorten the step as much as they shrank."
    if mr > 1:
        reason += (" The MHA step reads faster than the read-only ceiling: its KV cache is served from on-chip "
                   "caches, so there is little memory traffic for GQA/MQA to save.")
    return ceilings + reason


def warm_mha(rows: pd.DataFrame) -> bool:
    """Whether any MHA twin was timed with its cache warm: a warm headline (a file from before cold CPU timing, or
    --cold-multiple 0) or a rotation its copies fell short of. A cold one read its cache from memory by design."""
    modes = rows.get("mha_timing_mode")
    short = rows.get("mha_partly_warm")
    return (modes is None or bool((modes.fillna("warm") != "cold").any())
            or (short is not None and bool(short.fillna(False).astype(bool).any())))


def _condition(family: str, key: tuple, rows: pd.DataFrame, lengths: list[int]) -> Condition:
    """One condition (backend × dtype × GQA/MQA group size) at its longest KV length, judged on its own timings:
    holds when its interval clears the claim's 2×; a shortfall is a finding only over MIN_KV_LENGTHS lengths and,
    for a fused kernel, only where the MHA step's cache is not served from on-chip caches."""

    from bench.analysis.interval import ratio_interval

    backend, dtype, variant, group = key
    kv = int(rows["seq_kv"].iloc[0])
    fields = {"backend": backend, "dtype": dtype, "variant": variant.upper(), "group_size": int(group), "seq_kv": kv}
    found = condition(fields, float(rows["speedup"].median()), ratio_interval(rows, "mha_", ""), DECODE_SPEEDUP[0],
                      holds_above=True, pairs=pairs_of(rows, "mha_case_id"),
                      facts={"kv_lengths": len(lengths), "claimed_up_to": DECODE_SPEEDUP[1]})
    if found.verdict != FAILS:
        return found
    if len(lengths) < MIN_KV_LENGTHS:
        return replace(found, verdict=INCONCLUSIVE, why=f"short of the claim at KV {', '.join(map(str, lengths))} "
                       f"only: a shortfall is a finding over ≥ {MIN_KV_LENGTHS} KV lengths (--decode-kv)")
    mha_read = median_of(rows["mha_pct_read_ceiling"])
    if family == FUSED and math.isfinite(mha_read) and mha_read > ON_CHIP and warm_mha(rows):
        # the MHA step read its cache faster than memory can deliver: it sat in on-chip caches, where fewer KV
        # bytes save no memory traffic; only a cache that spills to memory can decide this condition
        return replace(found, verdict=INCONCLUSIVE, why=f"the MHA step reads at {mha_read:.0f}% of the read-only "
                       f"ceiling (its cache on-chip): --decode-kv {4 * kv},{16 * kv} decides it")
    return found


def _judge(df: pd.DataFrame, family: str) -> Verdict:
    """Per condition — backend × dtype × GQA/MQA group size, at that condition's longest KV length — the MHA step's
    time over the GQA/MQA step's, its 95% interval from those cases' own timings, and its word against 2×; the
    claim's word is bench.analysis.conditions' rule over them (holds, does not hold, depends, inconclusive). Where
    some conditions were measured at MIN_KV_LENGTHS lengths or more, the others are listed but not judged, and so
    are a compiling kernel's beside a kernel measured whole that does not compile (_budget_reached)."""
    import pandas as pd

    from bench.analysis.frames import dense_rows, ok_rows

    claim = next(s for s in SPECS if s.key == f"{family}-decode")
    pairs = decode_pairs(df)
    sp = pairs[pairs["family"] == family]
    if sp.empty:
        return Verdict(claim.text, NOT_MEASURED, f"no decode cases of {FAMILY_NAMES[family]} with MHA and GQA/MQA "
                                                 f"at equal Hq (`{claim.command}`)")
    detail = [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
              for row in sp[[*KEYS, *LATER_SHAPE_KEYS, "variant", "group_size", "speedup"]].to_dict("records")]
    judged_rows, left = [], []  # (condition, its rows at its longest KV length); why a condition is left unjudged
    for key, grp in sp.groupby(["backend", "dtype", "variant", "group_size"], sort=True):
        at = grp[grp["seq_kv"] == grp["seq_kv"].max()]
        lengths = sorted(int(k) for k in grp["seq_kv"].unique())
        judged_rows.append((_condition(family, key, at, lengths), at))
        left.append("" if len(lengths) >= MIN_KV_LENGTHS else f"measured at fewer than {MIN_KV_LENGTHS} KV lengths")
    left = _budget_reached(judged_rows, left)
    if not all(left):  # judged on the conditions every run measures whole (the plan's least set); which others a
        # time budget reached varies from run to run, and a verdict should not
        shown = [(c, why) for (c, _), why in zip(judged_rows, left, strict=True) if why]
        judged_rows = [jr for jr, why in zip(judged_rows, left, strict=True) if not why]
    else:
        shown = []
    found = [c for c, _ in judged_rows]
    by_len = sp.groupby(["seq_kv", "variant"])["speedup"].median().unstack("variant")
    per_len = "; ".join(f"KV {int(s)}: " + ", ".join(f"{v.upper()} {x:.2f}×" for v, x in row.dropna().items())
                        for s, row in by_len.iterrows())
    medians = Series("median MHA step / GQA-MQA step over the conditions, per KV length", TIME_RATIO,
                     tuple(({"variant": str(v).upper(), "seq_kv": int(s)}, float(x))
                           for s, row in by_len.iterrows() for v, x in row.dropna().items()))
    low, high = DECODE_SPEEDUP
    numbers = (f"MHA step over the GQA/MQA step, per condition at its longest KV length: {listing(found)}; "
               f"median over conditions per KV length: {per_len}")
    if shown:
        numbers += "; not judged: " + "; ".join(f"{c.name} {c.ratio:.2f}× ({why})" for c, why in shown)
    notes = f"Some conditions are above the claimed {high:g}×." if max(c.ratio for c in found) > high else ""
    if notes:
        numbers += f" (some above the claimed {high:g}×)"
    ok = ok_rows(dense_rows(df))
    timed = ok[(ok["phase"] == "decode") & (ok["backend"].map(kv_family) == family)]
    numbers += "." + noisy_note(timed)
    verdict = combine(found)
    on = judged(span(sp["seq_kv"], "KV"), span(sp["n_heads"], "Hq"), ", ".join(sorted(sp["dtype"].unique())),
                ", ".join(sorted(sp["backend"].unique())))
    why = undecided_why(found, decide_by(MORE_ROUNDS, "more KV lengths (--decode-kv)"))
    failing = [rows for c, rows in judged_rows if c.verdict == FAILS]
    if failing:  # the ceilings of the failing conditions say why they fall short
        why = (_why(family, pd.concat(failing)) + (" " + why if why else "")).strip()
    # listed beside the judged ones, not judged: which a time budget reaches varies from run to run
    unjudged = [not_judged(c.key, c.ratio, (c.low, c.high), c.bound, c.holds_above, why, pairs=c.pairs,
                           facts=c.facts) for c, why in shown]
    return Verdict(claim.text, verdict, numbers, why, tuple(detail), judged_on=on,
                   conditions=tuple(found + unjudged), notes=notes, noisy=noisy_count(timed), series=(medians,))


def _budget_reached(judged_rows: list[tuple[Condition, pd.DataFrame]], left: list[str]) -> list[str]:
    """`left` with the conditions of kernels that compile added, where a kernel that does not compile was measured
    whole: the plan's least set funds such kernels only when no other runs (bench.claims.question.uncompiled), so
    whether a run reached theirs is its time budget's doing."""
    compiles = [BACKENDS[dict(c.key)["backend"]].compiles for c, _ in judged_rows]
    if all(why or comp for why, comp in zip(left, compiles, strict=True)):
        return left
    return [why or ("a kernel that compiles, measured as time allowed" if comp else "")
            for why, comp in zip(left, compiles, strict=True)]


def fused_decode_speedup(df: pd.DataFrame, run: RunMeta | None = None) -> Verdict:
    """Fused (tiled) kernels read each KV head once: the family the tutorials' claim is about."""

    return _judge(df, FUSED)


def expanding_decode_speedup(df: pd.DataFrame, run: RunMeta | None = None) -> Verdict:
    """Materialising kernels repeat K/V to Hq heads: the claim is not expected to hold for them."""

    return _judge(df, EXPANDING)
