"""Claim: GQA/MQA shrink the KV cache by Hq/Hkv, judged from caches really allocated at the run's start."""

from __future__ import annotations

import math

import pandas as pd

from bench.claims import spec
from bench.meta import RunMeta
from bench.report.verdict import FAILS, HOLDS, NO_FACTS, NOT_MEASURED, Verdict

CLAIM = spec("kv").text


def kv_cache_shrink(df: pd.DataFrame, run: RunMeta = NO_FACTS) -> Verdict:
    """Hq/Hkv from KV caches really allocated and measured at the run's start (each preset as MHA, its own grouping
    and MQA: RunMeta.kv_measured), not from the formula on both sides, which could not fail. An MLA preset is
    measured as MLA beside its MHA and MQA twins at the same Hq: its expected ratio is Hq x (D_qk + D_v) /
    (rank + rope), the elements per token and layer (kv_elements) of each."""
    kv_measured = run.kv_caches()
    if not kv_measured:
        return Verdict(CLAIM, NOT_MEASURED, "this run measured no KV cache allocations (runs of attnbench from "
                       f"before they were measured); any run measures them (`{spec('kv').command}`)")
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
            # kv_elements (per token and layer): MLA's latent against MHA's Hq x (D_qk + D_v); Hq/Hkv otherwise
            expected = mha["kv_elements"] / m["kv_elements"] if m.get("kv_elements") and mha.get("kv_elements") \
                else m["n_heads"] / m["n_kv_heads"]
            detail.append({"source": "measured", "what": f"{model} {variant.upper()}",
                           "ratio": mha["bytes"] / m["bytes"], "expected": expected,
                           "method": m.get("method"), "mha_bytes": mha["bytes"], "bytes": m["bytes"]})
    if not detail:
        return Verdict(CLAIM, NOT_MEASURED, "no preset was measured both as MHA and as GQA/MQA")
    exact = [d for d in detail if math.isclose(d["ratio"], d["expected"], rel_tol=0.01)]
    worst = max(detail, key=lambda d: abs(math.log(d["ratio"] / d["expected"])))
    method = detail[0]["method"]
    numbers = (f"caches allocated for {kv_measured[0].get('context')} tokens and measured ({method}): "
               f"{len(exact)} of {len(detail)} GQA/MQA caches are their MHA twin ÷ Hq/Hkv within 1% ("
               + ", ".join(f"{d['what']} {d['ratio']:.3g}× of {d['expected']:g}×" for d in detail[:6])
               + (", …" if len(detail) > 6 else "") + f"); furthest: {worst['what']} {worst['ratio']:.3g}× "
               f"against {worst['expected']:g}×. Bytes allocated, not times: no timing interval applies.")
    numbers += _mla_note(by_model)
    holds = len(exact) == len(detail)
    why = "" if holds else (f"{len(detail) - len(exact)} cache(s) hold more than K/V at Hkv heads (e.g. "
                            f"{worst['what']}: {worst['bytes']:,} bytes against MHA's {worst['mha_bytes']:,}).")
    return Verdict(CLAIM, HOLDS if holds else FAILS, numbers, why, tuple(detail))


def _mla_note(by_model: dict[str, dict[str, dict]]) -> str:
    """MLA beside its MHA and MQA twins at the same Hq, in the caches measured: one sentence per MLA model."""
    notes = []
    for model, v in by_model.items():
        mla, mha, mqa = v.get("mla"), v.get("mha"), v.get("mqa")
        if not (mla and mha and mla.get("bytes") and mha.get("bytes")):
            continue
        note = (f" MLA ({model}, Hq {mla['n_heads']}): its latent of {mla.get('kv_elements')} elements per token "
                f"and layer caches {mha['bytes'] / mla['bytes']:.3g}× less than MHA's Hq × (D_qk + D_v) = "
                f"{mha.get('kv_elements')}")
        if mqa and mqa.get("bytes"):
            note += f", {mla['bytes'] / mqa['bytes']:.3g}× as much as MQA's one K/V head"
        notes.append(note + ".")
    return "".join(notes)
