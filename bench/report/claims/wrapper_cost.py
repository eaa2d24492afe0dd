"""Claim: transformers' attention paths cost little over the torch kernels they call — its sdpa path (a model's
default attn_implementation) within 1.2× of torch SDPA's fastest kernel at the same shapes.

Each wrapper (a backend with the `wraps` trait: hf-sdpa wraps sdpa, hf-flex wraps flex, hf-eager the textbook
naive) is judged per shape family against the fastest of the backend it wraps and the kernels that one chooses
among (bench.report.rivals: the interval from the cases' CIs decides; straddling the bound is inconclusive). The
mask transformers builds is built once per forward and kept, so the ratio is one layer's attention: what the
wrapper's mask (a boolean or additive tensor where the kernel would take is_causal) and its K/V handling cost.
"""

from __future__ import annotations

import pandas as pd

from bench.claims import WRAPPER_WITHIN, spec
from bench.meta import RunMeta
from bench.report.rivals import against_fastest, combined
from bench.report.traits import WRAPPED
from bench.report.verdict import DEPENDS, FAILS, INCONCLUSIVE, NO_FACTS, NOT_MEASURED, Verdict, judged, span

CLAIM = spec("wrapper").text


def overheads(df: pd.DataFrame) -> list[dict]:
    """Per wrapper and shape family: its time against the fastest kernel it could have called directly."""
    return [d for wrapper, rivals in WRAPPED.items() for d in against_fastest(df, wrapper, rivals, WRAPPER_WITHIN)]


def wrapper_cost(df: pd.DataFrame, run: RunMeta = NO_FACTS) -> Verdict:
    """Is each transformers path within WRAPPER_WITHIN of the kernel it wraps, per shape family?"""
    found = overheads(df)
    if not found:
        return Verdict(CLAIM, NOT_MEASURED, "no transformers path timed beside the kernel it calls "
                       f"(`{spec('wrapper').command}`, with `pip install 'attnbench[hf]'`)")
    verdict = combined(found)
    numbers = "; ".join(f"{d['subject']} in {d['family']}: {d['ratio']:.2f}× {d['fastest']} (interval "
                        f"{d['low']:.2f}–{d['high']:.2f}×, {d['shapes']} shape{'s' * (d['shapes'] > 1)}; worst "
                        f"{d['worst']:.2f}× at KV {d['worst_kv']:,})" for d in found) \
        + f". A family holds within {WRAPPER_WITHIN:.1f}×."
    why = ""
    if verdict in (FAILS, DEPENDS):
        worst = max((d for d in found if d["verdict"] == FAILS), key=lambda d: d["ratio"])
        why = (f"{worst['subject']} takes {worst['ratio']:.2f}× {worst['fastest']}'s time in {worst['family']}: an "
               "explicit mask tensor keeps the kernel off its causal fast path, or K/V are repeated to every head")
    elif verdict == INCONCLUSIVE:
        why = f"a family's interval straddles {WRAPPER_WITHIN:.1f}×: more rounds (--budget) decide it"
    return Verdict(CLAIM, verdict, numbers, why, detail=tuple(found),
                   judged_on=judged(span([s for d in found for s in d["seq_kv"]], "S"),
                                    ", ".join(sorted({d["subject"] for d in found} | {d["fastest"] for d in found}))))
