"""Analysis of one run's tidy frame -> plain data: best backends, headline speedups, the tutorials' claims.

Every function takes the frame of ONE run (the report splits several runs) and returns lists of dicts,
so the renderers and the tests read numbers, never matplotlib or HTML.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from bench.backends import BACKENDS
from bench.record import LATER_SHAPE_KEYS
from bench.record import SHAPE_KEYS as RECORD_SHAPE_KEYS

HOLDS, FAILS, NOT_MEASURED = "holds", "does not hold", "not measured"

# Everything that makes two cases the same shape except the backend: bench.record owns the list (shape fields
# included, so a new axis keeps its cases apart here without an edit).
SHAPE_KEYS = list(RECORD_SHAPE_KEYS)
FAMILY_KEYS = ["phase", "variant", "dtype", "mask", "pass"]

# The backends' memory trait: materialising ones build the Sq x Skv score matrix, tiled (flash-style) ones O(S).
MATERIALISING = tuple(name for name, b in BACKENDS.items() if b.memory == "materialising")
FLASH_STYLE = tuple(name for name, b in BACKENDS.items() if b.memory == "tiled")
LUNCH_TOLERANCE = 1.5  # heads are "free" when time across head counts stays within this factor
QUADRATIC_MIN, LINEAR_MAX = 1.7, 1.3  # fitted exponents that count as ~S^2 and ~S
DECODE_CLAIM = (2.0, 4.0)


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[(df["status"] == "ok") & (df["median_s"] > 0)]


def fit_exponent(x: pd.Series | np.ndarray, y: pd.Series | np.ndarray) -> float | None:
    """Slope of log y against log x (y ∝ x^k); None without two distinct positive x."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    keep = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(np.unique(x)) < 2:
        return None
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def geomean(values) -> float | None:
    values = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return float(np.exp(np.mean(np.log(values)))) if values else None


def serving_rows(df: pd.DataFrame) -> pd.Series:
    """True where a row is a serving batch (`lengths` or `page_size` set; old files have neither column).

    The dense analyses here (best backend per family, headline speedups, the tutorials' claims) leave these rows
    out: a ragged or paged batch is not a shape of a dense family; bench.report.serving reads them."""
    lengths = df["lengths"] if "lengths" in df else pd.Series(None, index=df.index)
    pages = df["page_size"] if "page_size" in df else pd.Series(None, index=df.index)
    return lengths.notna() | pages.notna()


def dense_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[~serving_rows(df)]


def family_label(phase: str, variant: str, dtype: str, mask: str, pass_: str) -> str:
    return f"{phase} · {variant.upper()} · {dtype} · {mask} · {pass_}"


def shape_label(row: pd.Series | dict) -> str:
    """A case without its backend, short enough for a table cell."""
    seq = f"S={row['seq_kv']}" if row["phase"] == "prefill" else f"Sq={row['seq_q']} KV={row['seq_kv']}"
    return (f"{row['phase']} {str(row['variant']).upper()} {row['dtype']} {row['mask']} {row['pass']} "
            f"B={row['batch']} Hq={row['n_heads']} Hkv={row['n_kv_heads']} D={row['head_dim']} {seq}")


def speedups_over(df: pd.DataFrame, baseline: str = "naive") -> pd.DataFrame:
    """One row per ok case whose shape the baseline also ran: speedup = baseline time / backend time."""
    ok = ok_rows(df)
    base = ok[ok["backend"] == baseline][SHAPE_KEYS + ["median_s"]].rename(columns={"median_s": "base_s"})
    others = ok[ok["backend"] != baseline]
    merged = others.merge(base, on=SHAPE_KEYS, how="inner")
    merged["speedup"] = merged["base_s"] / merged["median_s"]
    return merged


