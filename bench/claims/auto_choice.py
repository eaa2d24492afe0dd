"""Claim: torch SDPA's automatic kernel choice is within 10% of the fastest kernel it could have been forced to.

Its question funds, per shape family (phase, GQA/MQA/MHA, dtype, mask, pass) of the plan's dense cases, the automatic
backend and every kernel it chooses among that runs here at the family's cheapest shape, so that the families judged
are the plan's whatever else its budget reaches (more lengths of a family only refine its ratio). Per
shape family, the automatic backend against the kernels it chooses among (the registry's `chooses` trait), as
bench.analysis.rivals judges a backend against its fastest rival: a family holds when its whole interval is within
AUTO_WITHIN, fails when the whole interval is beyond it, and is inconclusive when it straddles it
(bench.report.claims.auto_choice.losses: the comparisons, which the best-backends table reads too).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING

from bench.analysis.conditions import MORE_ROUNDS, combine, decide_by, undecided_why
from bench.analysis.traits import AUTOMATIC
from bench.analysis.verdict import DEPENDS, FAILS, INCONCLUSIVE, NOT_MEASURED, Verdict, judged, span
from bench.claims.question import Context, Question, main_dtypes, plain, runs_here, with_emulated
from bench.claims.spec import ClaimSpec
from bench.problem.case import Case, family_key
from bench.results.meta import RunMeta

if TYPE_CHECKING:
    import pandas as pd


AUTO_WITHIN = 1.10  # torch's automatic SDPA choice within 10% of the fastest forced kernel

SPECS = (ClaimSpec("auto-choice", f"torch's automatic SDPA choice is within {AUTO_WITHIN - 1:.0%} of the fastest "
                   "forced kernel", "bench.claims.auto_choice:auto_choice", "auto-choice",
                   {"backend": "sdpa,sdpa-math,sdpa-flash"}, ratio="automatic / fastest forced kernel"),)
CLAIM = SPECS[0].text


def picks(c: Case) -> bool:
    """A plain attention call of an automatic backend or of a kernel one chooses among."""
    return plain(c) and (c.backend in AUTOMATIC or any(c.backend in k for k in AUTOMATIC.values()))


def least(cases: list[Case], ctx: Context) -> list[Case]:
    """Per automatic backend and shape family of a native dtype: at the family's cheapest shape where it and at
    least one kernel it chooses among run here, it and each of those kernels."""
    by_shape: dict[tuple, list[Case]] = defaultdict(list)
    for c in cases:
        if runs_here(c, ctx):
            by_shape[(c.shape, c.phase, c.pass_)].append(c)
    dtypes = set(main_dtypes(cases, ctx))
    chosen: list[Case] = []
    for auto, kernels in AUTOMATIC.items():
        best: dict[tuple, list[Case]] = {}
        for group in by_shape.values():
            mine = [c for c in group if c.backend == auto]
            rivals = [c for c in group if c.backend in kernels]
            if not mine or not rivals or mine[0].shape.dtype not in dtypes:
                continue
            family = family_key(mine[0])
            if family not in best or ctx.cost(mine + rivals) < ctx.cost(best[family]):
                best[family] = mine + rivals
        chosen += [c for group in best.values() for c in group]
    return with_emulated(chosen, cases, ctx)


QUESTIONS = (Question("auto-choice", picks, least),)


def losses(df: pd.DataFrame, within: float) -> list[dict]:
    """Per automatic backend and shape family: bench.analysis.rivals.against_fastest's comparison with the kernels
    it chooses among, each family judged against `within` (AUTO_WITHIN for the claim)."""
    from bench.analysis.rivals import against_fastest

    return [d for auto, forced in AUTOMATIC.items() for d in against_fastest(df, auto, forced, within)]


def default_loss(df: pd.DataFrame) -> dict[str, float]:
    """family label -> the automatic choice's geomean ratio to the fastest forced kernel (the best-backends table's
    column); the ratio alone: no bound judges it here."""
    return {d["family"]: d["ratio"] for d in losses(df, math.inf) if not math.isnan(d["ratio"])}


def _family(d: dict) -> str:
    interval = f"interval {d['low']:.2f}–{d['high']:.2f}×"
    where = f"{d['shapes']} shape{'s' * (d['shapes'] > 1)}"
    if d["ratio"] <= 1.0:
        return f"{d['family']}: {d['ratio']:.2f}× ({interval}, {where}; it matched or beat {d['fastest']})"
    return (f"{d['family']}: {d['ratio']:.2f}× the fastest forced kernel, {d['fastest']} ({interval}, {where}; worst "
            f"{d['worst']:.2f}× at KV {d['worst_kv']:,})")


def auto_choice(df: pd.DataFrame, run: RunMeta | None = None) -> Verdict:
    """Does the automatic choice lose more than AUTO_WITHIN to the best kernel it chooses among, per shape family?"""

    found = losses(df, AUTO_WITHIN)
    if not found:
        return Verdict(CLAIM, NOT_MEASURED, f"no shape timed with the automatic choice and a forced kernel "
                       f"(`{SPECS[0].command}`)")
    families = [d.pop("condition") for d in found]
    verdict = combine(families)
    numbers = ("automatic time over the fastest forced kernel, geometric mean per shape family: "
               + "; ".join(_family(d) for d in found)
               + f". A family holds when its whole interval is within {AUTO_WITHIN:.2f}×.")
    why = ""
    if verdict in (FAILS, DEPENDS):
        worst = max((d for d in found if d["verdict"] == FAILS), key=lambda d: d["ratio"])
        why = (f"forcing {worst['fastest']} would save {100 * (1 - 1 / worst['ratio']):.0f}% in {worst['family']}: "
               "torch's dispatcher picks by what the inputs allow, not by what is fastest on this machine")
    elif verdict == INCONCLUSIVE:
        why = undecided_why(families, decide_by(MORE_ROUNDS, "more lengths"))
    seqs = [s for d in found for s in d["seq_kv"]]
    return Verdict(CLAIM, verdict, numbers, why, detail=tuple(found), conditions=tuple(families),
                   judged_on=judged(span(seqs, "S"), ", ".join(sorted({d["subject"] for d in found}
                                                                     | {d["fastest"] for d in found}))))
