"""The claims' registry: each claim is ONE function `(frame, run) -> Verdict` and ONE line in CLAIMS.

Adding a claim: write its function (in a module of this package, or beside the analysis it reads) and add it to
CLAIMS; the report's table, `bench run`'s closing summary and the tests read the list. Every claim takes the
frame of ONE run and picks its own rows (bench.report.frames).
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from bench.meta import RunMeta
from bench.report.claims.auto_choice import auto_choice
from bench.report.claims.decode import expanding_decode_speedup, fused_decode_speedup, mla_decode_step
from bench.report.claims.heads import heads_free_lunch
from bench.report.claims.kv_cache import kv_cache_shrink
from bench.report.claims.memory import memory_scaling
from bench.report.claims.wrapper_cost import wrapper_cost
from bench.report.layer_share import attention_dominates
from bench.report.serving import paging_cost
from bench.report.sparse_cost import sparse_crossover, sparse_speedup
from bench.report.tables import best_backends
from bench.report.traces import grid_vs_trace
from bench.report.variant_cost import variants_within
from bench.report.verdict import Verdict

Claim = Callable[[pd.DataFrame], Verdict]

# In report order.
CLAIMS: tuple[Claim, ...] = (
    heads_free_lunch,
    memory_scaling,
    kv_cache_shrink,
    fused_decode_speedup,
    expanding_decode_speedup,
    mla_decode_step,
    attention_dominates,
    paging_cost,
    variants_within,
    sparse_crossover,
    sparse_speedup,
    grid_vs_trace,
    auto_choice,
    wrapper_cost,
)


def verdicts(df: pd.DataFrame, run: RunMeta) -> list[Verdict]:
    """Every claim's verdict on one run."""
    return [claim(df, run) for claim in CLAIMS]


def evaluate_claims(df: pd.DataFrame, kv_measured: list[dict] | None = None) -> list[dict]:
    """verdicts() as plain dicts (claim, verdict, numbers, why, detail): `bench run`'s summary reads these."""
    return [v.as_dict() for v in verdicts(df, RunMeta(kv_measured=list(kv_measured or [])))]


__all__ = ["CLAIMS", "Claim", "best_backends", "evaluate_claims", "verdicts"]
