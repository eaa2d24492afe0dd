"""Claim: attention dominates the layer at long sequence lengths.

Question `layer`: both scopes (the attention call alone and the layer around it) of one geometry, for the textbook
and the fused backend, at every length up to the first one where the cost model says the fused kernel's attention
passes DOMINANT of the layer on this machine, and the next one (to see it pass), at least MIN_LAYER_LENGTHS lengths.
The judge is bench.report.layer_share's (read lazily, here): attention's share of the layer per family at its
longest length, against DOMINANT.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from bench.backends import get_backend
from bench.claims.question import Context, Question, main_dtypes, pair, plain
from bench.claims.spec import PREFILL, ClaimSpec
from bench.counts.metrics import projection_flops
from bench.problem.case import Case

if TYPE_CHECKING:
    import pandas as pd

    from bench.report.verdict import Verdict
    from bench.results.meta import RunMeta

DOMINANT = 0.5  # attention "dominates" the layer when it takes at least this share of the layer's time
MIN_LAYER_LENGTHS, LAYER_SPAN = 3, 4  # "does not hold" needs this many lengths over this span, the share not rising
RISING = 0.2  # attention's time over the rest's, fitted as ∝ S^k: k above this is a share still on its way up

SPECS = (ClaimSpec("layer", "Attention dominates the layer at long sequence lengths",
                   "bench.claims.layer:attention_dominates", "layer",
                   {"backend": "naive,sdpa-flash", "kv-heads": "8", "seq": "256,512,1024,2048,4096",
                    "scope": "attention,layer", **PREFILL}),)


# -- the question ---------------------------------------------------------------------------------------------------
def picks(c: Case) -> bool:
    """A plain prefill, of the attention call alone or of the layer around it."""
    return plain(c) and c.phase == "prefill" and c.shape.scope in ("attention", "layer")


def predicted_share(case: Case, ctx: Context) -> float:
    """The cost model's share of attention in the layer at this case's shape: attention's predicted call over it
    plus the projections' FLOPs at the GEMM ceiling (they are GEMMs)."""
    from bench.engine.cost import call_s
    from bench.results.record import new_record

    b = get_backend(case.backend)
    alone = Case(case.backend, dataclasses.replace(case.shape, scope="attention"), case.phase, case.pass_, case.device)
    attention = call_s(new_record(alone, b.memory, threads=0), ctx.calibration, b.memory)
    gemm = ctx.calibration.gemm(case.shape.dtype)
    projections = projection_flops(case.shape, case.pass_) / (gemm or 1e10)
    return attention / (attention + projections)


def crossing_length(cases: list[Case], backend: str, ctx: Context) -> int | None:
    """The shortest length of these cases at which the cost model puts `backend`'s attention at half the layer or
    more, on this machine's ceilings; None when it never does within them."""
    for c in sorted((c for c in cases if c.backend == backend), key=lambda c: c.shape.seq_q):
        if predicted_share(c, ctx) >= DOMINANT:
            return c.shape.seq_q
    return None


def least(cases: list[Case], ctx: Context) -> list[Case]:
    """Both scopes of one geometry, for the textbook and the fused backend, at every length up to where the fused
    kernel's attention is predicted to pass half the layer (at least MIN_LAYER_LENGTHS lengths)."""
    def geometry(c: Case) -> tuple:
        s = c.shape
        return (c.backend, s.dtype, s.n_heads, s.n_kv_heads, s.head_dim, s.batch, s.mask.label)

    layered = {geometry(c) for c in cases if c.shape.scope == "layer"}
    twins = [c for c in cases if geometry(c) in layered]
    dtypes = main_dtypes(twins, ctx)
    twins = [c for c in twins if c.shape.dtype == dtypes[0]] if dtypes else []
    if not twins:
        return []
    backends = pair(twins, ctx, lambda c: c.shape.seq_q * 2 + (c.shape.scope == "layer"))
    twins = [c for c in twins if c.backend in backends]
    seqs = sorted({c.shape.seq_q for c in twins if c.shape.scope == "layer"})
    judge = backends[-1]  # the fused kernel: attention reaches half the layer latest with it
    cross = crossing_length([c for c in twins if c.shape.scope == "layer"], judge, ctx)
    # every length up to the predicted crossing and the next one (to see it pass), at least MIN_LAYER_LENGTHS
    upto = len(seqs) if cross is None else seqs.index(cross) + 2
    keep = seqs[:max(upto, MIN_LAYER_LENGTHS)]
    return [c for c in twins if c.shape.seq_q in keep]


QUESTIONS = (Question("layer", picks, least),)


# -- the judge ------------------------------------------------------------------------------------------------------
def attention_dominates(df: pd.DataFrame, run: RunMeta | None = None) -> Verdict:
    """Does attention take at least half of the layer's time at the longest S measured?

    bench.report.layer_share's judge, read here until it moves into this module."""
    from bench.report.layer_share import attention_dominates as judge

    return judge(df) if run is None else judge(df, run)
