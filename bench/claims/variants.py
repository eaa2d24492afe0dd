"""Claim: fused kernels that take every variant run score and mask variants within VARIANTS_WITHIN of their plain
causal time.

Question `variants`: every score variant (softcap, ALiBi, sinks) and chunk-mask case, each beside its plain causal
twin (same backend and shape, no variant); a variant without its twin cannot be judged, so it is left out. The judge
reads each variant case beside its twin from bench.analysis.variant_cost (lazily, in the judge); the backends the claim
is about are read from the registry's traits (bench.analysis.traits.ALL_VARIANT_KERNELS), never named here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.analysis.conditions import combine, condition, listing, pairs_of, undecided_why
from bench.analysis.traits import ALL_VARIANT_KERNELS
from bench.analysis.verdict import FAILS, NOT_MEASURED, Verdict, noisy_count, noisy_note
from bench.claims.question import Context, Question
from bench.claims.spec import ClaimSpec
from bench.problem.case import Case
from bench.results.meta import RunMeta

if TYPE_CHECKING:
    import pandas as pd


VARIANTS_WITHIN = 1.3  # score and mask variants within this factor of plain causal (attention-gym's score_mod
# overheads are of this order)

SPECS = (ClaimSpec("variants", f"Fused kernels that take every variant run score and mask variants within "
                   f"{VARIANTS_WITHIN:g}× of their plain causal time", "bench.claims.variants:variants_within",
                   "variants", {"backend": "naive,sdpa,flex", "kv-heads": "8", "seq": "512", "mask": "causal,chunk:64",
                                "score": "none,softcap:50,alibi,sinks", "dtype": "fp32", "phase": "prefill"},
                   ratio="variant / plain causal", figures=("variant_cost",)),)
CLAIM, COMMAND = SPECS[0].text, SPECS[0].command


def picks(c: Case) -> bool:
    """A score variant or a chunk mask, and the plain causal prefill they are compared with."""
    s = c.shape
    return (s.serving is None and c.phase == "prefill" and s.scope == "attention"
            and s.model is None and not s.sparsity.sparse
            and (bool(s.score.variants) or s.mask.chunk is not None or s.mask.label == "causal"))


def _plain_key(c: Case) -> tuple:
    s = c.shape
    return (c.backend, c.pass_, s.dtype, s.batch, s.n_heads, s.n_kv_heads, s.head_dim, s.seq_q, s.seq_kv)


def least(cases: list[Case], ctx: Context) -> list[Case]:
    """Every variant case, each beside its plain causal twin (same backend and shape, no variant): a variant
    without its twin cannot be judged, so it is left out."""
    varied = [c for c in cases if c.shape.score.variants or c.shape.mask.chunk is not None]
    plain = {_plain_key(c): c for c in cases if not c.shape.score.variants and c.shape.mask.label == "causal"}
    judged = [c for c in varied if _plain_key(c) in plain]
    return judged + list({id(t): t for t in (plain[_plain_key(c)] for c in judged)}.values())


QUESTIONS = (Question("variants", picks, least),)


def variants_within(df: pd.DataFrame, run: RunMeta | None = None) -> Verdict:
    """Per condition — a backend among ALL_VARIANT_KERNELS × a variant — the geometric mean of variant / plain causal
    time over the sizes run, with its 95% interval from those cases' own timings, against VARIANTS_WITHIN; the
    claim's word is bench.analysis.conditions' rule over them."""
    from bench.analysis.frames import geomean
    from bench.analysis.interval import ratio_interval
    from bench.analysis.variant_cost import variant_costs

    costs = variant_costs(df)
    if not costs.empty:
        costs = costs[costs["backend"].isin(ALL_VARIANT_KERNELS)]
    if costs.empty:
        return Verdict(CLAIM, NOT_MEASURED, "no variant case with its plain causal twin for "
                       f"{', '.join(ALL_VARIANT_KERNELS) or 'any backend taking every variant'} (`{COMMAND}`)")
    found, detail = [], []
    for (backend, variant), grp in costs.groupby(["backend", "attn_variant"]):
        ratio = geomean(grp["ratio"])
        found.append(condition({"backend": backend, "variant": variant}, ratio,
                               ratio_interval(grp, "", "plain_", "geomean"), VARIANTS_WITHIN, holds_above=False,
                               pairs=pairs_of(grp, "case_id", "plain_case_id"),
                               facts={"sizes": len(grp), "worst": float(grp["ratio"].max())}))
        detail.append({"backend": backend, "variant": variant, "ratio": ratio, "cases": len(grp),
                       "worst": float(grp["ratio"].max())})
    numbers = (f"variant / plain causal time, geometric mean over {costs['seq_kv'].nunique()} size(s), per backend "
               f"and variant (within {VARIANTS_WITHIN:g}× holds): {listing(found)}." + noisy_note(costs))
    verdict = combine(found)
    why = undecided_why(found)
    failing = [c for c in found if c.verdict == FAILS]
    if failing:
        worst = max(failing, key=lambda c: c.ratio)
        sinks = worst.fields["variant"] == "sinks"
        why = (f"{worst.name} costs {worst.ratio:.2f}× plain causal"
               + (": its sinks add an extra key (a K/V copy) on every call" if sinks else "")
               + (". " + why if why else ""))
    return Verdict(CLAIM, verdict, numbers, why, detail=tuple(detail), conditions=tuple(found),
                   noisy=noisy_count(costs))