def best_backends(df: pd.DataFrame) -> list[dict]:
    """Per shape family: the backend fastest at the most shapes (ties: the smaller geomean time vs the best).

    Attention alone: a layer-scope timing (projections included) is not a shape of the family."""
    ok = ok_rows(dense_rows(df))
    ok = ok[ok["scope"].fillna("attention") == "attention"]
    all_vs_naive = dict(list(speedups_over(ok).groupby(FAMILY_KEYS, dropna=False)))  # once, not per family
    out = []
    for family, fam in ok.groupby(FAMILY_KEYS, dropna=False):
        keys = [k for k in SHAPE_KEYS if k not in FAMILY_KEYS]
        best_s = fam.groupby(keys, dropna=False)["median_s"].transform("min")
        rel = fam.assign(rel=fam["median_s"] / best_s)
        wins = rel[rel["rel"] == 1.0].groupby("backend").size()
        ranking = sorted(rel["backend"].unique(),
                         key=lambda b: (-int(wins.get(b, 0)), geomean(rel.loc[rel["backend"] == b, "rel"]) or math.inf))
        best = ranking[0]
        vs_naive = all_vs_naive.get(family, fam.iloc[:0].assign(speedup=[]))
        out.append({
            "family": family_label(*family), "best": best, "wins": int(wins.get(best, 0)),
            "shapes": int(fam.groupby(keys, dropna=False).ngroups),
            "runner_up": ranking[1] if len(ranking) > 1 else None,
            "speedup_vs_naive": geomean(vs_naive.loc[vs_naive["backend"] == best, "speedup"]),
        })
    return out


def headline_speedups(df: pd.DataFrame) -> list[dict]:
    """Per phase and backend: geometric-mean and largest speedup over naive across the shapes both ran.

    Phases apart: a decode step's ~1x would drag a prefill headline down. Fastest first within a phase."""
    sp = speedups_over(dense_rows(df))
    out = []
    for (phase, backend), rows in sp.groupby(["phase", "backend"]):
        top = rows.loc[rows["speedup"].idxmax()]
        out.append({"phase": phase, "backend": backend, "geomean": geomean(rows["speedup"]),
                    "max": float(top["speedup"]), "at": shape_label(top), "shapes": len(rows)})
    return sorted(out, key=lambda r: (r["phase"] != "prefill", r["phase"], -r["geomean"]))


def _noisy_note(rows: pd.DataFrame) -> str:
    """Timed claims say how many of their timings the engine flagged noisy: a verdict is only as good as those."""
    noisy = int(rows["noisy"].fillna(False).sum())
    return f" {noisy} of {len(rows)} timings behind this are flagged noisy." if noisy else ""


def _claim(claim: str, verdict: str, numbers: str, detail: list[dict] | None = None) -> dict:
    return {"claim": claim, "verdict": verdict, "numbers": numbers, "detail": detail or []}


def heads_free_lunch(df: pd.DataFrame) -> dict:
    """At fixed d_model, FLOPs do not depend on the head count; does the time not either?"""
    claim = "Heads are a free lunch: at fixed d_model, more heads cost about the same time"
    ok = ok_rows(df)
    ok = ok[(ok["phase"] == "prefill") & (ok["variant"] == "mha")]
    keys = ["backend", "dtype", "mask", "pass", "batch", "d_model", "seq_kv", *LATER_SHAPE_KEYS]
    detail, used = [], []
    for key, grp in ok.groupby(keys, dropna=False):
        if grp["n_heads"].nunique() < 3:  # a sweep, not two configurations that happen to share d_model
            continue
        grp = grp.sort_values("n_heads")
        used.append(grp)
        detail.append({**dict(zip(keys, key, strict=True)), "heads": [int(h) for h in grp["n_heads"]],
                       "spread": float(grp["median_s"].max() / grp["median_s"].min()),
                       "most_vs_fewest": float(grp["median_s"].iloc[-1] / grp["median_s"].iloc[0])})
    if not detail:
        return _claim(claim, NOT_MEASURED, "no heads sweep at fixed d_model (run the 'heads' profile)")
    spreads = pd.DataFrame(detail)
    median = float(spreads["spread"].median())
    worst = spreads.loc[spreads["spread"].idxmax()]
    per_backend = spreads.groupby("backend")["spread"].median().sort_values()
    heads = sorted({h for d in detail for h in d["heads"]})
    numbers = (f"d_model {', '.join(str(int(d)) for d in sorted(spreads['d_model'].unique()))}, "
               f"Hq {heads[0]}–{heads[-1]}: slowest/fastest head count {median:.2f}× (median of {len(detail)} "
               f"backend × length groups; free if ≤ {LUNCH_TOLERANCE}×); per backend: "
               + ", ".join(f"{b} {v:.2f}×" for b, v in per_backend.items())
               + f"; worst {worst['backend']} at S={int(worst['seq_kv'])} {worst['spread']:.2f}×. "
               "FLOPs are equal at every head count by construction." + _noisy_note(pd.concat(used)))
    return _claim(claim, HOLDS if median <= LUNCH_TOLERANCE else FAILS, numbers, detail)


