"""Claim: the backend fastest on the synthetic grid serves real traffic (a replayed trace) fastest.

Question `trace`: every bucket of the replayed traces, with the grid's plain causal forward cases of the same
backends and head geometry (the grid's winner is judged against the trace's). The judge is bench.report.traces'
(read lazily, here): per trace, the grid winner's time to serve over the fastest other backend's, against TRACE_CLOSE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.claims.question import Context, Question, plain
from bench.claims.spec import ClaimSpec
from bench.problem.case import Case

if TYPE_CHECKING:
    import pandas as pd

    from bench.report.verdict import Verdict
    from bench.results.meta import RunMeta

TRACE_CLOSE = 1.05  # two backends within 5% on a trace: it cannot tell them apart

SPECS = (ClaimSpec("trace", "The backend fastest on the synthetic grid serves real traffic (a replayed trace) fastest",
                   "bench.claims.trace:grid_vs_trace", "trace",
                   {"backend": "naive,sdpa-flash", "kv-heads": "2", "workload": "azure-conv", "buckets": "4"}),)


def _is_trace(c: Case) -> bool:
    return c.shape.serving is not None and c.shape.serving.rows is not None


def picks(c: Case) -> bool:
    """A replayed trace's bucket, or a plain causal forward case of the synthetic grid it is compared with."""
    return _is_trace(c) or (plain(c) and c.pass_ == "fwd" and c.shape.mask.label == "causal"
                            and c.shape.scope == "attention" and c.shape.mla is None)


def least(cases: list[Case], ctx: Context) -> list[Case]:
    """Every bucket of the traces, with the grid's cases of the same backends and head geometry (the grid's winner
    is judged against the trace's)."""
    trace = [c for c in cases if _is_trace(c)]

    def geometry(c: Case) -> tuple:
        return (c.shape.n_heads, c.shape.n_kv_heads, c.shape.head_dim, c.shape.dtype)

    geometries, backends = {geometry(c) for c in trace}, {c.backend for c in trace}
    grid = [c for c in cases if not _is_trace(c) and geometry(c) in geometries and c.backend in backends]
    return trace + grid if trace and grid else []


QUESTIONS = (Question("trace", picks, least),)


def grid_vs_trace(df: pd.DataFrame, run: RunMeta | None = None) -> Verdict:
    """The claim: the backend fastest on the synthetic grid is the one that serves the real trace fastest, judged per
    trace (workload × geometry): ratio = the grid's winner's time to serve / the fastest other backend's (below 1
    where it is the fastest), its 95% interval from each bucket's CI weighted by the bucket's steps and widened by
    the buckets' checked error in time, the grid's winner's against each other backend's (widened_ratios: a bucket
    estimate that is off for one backend leaves the condition inconclusive rather than wrongly decided), against
    TRACE_CLOSE; a grid winner that cannot serve every bucket does not hold. The claim's word is
    bench.report.conditions' rule over the traces.

    bench.report.traces' judge, read here until it moves into this module."""
    from bench.report.traces import grid_vs_trace as judge

    return judge(df) if run is None else judge(df, run)
