"""Claim: GQA/MQA shrink the KV cache by Hq/Hkv, judged on the caches transformers itself keeps.

Question `kv`: no case. Each preset is measured at the run's start as MHA, its own GQA and MQA
(bench.models.kvcache.measured_presets): a one-layer transformers twin of it run one forward step, the bytes per token
its cache holds. Our code only names the heads; transformers' decides what it keeps, so an implementation that kept
all Hq heads would fail here. Each GQA/MQA twin is one condition: its MHA twin's bytes over its own, against Hq/Hkv
within KV_WITHIN.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.analysis.conditions import BYTE_RATIO, COUNTED, Condition, combine
from bench.analysis.verdict import FAILS, HOLDS, NOT_MEASURED, Verdict
from bench.claims.question import Question, no_cases
from bench.claims.spec import ClaimSpec
from bench.models.config import element_bytes
from bench.results.meta import RunMeta

if TYPE_CHECKING:
    import pandas as pd


KV_WITHIN = 0.02  # a GQA/MQA cache shrinks "by Hq/Hkv" when its MHA twin's bytes over its own are within 2% of Hq/Hkv
# (bytes counted, not timed: the slack is for a few bytes a cache may keep beside K and V, not for noise)

SPECS = (ClaimSpec("kv", "GQA/MQA shrink the KV cache by Hq/Hkv", "bench.claims.kv:kv_cache_shrink", "kv",
                   # any run with transformers installed: its caches are measured at the start
                   {"profile": "quick"}, ratio="MHA cache / its cache", figures=("kv_cache",)),)
CLAIM = SPECS[0].text
EXTRA = "pip install 'attnbench[hf]'"  # transformers, whose caches are measured

QUESTIONS = (Question("kv", lambda c: False, no_cases),)  # answered from the caches allocated at the run's start


def _conditions(by_model: dict[str, dict[str, dict]]) -> tuple[list[Condition], list[dict]]:
    """One condition per preset's GQA/MQA twin beside its MHA twin: MHA's bytes per token over its own, against
    Hq/Hkv: it holds within KV_WITHIN of it, either way (its band)."""

    found, detail = [], []
    for model, variants in by_model.items():
        mha = variants.get("mha")
        if not mha:
            continue
        for variant, m in variants.items():
            if variant in ("mha", "mla") or not m.get("n_kv_heads"):
                continue
            expected = m["n_heads"] / m["n_kv_heads"]
            ratio = mha["bytes_per_token"] / m["bytes_per_token"]
            verdict = HOLDS if abs(ratio / expected - 1) <= KV_WITHIN else FAILS
            key = {"model": model, "variant": variant.upper(), "group_size": int(expected) if float(
                expected).is_integer() else expected}
            found.append(Condition(key, ratio, ratio, ratio, verdict, expected, unit=BYTE_RATIO, within=True,
                                   band=1 + KV_WITHIN, basis=COUNTED,
                                   facts={"bytes_per_token": m["bytes_per_token"],
                                          "mha_bytes_per_token": mha["bytes_per_token"]}))
            name = found[-1].name
            detail.append({"what": name, "ratio": ratio, "expected": expected, "verdict": verdict,
                           "method": m.get("method"), "mha_bytes_per_token": mha["bytes_per_token"],
                           "bytes_per_token": m["bytes_per_token"]})
    return found, detail


def kv_cache_shrink(df: pd.DataFrame, run: RunMeta | None = None) -> Verdict:
    """Per preset's GQA/MQA twin (a condition), MHA's cache bytes per token over its own as transformers keeps them
    (RunMeta.kv_measured), against Hq/Hkv within KV_WITHIN; the claim's word is bench.analysis.conditions' rule.
    Caches attnbench sized itself from n_kv_heads (runs before these) are not evidence: they are the formula's."""

    command = SPECS[0].command
    kept = (run if run is not None else RunMeta()).kv_caches()
    measured = [m for m in kept if m.get("source") == "transformers" and m.get("bytes_per_token")]
    if not measured:
        said = ("this run's caches were allocated by attnbench from n_kv_heads, so their bytes are the formula's and "
                "could not fail" if kept else "this run measured no KV cache")
        return Verdict(CLAIM, NOT_MEASURED, f"{said}; a run measures transformers' own caches at its start where "
                       f"transformers is installed (`{EXTRA}`, then `{command}`)")
    by_model: dict[str, dict[str, dict]] = {}
    for m in measured:
        by_model.setdefault(str(m.get("model")), {})[str(m.get("variant"))] = m
    found, detail = _conditions(by_model)
    if not found:
        return Verdict(CLAIM, NOT_MEASURED, f"no preset was measured both as MHA and as GQA/MQA (`{command}`)")
    verdict = combine(found)
    methods = ", ".join(sorted({str(m.get("method")) for m in measured}))
    parts = []
    for word in (HOLDS, FAILS):
        these = [c for c in found if c.verdict == word]
        if these:
            parts.append(f"{word} in {len(these)} of {len(found)} ("
                         + "; ".join(f"{c.name} {c.ratio:.3g}×" for c in these) + ")")
    notes = (f"transformers' own caches (one-layer twins: {methods}), after one forward step of "
             f"{measured[0].get('tokens')} tokens in {measured[0].get('dtype')}. Bytes counted, not timed: no "
             "interval applies." + _mla_note(by_model))
    numbers = (f"transformers' own caches (one-layer twins: {methods}), after one forward step of "
               f"{measured[0].get('tokens')} tokens in {measured[0].get('dtype')}: the MHA twin's bytes per token over "
               f"each GQA/MQA twin's, against Hq/Hkv within {KV_WITHIN:.0%}: {'; '.join(parts)}. Bytes counted, "
               "not timed: no interval applies."
               + _mla_note(by_model))
    failing = [d for d in detail if d["verdict"] == FAILS]
    why = " ".join(f"{d['what']}: its cache holds {d['bytes_per_token']:,} bytes per token, MHA's "
                   f"{d['mha_bytes_per_token']:,} ÷ {d['ratio']:.3g}, not ÷ {d['expected']:g}: it keeps other than "
                   "its Hkv heads." for d in failing[:3])
    why += f" And {len(failing) - 3} more (the numbers name them)." if len(failing) > 3 else ""
    return Verdict(CLAIM, verdict, numbers, why, tuple(detail), judged_on=f"{len(by_model)} presets' twins",
                   conditions=tuple(found), notes=notes)


def _mla_note(by_model: dict[str, dict[str, dict]]) -> str:
    """MLA beside its MHA twin at the same Hq, as transformers caches each: one sentence per MLA preset."""

    notes = []
    for model, v in by_model.items():
        mla, mha = v.get("mla"), v.get("mha")
        if not (mla and mha):
            continue
        elements = mla["bytes_per_token"] // element_bytes(str(mla.get("dtype")))
        index = f" + its index key {mla['index_head_dim']}" if mla.get("index_head_dim") else ""
        notes.append(f" MLA ({model}, Hq {mla['n_heads']}): transformers caches {elements:,} elements per token and "
                     f"layer (rank + rope {mla.get('kv_latent_dim')}{index}), "
                     f"{mha['bytes_per_token'] / mla['bytes_per_token']:.3g}× less than its MHA twin (K and V at head "
                     f"dim {mha.get('head_dim')}).")
    return "".join(notes)
