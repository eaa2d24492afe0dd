"""Claim: paging the KV cache costs little: a paged decode step within PAGING_WITHIN of a contiguous one.

Question `paging`: every serving decode step, paged at each page size and contiguous, over the same drawn contexts.
The judge: per backend with a real paged kernel × page size, the median paged / contiguous ratio against
PAGING_WITHIN, over the pairs bench.analysis.serving makes (read lazily, in the judge).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.analysis.conditions import combine, condition, listing, not_judged, pairs_of, undecided_why
from bench.analysis.traits import PAGED_KERNELS
from bench.analysis.verdict import FAILS, HOLDS, NOT_MEASURED, Verdict, noisy_count, noisy_note
from bench.claims.question import Question, every_case
from bench.claims.spec import ClaimSpec
from bench.problem.case import Case
from bench.results.meta import RunMeta

if TYPE_CHECKING:
    import pandas as pd


PAGING_WITHIN = 1.3  # a paged decode step within this factor of a contiguous one (vLLM measured 20–26% slower)

SPECS = (ClaimSpec("paging", f"Paging the KV cache costs little: a paged decode step within {PAGING_WITHIN:g}× of a "
                   "contiguous one (vLLM: its paged kernel 20–26% slower)", "bench.claims.paging:paging_cost",
                   "paging",
                   {"profile": "serving", "lengths": "uniform", "phase": "decode", "page-size": "contiguous,16,128"},
                   ratio="paged / contiguous step", figures=("serving_paged",)),)
CLAIM, COMMAND = SPECS[0].text, SPECS[0].command


def picks(c: Case) -> bool:
    """Serving decode: the paged caches and the contiguous cache they are compared with (same drawn contexts)."""
    return c.phase == "decode" and c.shape.serving is not None and c.shape.serving.lengths is not None \
        and c.shape.serving.rows is None


QUESTIONS = (Question("paging", picks, every_case),)


def paging_cost(df: pd.DataFrame, run: RunMeta | None = None) -> Verdict:
    """The claim: a paged KV cache costs little against a contiguous one, for backends with a real paged kernel
    (PAGED_KERNELS: their paged layout reads the pages in place instead of gathering them), judged per condition
    (such a backend × page size: the median paged / contiguous ratio, its interval from those cases' own timings)."""
    from bench.analysis.interval import ratio_interval
    from bench.analysis.serving import paged_vs_contiguous

    pairs = paged_vs_contiguous(df)
    if pairs.empty:
        return Verdict(CLAIM, NOT_MEASURED, f"no paged decode case with its contiguous twin (`{COMMAND}`)")
    by = pairs.groupby(["backend", "page_size"])["ratio"].median()
    detail = tuple({"backend": b, "page_size": int(p), "ratio": float(r)} for (b, p), r in by.items())
    shown = "; ".join(f"{b} pages of {int(p)}: {r:.2f}×" for (b, p), r in by.items())
    in_place = by[by.index.get_level_values("backend").isin(PAGED_KERNELS)]
    if in_place.empty:
        return Verdict(CLAIM, NOT_MEASURED, f"only gathering backends ran paged: {shown}",
                       f"the claim is about kernels that read pages in place ({', '.join(PAGED_KERNELS)}); none "
                       "ran a paged case here", detail)
    by_kernel = {(b, int(p)): condition({"backend": b, "page_size": int(p)}, float(grp["ratio"].median()),
                                        ratio_interval(grp, "", "contiguous_"), PAGING_WITHIN, holds_above=False,
                                        pairs=pairs_of(grp, "case_id", "contiguous_case_id"))
                 for (b, p), grp in pairs[pairs["backend"].isin(PAGED_KERNELS)].groupby(["backend", "page_size"])}
    found = list(by_kernel.values())
    gathering = [not_judged({"backend": b, "page_size": int(p)}, float(grp["ratio"].median()),
                            ratio_interval(grp, "", "contiguous_"), PAGING_WITHIN, False,
                            "it gathers the pages into one block on every step: no paged kernel to judge")
                 for (b, p), grp in pairs[~pairs["backend"].isin(PAGED_KERNELS)].groupby(["backend", "page_size"])]
    numbers = (f"paged / contiguous decode time, median per backend and page size: {shown}; judged per kernel that "
               f"reads pages in place and page size (within {PAGING_WITHIN:g}× holds): {listing(found)}."
               + noisy_note(pairs))
    verdict = combine(found)
    why = undecided_why(found)
    failing = [c for c in found if c.verdict == FAILS]
    if failing:
        why = (f"{', '.join(c.name for c in failing)} pay{'s' * (len(failing) == 1)} more than {PAGING_WITHIN:g}×: "
               + (_smaller_pages(by_kernel) or "the pages' scattered reads cost more here than vLLM measured.")
               + (" " + why if why else ""))
    return Verdict(CLAIM, verdict, numbers, why, detail, conditions=tuple(found + gathering), noisy=noisy_count(pairs))


def _smaller_pages(by_kernel: dict) -> str:
    """Where a kernel's pages fail and its larger pages (scattered alike) hold: the cost is the small pages' many
    short key blocks (a kernel that reads a page as one block, as flex does), not where the pages lie; "" otherwise.
    by_kernel: (backend, page size) -> its condition."""

    said = []
    for (backend, size), c in by_kernel.items():
        larger = sorted(s for (b, s), h in by_kernel.items() if b == backend and s > size and h.verdict == HOLDS)
        if c.verdict == FAILS and larger:
            s = larger[0]
            said.append(f"{backend} with pages of {s} is within it ({by_kernel[backend, s].ratio:.2f}×), its pages as "
                        f"scattered: the cost is {s // size}× as many key blocks, each one page, not where the pages "
                        "lie")
    return "; ".join(said) + "." if said else ""
