"""Attention's share of the whole layer (W_Q, W_K, W_V, attention, W_O) as S grows: tidy frame -> plain data.

A run with `--scope attention,layer` times every prefill shape twice: the attention call alone and the layer
around it (bench.layers). The share of one shape is attention's median over the layer's, both from the same run,
backend, dtype and pass. The tutorials say attention dominates at long S (its cost grows as S², the
projections' as S); `attention_dominates` says from which S that holds on this machine, in the claims' format
(bench.report.claims). Like the claims, both functions take the frame of ONE run and return plain data.
"""

from __future__ import annotations

import math

import pandas as pd

from bench.report.claims import FAILS, HOLDS, NOT_MEASURED

# What pairs an attention-alone case with its layer twin: everything but the scope and the time.
SHARE_KEYS = ["model", "backend", "dtype", "n_heads", "n_kv_heads", "head_dim", "mask", "batch", "pass", "seq"]
# A family: one geometry measured over lengths, by one or more backends.
FAMILY_KEYS = ["model", "dtype", "n_heads", "n_kv_heads", "head_dim", "mask", "batch", "pass"]
INT_KEYS = ("n_heads", "n_kv_heads", "head_dim", "batch", "seq")
DOMINANT = 0.5  # attention "dominates" when it takes at least half of the layer's time
COMMAND = "python -m bench run --model-config llama-3-8b --scope attention,layer --phase prefill"
CLAIM = "Attention dominates the layer at long sequence lengths"


def _timed(df: pd.DataFrame) -> pd.DataFrame:
    """Ok prefill rows with a positive median, a `seq` column, an explicit scope and a model name ('' for none)."""
    ok = df[(df["status"] == "ok") & (df["phase"] == "prefill")]
    ok = ok[pd.to_numeric(ok["median_s"], errors="coerce") > 0]
    return ok.assign(seq=ok["seq_kv"].astype("int64"), scope=ok["scope"].fillna("attention"),
                     model=ok["model"].fillna("").astype(str), noisy=ok["noisy"].fillna(False).astype(bool))


def attention_share(df: pd.DataFrame) -> list[dict]:
    """One row per shape where both the attention-alone and the layer case are ok: share = attention / layer.

    Each row holds SHARE_KEYS (model None when the run named none), attention_s and layer_s (medians, seconds),
    share (a fraction; above 1 only if the layer ran faster than its own attention, i.e. noise) and noisy (either
    timing flagged). Ordered by model, backend, dtype, heads, mask, batch, pass, then S.
    """
    ok = _timed(df)
    cols = [*SHARE_KEYS, "median_s", "noisy"]
    attn = ok[ok["scope"] == "attention"][cols].rename(columns={"median_s": "attention_s", "noisy": "noisy_a"})
    layer = ok[ok["scope"] == "layer"][cols].rename(columns={"median_s": "layer_s", "noisy": "noisy_l"})
    merged = attn.merge(layer, on=SHARE_KEYS, how="inner").sort_values(SHARE_KEYS, kind="stable")
    out = []
    for _, row in merged.iterrows():
        rec = {k: row[k] for k in SHARE_KEYS}
        for k in SHARE_KEYS:
            rec[k] = int(rec[k]) if k in INT_KEYS else str(rec[k])
        rec["model"] = rec["model"] or None
        attention_s, layer_s = float(row["attention_s"]), float(row["layer_s"])
        out.append({**rec, "attention_s": attention_s, "layer_s": layer_s, "share": attention_s / layer_s,
                    "noisy": bool(row["noisy_a"] or row["noisy_l"])})
    return out


def _family_label(key: dict) -> str:
    geometry = key["model"] or f"Hq={key['n_heads']} Hkv={key['n_kv_heads']} D={key['head_dim']}"
    return f"{geometry} · {key['dtype']} · {key['mask']} · B={key['batch']} · {key['pass']}"


def _pct(x: float) -> str:
    """A share in percent, truncated to 0.1 so that one just under half never reads as 50%."""
    return f"{math.floor(1000 * x) / 10:.1f}%"


def attention_dominates(df: pd.DataFrame) -> dict:
    """Does attention take at least half of the layer's time at the longest S measured?

    Per family (one geometry, dtype, mask, batch and pass), the share at each S is the median over the backends
    that ran both scopes there. The claim holds when, at each family's longest S, that median is >= 50%. numbers
    gives the share at each S and the smallest S from which attention takes half or more (at that S and every
    longer one measured), or says it never does on this machine. detail: one dict per family and S.
    """
    scope = df["scope"].fillna("attention") if "scope" in df else pd.Series("attention", index=df.index)
    if not (scope == "layer").any():
        return _result(NOT_MEASURED, f"no layer-scope cases in this run (run `{COMMAND}`)")
    shares = pd.DataFrame(attention_share(df))
    if shares.empty:
        return _result(NOT_MEASURED, "layer-scope cases ran, but none is ok beside an ok attention-alone case of the "
                                     f"same shape and backend (run `{COMMAND}`)")
    shares["model_key"] = shares["model"].fillna("")  # groupby drops None keys
    families = shares.groupby([k if k != "model" else "model_key" for k in FAMILY_KEYS], sort=True)
    detail, parts, verdicts = [], [], []
    for _, fam in families:
        first = fam.iloc[0]
        key = {k: int(first[k]) if k in INT_KEYS else str(first[k]) for k in FAMILY_KEYS if k != "model"}
        key = {"model": first["model_key"] or None, **key}
        per_seq = []
        for seq, at in fam.groupby("seq", sort=True):
            median = float(at["share"].median())
            per_seq.append((int(seq), median))
            detail.append({**key, "family": _family_label(key), "seq": int(seq), "median_share": median,
                           "backends": {str(b): float(s) for b, s in zip(at["backend"], at["share"], strict=True)},
                           "noisy": int(at["noisy"].sum())})
        from_seq = None
        for seq, median in reversed(per_seq):  # the shortest S from which every longer one is dominated too
            if median < DOMINANT:
                break
            from_seq = seq
        longest, at_longest = per_seq[-1]
        verdicts.append(at_longest >= DOMINANT)
        where = (f"attention takes half or more from S={from_seq}" if from_seq is not None else
                 f"attention never takes half on this machine (up to S={longest})")
        label = f"{_family_label(key)}: " if families.ngroups > 1 else ""
        parts.append(f"{label}attention's share of the layer (median over "
                     f"{', '.join(sorted(fam['backend'].unique()))}): "
                     + ", ".join(f"S={s} {_pct(m)}" for s, m in per_seq) + f"; {where}")
    numbers = "; ".join(parts) + "."
    noisy = int(shares["noisy"].sum())
    if noisy:
        numbers += f" {noisy} of {len(shares)} shares rest on a timing flagged noisy."
    return _result(HOLDS if all(verdicts) else FAILS, numbers, detail)


def _result(verdict: str, numbers: str, detail: list[dict] | None = None) -> dict:
    return {"claim": CLAIM, "verdict": verdict, "numbers": numbers, "detail": detail or []}