def memory_scaling(df: pd.DataFrame) -> dict:
    """Fit peak memory ∝ S^k per backend over prefill lengths: ~2 for the score matrix, ~1 for flash-style."""
    claim = "The naive score matrix costs O(S²) memory; flash-style kernels cost O(S)"
    ok = ok_rows(df)
    ok = ok[(ok["phase"] == "prefill") & (ok["peak_mem_bytes"].astype("float64") > 0)]
    keys = ["backend", "variant", "dtype", "batch", "n_heads", "n_kv_heads", "head_dim", "mask", "pass",
            *LATER_SHAPE_KEYS]
    detail = []
    for key, grp in ok.groupby(keys, dropna=False):
        seqs = grp["seq_kv"].astype("float64")
        if seqs.nunique() < 2 or seqs.max() / seqs.min() < 4:  # too short a range to tell S from S^2
            continue
        detail.append({**dict(zip(keys, key, strict=True)), "points": len(grp), "seq_min": int(seqs.min()),
                       "seq_max": int(seqs.max()),
                       "exponent": fit_exponent(seqs, grp["peak_mem_bytes"].astype("float64"))})
    if not detail:
        return _claim(claim, NOT_MEASURED, "no backend has measured peak memory over a ≥4× range of lengths")
    per_backend = pd.DataFrame(detail).groupby("backend")["exponent"].median()
    quad = {b: e for b, e in per_backend.items() if b in MATERIALISING}
    lin = {b: e for b, e in per_backend.items() if b in FLASH_STYLE}
    other = {b: e for b, e in per_backend.items() if b not in MATERIALISING + FLASH_STYLE}

    def show(group: dict) -> str:
        return ", ".join(f"{b} S^{e:.2f}" for b, e in group.items()) or "not measured"

    numbers = (f"peak memory ∝ S^k fitted per shape (median per backend): score-matrix backends {show(quad)}; "
               f"flash-style {show(lin)}" + (f"; others {show(other)}" if other else "")
               + f". O(S²) means k ≥ {QUADRATIC_MIN}, O(S) means k ≤ {LINEAR_MAX}.")
    if not quad and not lin:
        return _claim(claim, NOT_MEASURED, numbers, detail)
    holds = all(e >= QUADRATIC_MIN for e in quad.values()) and all(e <= LINEAR_MAX for e in lin.values())
    if not (quad and lin):
        numbers += " Only one side measured."
    return _claim(claim, HOLDS if holds else FAILS, numbers, detail)


def kv_cache_shrink(df: pd.DataFrame, kv_measured: list[dict] | None = None) -> dict:
    """Hq/Hkv from KV caches really allocated and measured at the run's start (each preset as MHA, its own grouping
    and MQA: RunMeta.kv_measured), not from the formula on both sides, which could not fail."""
    claim = "GQA/MQA shrink the KV cache by Hq/Hkv"
    if not kv_measured:
        return _claim(claim, NOT_MEASURED, "this run measured no KV cache allocations (runs of attnbench from "
                      "before they were measured); run any profile again")
    detail = []
    by_model: dict[str, dict[str, dict]] = {}
    for m in kv_measured:
        by_model.setdefault(str(m.get("model")), {})[str(m.get("variant"))] = m
    for model, variants in by_model.items():
        mha = variants.get("mha")
        if not mha or not mha.get("bytes"):
            continue
        for variant, m in variants.items():
            if variant == "mha" or not m.get("bytes"):
                continue
            detail.append({"source": "measured", "what": f"{model} {variant.upper()}",
                           "ratio": mha["bytes"] / m["bytes"], "expected": m["n_heads"] / m["n_kv_heads"],
                           "method": m.get("method"), "mha_bytes": mha["bytes"], "bytes": m["bytes"]})
    if not detail:
        return _claim(claim, NOT_MEASURED, "no preset was measured both as MHA and as GQA/MQA")
    exact = [d for d in detail if math.isclose(d["ratio"], d["expected"], rel_tol=0.01)]
    worst = max(detail, key=lambda d: abs(math.log(d["ratio"] / d["expected"])))
    method = detail[0]["method"]
    numbers = (f"caches allocated for {kv_measured[0].get('context')} tokens and measured ({method}): "
               f"{len(exact)} of {len(detail)} GQA/MQA caches are their MHA twin ÷ Hq/Hkv within 1% ("
               + ", ".join(f"{d['what']} {d['ratio']:.3g}× of {d['expected']:g}×" for d in detail[:6])
               + (", …" if len(detail) > 6 else "") + f"); furthest: {worst['what']} {worst['ratio']:.3g}× "
               f"against {worst['expected']:g}×.")
    return _claim(claim, HOLDS if len(exact) == len(detail) else FAILS, numbers, detail)


