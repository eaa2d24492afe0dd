"""Claim: torch SDPA's automatic kernel choice is within 10% of the fastest kernel it could have been forced to.

No question funds it: any run that times the automatic backend beside a kernel it chooses among answers it. Per
shape family, the automatic backend against the kernels it chooses among (the registry's `chooses` trait), as
bench.report.rivals judges a backend against its fastest rival: a family holds when its whole interval is within
AUTO_WITHIN, fails when the whole interval is beyond it, and is inconclusive when it straddles it
(bench.report.claims.auto_choice.losses: the comparisons, which the best-backends table reads too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.claims.spec import ClaimSpec

if TYPE_CHECKING:
    import pandas as pd

    from bench.report.verdict import Verdict
    from bench.results.meta import RunMeta

AUTO_WITHIN = 1.10  # torch's automatic SDPA choice within 10% of the fastest forced kernel

SPECS = (ClaimSpec("auto-choice", f"torch's automatic SDPA choice is within {AUTO_WITHIN - 1:.0%} of the fastest "
                   "forced kernel", "bench.claims.auto_choice:auto_choice", None,
                   {"backend": "sdpa,sdpa-math,sdpa-flash"}),)
CLAIM = SPECS[0].text
QUESTIONS = ()


def _family(d: dict) -> str:
    interval = f"interval {d['low']:.2f}–{d['high']:.2f}×"
    where = f"{d['shapes']} shape{'s' * (d['shapes'] > 1)}"
    if d["ratio"] <= 1.0:
        return f"{d['family']}: {d['ratio']:.2f}× ({interval}, {where}; it matched or beat {d['fastest']})"
    return (f"{d['family']}: {d['ratio']:.2f}× the fastest forced kernel, {d['fastest']} ({interval}, {where}; worst "
            f"{d['worst']:.2f}× at KV {d['worst_kv']:,})")


def auto_choice(df: pd.DataFrame, run: RunMeta | None = None) -> Verdict:
    """Does the automatic choice lose more than AUTO_WITHIN to the best kernel it chooses among, per shape family?"""
    from bench.report.claims.auto_choice import losses
    from bench.report.rivals import combined, conditions
    from bench.report.verdict import DEPENDS, FAILS, INCONCLUSIVE, NOT_MEASURED, Verdict, judged, span

    found = losses(df, AUTO_WITHIN)
    if not found:
        return Verdict(CLAIM, NOT_MEASURED, f"no shape timed with the automatic choice and a forced kernel "
                       f"(`{SPECS[0].command}`)")
    verdict = combined(found)
    numbers = ("automatic time over the fastest forced kernel, geometric mean per shape family: "
               + "; ".join(_family(d) for d in found)
               + f". A family holds when its whole interval is within {AUTO_WITHIN:.2f}×.")
    why = ""
    if verdict in (FAILS, DEPENDS):
        worst = max((d for d in found if d["verdict"] == FAILS), key=lambda d: d["ratio"])
        why = (f"forcing {worst['fastest']} would save {100 * (1 - 1 / worst['ratio']):.0f}% in {worst['family']}: "
               "torch's dispatcher picks by what the inputs allow, not by what is fastest on this machine")
    elif verdict == INCONCLUSIVE:
        why = (f"the interval of a family straddles {AUTO_WITHIN:.2f}×: more rounds (--budget) or more lengths "
               "decide it")
    seqs = [s for d in found for s in d["seq_kv"]]
    return Verdict(CLAIM, verdict, numbers, why, detail=tuple(found), conditions=conditions(found, AUTO_WITHIN),
                   judged_on=judged(span(seqs, "S"), ", ".join(sorted({d["subject"] for d in found}
                                                                     | {d["fastest"] for d in found}))))
