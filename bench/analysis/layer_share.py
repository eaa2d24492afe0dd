"""Attention's share of the whole layer (W_Q, W_K, W_V, attention, W_O) as S grows: tidy frame -> plain data.

A run with `--scope attention,layer` times every prefill shape twice: the attention call alone and the layer
around it (bench.kinds.mha_layer). The share of one shape is attention's median over the layer's, both from the same
run, backend, dtype and pass. The tutorials say attention dominates at long S (its cost grows as S², the
projections' as S); the layer claim's judge (bench.claims.layer.attention_dominates) says from which S that holds
on this machine, from the shares and intervals here. Like the claims, attention_share takes the frame of ONE run.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from bench.analysis.frames import shape_keys_but
from bench.analysis.interval import SEED, drawn, median_over
from bench.analysis.load import INT_COLUMNS

# What pairs an attention-alone case with its layer twin: the backend and every shape field but the scope (the one
# thing this analysis varies), so cases that differ in any other field, one added later included, stay apart.
VARIED = ("scope",)
SHARE_KEYS = ["backend", *shape_keys_but(*VARIED)]
# A geometry: one shape measured over lengths (seq_q = seq_kv = seq in prefill), by one or more backends.
GEOMETRY_KEYS = [k for k in SHARE_KEYS if k not in ("backend", "seq_q", "seq_kv")]
INT_KEYS = (*INT_COLUMNS, "seq")


def _timed(df: pd.DataFrame) -> pd.DataFrame:
    """Ok prefill rows with a positive median, a `seq` column, an explicit scope and a model name ('' for none)."""
    ok = df[(df["status"] == "ok") & (df["phase"] == "prefill")]
    ok = ok[pd.to_numeric(ok["median_s"], errors="coerce") > 0]
    return ok.assign(seq=ok["seq_kv"].astype("int64"), scope=ok["scope"].fillna("attention"),
                     model=ok["model"].fillna("").astype(str), noisy=ok["noisy"].fillna(False).astype(bool))


def attention_share(df: pd.DataFrame) -> list[dict]:
    """One row per shape where both the attention-alone and the layer case are ok: share = attention / layer.

    Each row holds SHARE_KEYS (None where a field is unset, e.g. the model when the run named none), seq (= seq_kv),
    attention_s and layer_s (medians, seconds) with their CIs (attention_ci_low_s ... layer_ci_high_s; the median
    where a run recorded none), share (a fraction; above 1 only if the layer ran faster than its own
    attention, i.e. noise), noisy (either timing flagged) and the two cases' ids (attention_case_id,
    layer_case_id). Ordered by SHARE_KEYS (backend first, then S).
    """
    ok = _timed(df)
    cols = [*SHARE_KEYS, "seq", "median_s", "ci_low_s", "ci_high_s", "noisy", "case_id"]
    ok = ok.assign(**{c: ok[c] if c in ok else ok["median_s"] for c in ("ci_low_s", "ci_high_s")})

    def scoped(scope: str, short: str) -> pd.DataFrame:
        return ok[ok["scope"] == scope][cols].rename(columns={
            "median_s": f"{scope}_s", "ci_low_s": f"{scope}_ci_low_s", "ci_high_s": f"{scope}_ci_high_s",
            "noisy": f"noisy_{short}", "case_id": f"{scope}_case_id"})

    attn, layer = scoped("attention", "a"), scoped("layer", "l")
    merged = attn.merge(layer, on=[*SHARE_KEYS, "seq"], how="inner").sort_values(SHARE_KEYS, kind="stable")
    out = []
    for _, row in merged.iterrows():
        rec = {k: plain_value(k, row[k]) for k in (*SHARE_KEYS, "seq")}
        rec["model"] = rec["model"] or None
        times = {c: float(row[c]) if pd.notna(row[c]) else float(row[c.replace("_ci_low", "").replace("_ci_high", "")])
                 for c in ("attention_s", "attention_ci_low_s", "attention_ci_high_s", "layer_s", "layer_ci_low_s",
                           "layer_ci_high_s")}
        out.append({**rec, **times, "share": times["attention_s"] / times["layer_s"],
                    "noisy": bool(row["noisy_a"] or row["noisy_l"]),
                    "attention_case_id": str(row["attention_case_id"]), "layer_case_id": str(row["layer_case_id"])})
    return out


def plain_value(key: str, value: object) -> object:
    """A frame cell as plain Python: None for a missing one, int for integer fields, else str."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return int(value) if key in INT_KEYS else str(value)


def share_interval(at: pd.DataFrame) -> tuple[float, float]:
    """95% interval of the median over backends of attention's share at one S (rows of attention_share)."""
    def frame(scope: str) -> pd.DataFrame:
        return pd.DataFrame({"median_s": at[f"{scope}_s"], "ci_low_s": at[f"{scope}_ci_low_s"],
                             "ci_high_s": at[f"{scope}_ci_high_s"]})

    rng = np.random.default_rng(SEED)
    return median_over(drawn(frame("attention"), rng=rng) / drawn(frame("layer"), rng=rng), rng)