def decode_speedup(df: pd.DataFrame) -> dict:
    """Decode time of MHA / GQA and MHA / MQA at equal Hq, per backend and KV length."""
    claim = "GQA/MQA speed up decoding 2–4×"
    ok = ok_rows(df)
    ok = ok[ok["phase"] == "decode"]
    keys = ["backend", "dtype", "batch", "n_heads", "head_dim", "seq_q", "seq_kv", "mask", "pass", *LATER_SHAPE_KEYS]
    # each GQA/MQA case beside the MHA case of its shape (one merge, not a loop over shapes: 10k-case runs)
    mha = ok[ok["variant"] == "mha"].drop_duplicates(keys)[keys + ["median_s"]].rename(columns={"median_s": "mha_s"})
    sp = ok[ok["variant"] != "mha"].merge(mha, on=keys, how="inner").sort_values(keys, kind="stable")
    if sp.empty:
        return _claim(claim, NOT_MEASURED, "no decode cases with MHA and GQA/MQA at equal Hq")
    sp = sp.assign(speedup=sp["mha_s"] / sp["median_s"], group_size=sp["group_size"].astype(int))
    sp = sp[keys + ["variant", "group_size", "speedup"]].reset_index(drop=True)
    detail = [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
              for row in sp.to_dict("records")]
    longest = sp.groupby(["backend", "dtype", "batch", "n_heads", "head_dim", "seq_q"], dropna=False)["seq_kv"]
    at_longest = sp[sp["seq_kv"] == longest.transform("max")]
    median = float(at_longest["speedup"].median())
    by_len = sp.groupby(["seq_kv", "variant"])["speedup"].median().unstack("variant")
    per_len = "; ".join(f"KV {int(s)}: " + ", ".join(f"{v.upper()} {x:.2f}×" for v, x in row.dropna().items())
                        for s, row in by_len.iterrows())
    per_variant = at_longest.groupby("variant").agg(speedup=("speedup", "median"), group=("group_size", "max"))
    numbers = (f"at the longest KV length: median {median:.2f}× ("
               + ", ".join(f"{v.upper()} (Hq/Hkv up to {int(r['group'])}) {r['speedup']:.2f}×"
                           for v, r in per_variant.iterrows())
               + f"); median over backends per KV length: {per_len}")
    low, high = DECODE_CLAIM
    if median > high:
        numbers += f" (more than the claimed {high:g}×)"
    numbers += "." + _noisy_note(ok)
    return _claim(claim, HOLDS if median >= low else FAILS, numbers, detail)


CLAIMS = (heads_free_lunch, memory_scaling, kv_cache_shrink, decode_speedup)


def evaluate_claims(df: pd.DataFrame, kv_measured: list[dict] | None = None) -> list[dict]:
    """Every claim's verdict on one run; kv_measured is the run's measured KV caches (RunInfo.kv_measured)."""
    from bench.report.layer_share import attention_dominates  # they build on this module's verdict words
    from bench.report.serving import paging_cost

    dense = dense_rows(df)
    verdicts = [check(dense, kv_measured) if check is kv_cache_shrink else check(dense) for check in CLAIMS]
    return verdicts + [attention_dominates(df), paging_cost(df)]
