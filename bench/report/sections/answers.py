"""The answers, first in the report: one line per claim, its verdict and the sentence a reader acts on, linked to the
claim's section; for several runs, each run's verdict side by side, the claims whose verdicts differ marked (a run
that did not measure a claim differs from none)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.analysis.verdict import NOT_MEASURED
from bench.claims import CLAIMS
from bench.report.answers import answer
from bench.report.blocks import Block, Heading, Link, Para, Table
from bench.report.sections.claims import anchor

if TYPE_CHECKING:
    from bench.report.sections import Report


def section(report: Report) -> list[Block]:
    if not report.several:
        (run,) = report.runs
        rows = [[Link(spec.text, anchor(spec)), v.verdict, answer(v, spec)]
                for spec, v in zip(CLAIMS, report.verdicts[run.run_id], strict=True)]
        return [Heading("Answers"), Table(["claim", "verdict", "the answer on this run"], rows, verdict_columns=(1,))]
    runs = report.runs
    rows, differ = [], 0
    for n, spec in enumerate(CLAIMS):
        words = [report.verdicts[run.run_id][n].verdict for run in runs]
        differs = len(set(words) - {NOT_MEASURED}) > 1
        differ += differs
        rows.append([Link(spec.text, anchor(spec)), *words, "differ" if differs else ""])
    said = (f"The runs' verdicts differ on {differ} of {len(CLAIMS)} claims (marked)." if differ else
            "Where the runs measured a claim, they read it alike.")
    return [Heading("Answers"), Para(said),
            Table(["claim", *(f"{r.run_id} ({r.machine})" for r in runs), "verdicts"], rows,
                  verdict_columns=tuple(range(1, len(runs) + 1)))]
