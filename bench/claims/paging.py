"""Claim: paging the KV cache costs little: a paged decode step within PAGING_WITHIN of a contiguous one.

Question `paging`: every serving decode step, paged at each page size and contiguous, over the same drawn contexts.
The judge is bench.report.serving's (read lazily, here): per backend with a real paged kernel × page size, the median
paged / contiguous ratio against PAGING_WITHIN.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.claims.question import Question, every_case
from bench.claims.spec import ClaimSpec
from bench.problem.case import Case

if TYPE_CHECKING:
    import pandas as pd

    from bench.report.verdict import Verdict
    from bench.results.meta import RunMeta

PAGING_WITHIN = 1.3  # a paged decode step within this factor of a contiguous one (vLLM measured 20–26% slower)

SPECS = (ClaimSpec("paging", f"Paging the KV cache costs little: a paged decode step within {PAGING_WITHIN:g}× of a "
                   "contiguous one (vLLM: its paged kernel 20–26% slower)", "bench.claims.paging:paging_cost",
                   "paging",
                   {"profile": "serving", "lengths": "uniform", "phase": "decode", "page-size": "contiguous,16,128"}),)


def picks(c: Case) -> bool:
    """Serving decode: the paged caches and the contiguous cache they are compared with (same drawn contexts)."""
    return c.phase == "decode" and c.shape.serving is not None and c.shape.serving.lengths is not None \
        and c.shape.serving.rows is None


QUESTIONS = (Question("paging", picks, every_case),)


def paging_cost(df: pd.DataFrame, run: RunMeta | None = None) -> Verdict:
    """The claim: a paged KV cache costs little against a contiguous one, for backends with a real paged kernel
    (PAGED_KERNELS: their paged layout reads the pages in place instead of gathering them), judged per condition
    (such a backend × page size: the median paged / contiguous ratio, its interval from those cases' own timings).

    bench.report.serving's judge, read here until it moves into this module."""
    from bench.report.serving import paging_cost as judge

    return judge(df) if run is None else judge(df, run)
