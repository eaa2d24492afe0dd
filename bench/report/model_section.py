"""The per-model section of a report (runs with --model-config): time per token per layer and for all layers,
KV bytes per token, and the longest context and largest batch that fit in the device's memory, per backend.

Pure analysis: the run's frame and its RunMeta.models facts in, plain rows out. A model's facts, as the engine
records them: {"layers": {"full": n, "sliding": m}, "window": w or None, "encoder_only": bool,
"kv_bytes_per_token": {dtype: {"full": bytes, "sliding": bytes}}} — bytes per token of all layers of a kind.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from bench.backends import BACKENDS
from bench.counts.metrics import model_mem_bytes
from bench.problem.shapes import AttentionShape, case_mask

KINDS = ("full", "sliding")


def kind_of(mask: str) -> str:
    return "sliding" if str(mask).startswith("window") else "full"


def kv_bytes(facts: dict, dtype: str, context: int, batch: int) -> int | None:
    """All layers' K and V cache at context x batch; sliding layers hold at most `window` tokens."""
    per_kind = (facts.get("kv_bytes_per_token") or {}).get(dtype)
    if per_kind is None:
        return None
    window = facts.get("window") or context
    return batch * (per_kind.get("full", 0) * context + per_kind.get("sliding", 0) * min(context, window))


def prefill_bytes(facts: dict, kinds: list[dict], memory: str, dtype: str, context: int, batch: int) -> int | None:
    """What prefilling `context` tokens needs at once: the whole KV cache plus the largest one-layer attention peak
    over the model's layer kinds (each with its own heads and mask: a sliding layer's explicit window mask counts)
    by the backend's memory model (the score matrix for materialising backends). Weights and activations not
    counted."""
    kv = kv_bytes(facts, dtype, context, batch)
    if kv is None:
        return None
    peaks = []
    for g in kinds:
        shape = AttentionShape(batch, context, context, g["n_heads"], g["n_kv_heads"], g["head_dim"], dtype,
                               case_mask(g["mask"]))
        peaks.append(model_mem_bytes(shape, memory, "fwd") or 0)
    return kv + max(peaks, default=0)


def _largest(fits, limit: int = 1 << 40) -> int:
    """Largest n in [0, limit] with fits(n), fits monotone (True then False)."""
    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= limit and fits(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, limit + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def fit_rows(name: str, facts: dict, df: pd.DataFrame, device_memory: float | None) -> list[dict[str, Any]]:
    """Per backend and dtype: the longest context at batch 1, and the largest batch at the longest length run."""
    rows = []
    if not device_memory or df.empty:
        return rows
    kinds = [{"n_heads": int(r["n_heads"]), "n_kv_heads": int(r["n_kv_heads"]), "head_dim": int(r["head_dim"]),
              "mask": str(r["mask"])}
             for _, r in df.drop_duplicates(["n_heads", "n_kv_heads", "head_dim", "mask"]).iterrows()]
    longest = int(df["seq_kv"].max())
    for (backend, dtype), _ in df.groupby(["backend", "dtype"]):
        memory = BACKENDS[backend].memory if backend in BACKENDS else "tiled"

        def need(context: int, batch: int, memory=memory, dtype=dtype) -> int | None:
            return prefill_bytes(facts, kinds, memory, dtype, context, batch)

        if need(1, 1) is None:
            continue
        rows.append({"model": name, "backend": backend, "dtype": dtype, "memory": memory,
                     "max_context": _largest(lambda n: need(n, 1) <= device_memory),
                     "at_context": longest, "max_batch": _largest(lambda b: need(longest, b) <= device_memory)})
    return rows


def time_rows(name: str, facts: dict, df: pd.DataFrame) -> list[dict[str, Any]]:
    """Per backend, dtype, phase, batch and lengths: time per token of one layer of each kind, and of all layers;
    and for transformers' backends the masks one forward builds."""
    ok = df[(df["status"] == "ok") & (df["scope"].fillna("attention") == "attention")]
    layers = facts.get("layers") or {}
    rows = []
    keys = ["backend", "dtype", "phase", "batch", "seq_q", "seq_kv", "pass"]
    for key, grp in ok.groupby(keys, dropna=False):
        per_token = {kind_of(r["mask"]): r["median_s"] / (r["batch"] * r["seq_q"]) for _, r in grp.iterrows()}
        kinds = [k for k in KINDS if layers.get(k)]
        total = sum(layers[k] * per_token[k] for k in kinds) if all(k in per_token for k in kinds) else None
        # transformers builds one mask per layer kind per forward (hf-* backends' mask_build_s)
        masks = grp["mask_build_s"].dropna() if "mask_build_s" in grp else ()
        row = dict(zip(keys, key, strict=True)) | {"model": name, "all_layers_s_per_token": total,
                                                   "mask_s_per_forward": float(sum(masks)) if len(masks) else None}
        row |= {f"{k}_layer_s_per_token": per_token.get(k) for k in KINDS if layers.get(k)}
        rows.append(row)
    return rows


def model_summary(run_models: dict, frame: pd.DataFrame, device_memory: float | None) -> list[dict[str, Any]]:
    """One entry per model of the run: its facts, time rows and fit rows."""
    out = []
    for name, facts in run_models.items():
        df = frame[frame["model"] == name]
        if df.empty:
            continue
        kv = facts.get("kv_bytes_per_token") or {}
        out.append({"model": name, "facts": facts,
                    "kv_bytes_per_token": {d: sum(v.values()) for d, v in kv.items()},
                    "times": time_rows(name, facts, df), "fits": fit_rows(name, facts, df, device_memory)})
    return out


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
