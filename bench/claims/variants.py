"""Claim: fused kernels that take every variant run score and mask variants within VARIANTS_WITHIN of their plain
causal time.

Question `variants`: every score variant (softcap, ALiBi, sinks) and chunk-mask case, each beside its plain causal
twin (same backend and shape, no variant); a variant without its twin cannot be judged, so it is left out. The judge
is bench.report.variant_cost's (read lazily, here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.claims.question import Context, Question
from bench.claims.spec import ClaimSpec
from bench.problem.case import Case

if TYPE_CHECKING:
    import pandas as pd

    from bench.report.verdict import Verdict
    from bench.results.meta import RunMeta

VARIANTS_WITHIN = 1.3  # score and mask variants within this factor of plain causal (attention-gym's score_mod
# overheads are of this order)

SPECS = (ClaimSpec("variants", f"Fused kernels that take every variant run score and mask variants within "
                   f"{VARIANTS_WITHIN:g}× of their plain causal time", "bench.claims.variants:variants_within",
                   "variants", {"backend": "naive,sdpa,flex", "kv-heads": "8", "seq": "512", "mask": "causal,chunk:64",
                                "score": "none,softcap:50,alibi,sinks", "dtype": "fp32", "phase": "prefill"}),)


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
    claim's word is bench.report.conditions' rule over them.

    bench.report.variant_cost's judge, read here until it moves into this module."""
    from bench.report.variant_cost import variants_within as judge

    return judge(df) if run is None else judge(df, run)
