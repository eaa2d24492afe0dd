"""Claim: cascade attention decodes a shared-prefix batch faster than plain attention from some prefix length and
batch (`cascade`).

A shared-prefix case (bench.kinds.prefix) is B requests sharing P prefix tokens, each with L of its own. Its plain
twins are the dense backends' cases of the same shape (batch, heads, head dim, dtype, mask, seq_q, seq_kv, prefix);
the best plain step at a shape is the fastest twin the run measured there. A line is one cascade backend at one
dtype, head geometry, suffix and seq_q, over its (P, B) points.

- cascade: each (P, B) point of a line is a condition: the cascade step's time over the best plain step's, with a
  95% interval (each time drawn within its own CI, bench.analysis.interval). A point holds where the whole interval is
  ≤ CASCADE_BEATS (the cascade is faster there), does not hold where it is wholly above it (level with plain
  attention while its interval starts below CASCADE_LOSES, slower from there: either way not faster, decided), and
  is inconclusive only where the interval straddles CASCADE_BEATS. The claim's word
  is bench.analysis.conditions' rule over the points: holds where the cascade wins at every point, does not hold where
  it wins at none, and depends otherwise, when the region where it wins is the finding: per batch B, P*(B) = the
  shortest prefix from which every longer measured prefix wins at that B. Published beside it: FlashInfer's figure
  (FLASHINFER_PUBLISHED).
The question funds, per line, its cheapest points at ≥ MIN_PREFIXES prefixes spanning ≥ PREFIX_SPAN× and ≥ 2
batches spanning ≥ BATCH_SPAN×, with every plain twin the run offers at each point.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace
from typing import TYPE_CHECKING

from bench.analysis.conditions import Condition, combine, condition, undecided_why
from bench.analysis.verdict import FAILS, HOLDS, NOT_MEASURED, Series, Verdict, judged, noisy_count, noisy_note, span
from bench.backends import BACKENDS
from bench.claims.question import Context, Question, case_key, runs_here
from bench.claims.spec import ClaimSpec
from bench.problem.case import Case
from bench.results.meta import RunMeta

if TYPE_CHECKING:
    import pandas as pd


CASCADE_BEATS, CASCADE_LOSES = 0.95, 1.05  # a cascade step's time over the best plain step's: wins / loses
MIN_PREFIXES, PREFIX_SPAN, BATCH_SPAN = 2, 4, 4  # the least grid: prefixes spanning 4x, batches spanning 4x
FLASHINFER_PUBLISHED = ("FlashInfer's cascade inference (its blog, 2024): up to 31× faster than vLLM's PagedAttention "
                        "at a 32,768-token shared prefix, batch ≥ 128 and suffix ≤ 256, on an H100 with LLaMA-2-7B's "
                        "attention (32 heads, head dim 128, pages of 16)")

# the least that answers the claim (`--profile prefix` measures more prefixes, batches, suffixes and dtypes): a
# geometry of 8 query heads over 2 KV heads at D 64, fp32 decode, torch's fused CPU kernel plain and by cascade
CASCADE = {"backend": "sdpa-flash,cascade-sdpa", "heads": "8", "kv-heads": "2", "head-dim": "64", "dtype": "fp32",
           "mask": "causal", "phase": "decode", "decode-q": "1", "prefix": "1024,4096", "suffix": "128",
           "batch": "1,16"}
SPECS = (ClaimSpec("cascade", "Cascade attention decodes a shared-prefix batch faster than plain attention from some "
                   "prefix length and batch", "bench.claims.cascade:cascade_wins", "cascade", CASCADE,
                   ratio="cascade / best plain step", figures=("prefix_decode",)),)
CLAIM = SPECS[0].text
TWIN_FIELDS = ("batch", "n_heads", "n_kv_heads", "head_dim", "dtype", "mask", "seq_q", "seq_kv", "prefix")
LINE_FIELDS = ("backend", "dtype", "n_heads", "n_kv_heads", "head_dim", "suffix", "seq_q")
CASCADE_NAMES = frozenset(name for name, b in BACKENDS.items() if b.cascade)


# -- the question ---------------------------------------------------------------------------------------------------
def picks(c: Case) -> bool:
    """Shared-prefix decode steps, plain and by cascade."""
    return c.shape.prefix is not None and c.phase == "decode" and c.pass_ == "fwd"


def _cut(values: list[int], many: int, span: int) -> int | None:
    """The shortest prefix of sorted `values` holding >= `many` of them spanning >= `span`x: its last value."""
    return next((values[n - 1] for n in range(many, len(values) + 1) if values[n - 1] >= span * values[0]), None)


def least(cases: list[Case], ctx: Context) -> list[Case]:
    """The cheapest line's points at its shortest prefixes (module docstring) and its smallest and largest batches
    spanning BATCH_SPAN x, with every plain twin at each point."""
    plain: dict[tuple, list[Case]] = defaultdict(list)
    lines: dict[tuple, list[Case]] = defaultdict(list)
    for c in cases:
        if runs_here(c, ctx):
            key = case_key(c, LINE_FIELDS if c.backend in CASCADE_NAMES else TWIN_FIELDS)
            (lines if c.backend in CASCADE_NAMES else plain)[key].append(c)
    best: tuple[float, list[Case]] | None = None
    for line in lines.values():
        line = [c for c in line if plain.get(case_key(c, TWIN_FIELDS))]
        prefixes = sorted({c.shape.prefix for c in line})
        batches = sorted({c.shape.batch for c in line})
        cut = _cut(prefixes, MIN_PREFIXES, PREFIX_SPAN)
        big = next((b for b in batches if b >= BATCH_SPAN * batches[0]), None) if batches else None
        if cut is None or big is None:
            continue
        chosen = [c for c in line if c.shape.prefix <= cut and c.shape.batch in (batches[0], big)]
        chosen += [t for c in chosen for t in plain[case_key(c, TWIN_FIELDS)] if t not in chosen]
        if best is None or ctx.cost(chosen) < best[0]:
            best = (ctx.cost(chosen), chosen)
    return best[1] if best else []


QUESTIONS = (Question("cascade", picks, least),)


# -- the frame ------------------------------------------------------------------------------------------------------
def cascade_pairs(df: pd.DataFrame, phase: str = "decode") -> pd.DataFrame:
    """Each measured cascade row of `phase` beside the best plain call at its shape: plain_backend, plain_case_id and
    plain_median_s / _ci_low_s / _ci_high_s, and its suffix; cascade rows with no plain twin are left out."""
    import pandas as pd

    if df.empty or "prefix" not in df:
        return pd.DataFrame()
    ok = df[(df["status"] == "ok") & df["median_s"].notna() & df["prefix"].notna() & (df["phase"] == phase)
            & (df["pass"] == "fwd")]
    is_cascade = ok["backend"].isin(CASCADE_NAMES)
    plain, cascade = ok[~is_cascade], ok[is_cascade]
    if plain.empty or cascade.empty:
        return pd.DataFrame()
    keys = list(TWIN_FIELDS)
    best = plain.loc[plain.groupby(keys, dropna=False)["median_s"].idxmin()]
    best = best[keys + ["backend", "case_id", "median_s", "ci_low_s", "ci_high_s"]].rename(columns={
        "backend": "plain_backend", "case_id": "plain_case_id", "median_s": "plain_median_s",
        "ci_low_s": "plain_ci_low_s", "ci_high_s": "plain_ci_high_s"})
    out = cascade.merge(best, on=keys, how="inner")
    return out.assign(suffix=(out["seq_kv"] - out["prefix"]).astype(int), prefix=out["prefix"].astype(int),
                      batch=out["batch"].astype(int))


def region(points: list[tuple[int, int, str]]) -> dict[int, int | None]:
    """Per batch, P*(B): the shortest prefix from which the cascade wins (holds) at that and every longer measured
    prefix at B; None where it does not win at the longest. points: (prefix, batch, verdict)."""

    out: dict[int, int | None] = {}
    for batch in sorted({b for _, b, _ in points}):
        found = None
        for prefix, _, verdict in sorted((p for p in points if p[1] == batch), reverse=True):
            if verdict != HOLDS:
                break
            found = prefix
        out[batch] = found
    return out


def points(rows: pd.DataFrame) -> list[tuple[Condition, dict]]:
    """Each (P, B) point of every line judged (module docstring), with its detail."""

    from bench.analysis.interval import ratio_interval

    out = []
    for key, line in rows.groupby(list(LINE_FIELDS), sort=True):
        backend, dtype, hq, hkv, d, suffix, sq = key
        for _, r in line.sort_values(["batch", "prefix"]).iterrows():
            one = line.loc[[r.name]]
            low, high = ratio_interval(one, "", "plain_")
            ratio = float(r["median_s"]) / float(r["plain_median_s"])
            key = {"backend": backend, "against": str(r["plain_backend"]), "dtype": dtype, "n_heads": int(hq),
                   "n_kv_heads": int(hkv), "head_dim": int(d), "suffix": int(suffix),
                   **({"seq_q": int(sq)} if int(sq) > 1 else {}), "prefix": int(r["prefix"]), "batch": int(r["batch"])}
            # at its bound (about 5% faster, within the band) is not clearly faster: its bound is a margin to clear
            c = condition(key, ratio, (low, high), CASCADE_BEATS, holds_above=False,
                          pairs=[(r["case_id"], r["plain_case_id"])], at_bound_means=FAILS)
            # level (not faster, not slower) is decided as much as a loss: the claim asks where the cascade is faster
            if c.verdict == FAILS and low < CASCADE_LOSES:
                c = replace(c, why=f"level with plain attention ({low:.2f}–{high:.2f}×, from {CASCADE_BEATS:g}×)")
            out.append((c, {"line": f"{backend} · {dtype} · Hq {hq}/Hkv {hkv} D {d} · L {suffix} · Sq {sq}",
                            "backend": backend, "plain_backend": str(r["plain_backend"]), "dtype": dtype,
                            "prefix": int(r["prefix"]), "batch": int(r["batch"]), "suffix": int(suffix),
                            "ratio": ratio, "low": low, "high": high, "verdict": c.verdict}))
    return out


# -- the judge ------------------------------------------------------------------------------------------------------
def cascade_wins(df: pd.DataFrame, run: RunMeta | None = None) -> Verdict:
    """Per condition — a (P, B) point of a cascade line — the cascade step's time over the best plain step's with a
    95% interval: holds when the whole interval is ≤ CASCADE_BEATS, does not hold when it is wholly ≥ CASCADE_LOSES,
    else inconclusive; the region P*(B) where it wins is reported beside FlashInfer's published figure."""

    rows = cascade_pairs(df)
    found = points(rows) if not rows.empty else []
    if not found:
        return Verdict(CLAIM, NOT_MEASURED, f"no cascade decode step beside a plain step of its shape "
                       f"(`{SPECS[0].command}`)")
    said, stars_at = [], []
    for line in dict.fromkeys(d["line"] for _, d in found):
        these = [(c, d) for c, d in found if d["line"] == line]
        stars = region([(d["prefix"], d["batch"], c.verdict) for c, d in these])
        line_key = {k: v for k, v in these[0][0].key if k not in ("prefix", "batch", "against")}
        stars_at += [({**line_key, "batch": b}, p if p else math.nan) for b, p in stars.items()]
        wins = ", ".join(f"B {b}: " + (f"P ≥ {p:,}" if p else "nowhere") for b, p in stars.items())
        top = min(these, key=lambda cd: cd[1]["ratio"])[1]
        said.append(f"{line}: wins (≤ {CASCADE_BEATS:g}×) at {wins}; its best point {1 / top['ratio']:.1f}× faster "
                    f"(P {top['prefix']:,}, B {top['batch']}, against {top['plain_backend']})")
    conds = [c for c, d in found]
    lost = [c.name for c, d in found if c.verdict == FAILS and d["low"] >= CASCADE_LOSES]
    level = [c.name for c, d in found if c.verdict == FAILS and d["low"] < CASCADE_LOSES]
    why = " ".join(p for p in ((f"{'; '.join(lost)}: at least {CASCADE_LOSES:g}× the best plain step, where reading "
                                "the prefix once saves less than the second call and the merge cost (a small "
                                "batch, or a prefix the plain kernel reads from cache)") if lost else "",
                               (f"{'; '.join(level)}: level with the best plain step (not faster by "
                                f"{1 / CASCADE_BEATS:.2f}×)") if level else "",
                               undecided_why(conds)) if p)
    numbers = (f"each cascade step's time over the best plain step's (the fastest dense backend over every "
               f"request's whole context), 95% interval from each time drawn within its CI (wins ≤ "
               f"{CASCADE_BEATS:g}×, loses ≥ {CASCADE_LOSES:g}×); P*(B) = the prefix from which it wins at every "
               "longer measured prefix: " + " · ".join(said) + f". Published: {FLASHINFER_PUBLISHED}."
               + noisy_note(rows))
    on = judged(span(rows["prefix"], "P"), span(rows["batch"], "B"), ", ".join(sorted(rows["dtype"].unique())),
                ", ".join(sorted({*rows["backend"], *rows["plain_backend"]})))
    series = Series(f"P*, the shortest prefix from which it wins (≤ {CASCADE_BEATS:g}×) at every longer measured "
                    "prefix, per batch (none: nowhere)", "tokens", tuple(stars_at))
    return Verdict(CLAIM, combine(conds), numbers, why=why, detail=tuple(d for _, d in found), judged_on=on,
                   conditions=tuple(conds), notes=f"Published: {FLASHINFER_PUBLISHED}.", noisy=noisy_count(rows),
                   series=(series,))
