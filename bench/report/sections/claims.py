"""The claims section: one row per registered claim with its verdict on the run (bench.report.claims), then what
the run's plan said it could not answer in its time budget and the timings re-measured as suspects."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from bench.engine.agenda import ABSENT, OVER
from bench.report.blocks import Block, Para, Table
from bench.report.claims import verdicts
from bench.report.load import RunInfo
from bench.report.suspects import note as suspect_note
from bench.report.verdict import NO_FACTS

if TYPE_CHECKING:
    from bench.report.sections import Report


def section(df: pd.DataFrame, run: RunInfo, report: Report) -> list[Block]:
    return [claims_table(df, run), *plan_notes(run), *suspect_notes(run)]


def claims_table(df: pd.DataFrame, run: RunInfo | None = None) -> Table:
    """One row per registered claim; where it does not hold, its reason follows the numbers."""
    rows = [[v.claim, v.verdict, v.judged_on or "–", v.numbers + (f" Why: {v.why}" if v.why else "")]
            for v in verdicts(df, run.meta if run is not None else NO_FACTS)]
    return Table(["claim (from the tutorials)", "verdict on this run", "judged on", "the numbers behind it"], rows,
                 verdict_column=1)


def suspect_notes(run: RunInfo) -> list[Block]:
    """The timings that looked stalled, re-measured during the run (bench.report.suspects)."""
    text = suspect_note(run.meta.suspects)
    return [Para(text)] if text else []


def plan_notes(run: RunInfo) -> list[Block]:
    """What the run's plan said, before its first case, of the questions it could not answer in its time budget."""
    lines = []
    for q in run.questions:
        funding = q.get("time_budget_s") or q.get("budget_s")  # files before 2026-12-04 name it budget_s
        if q.get("state") == OVER and funding:
            lines.append(f"{q.get('asks')}: its least ({q.get('least_cases')} cases, about {q.get('least_s')} s) did "
                         f"not fit this run's time budget; `--time-budget {int(funding // 60)}m` answers it.")
        elif q.get("state") == ABSENT and q.get("command"):
            when = f" (about {int(q['elsewhere_s'] // 60)} min on this machine)" if q.get("elsewhere_s") else ""
            lines.append(f"{q.get('asks')}: not in this run's profile; `{q['command']}` measures it{when}.")
    if not lines:
        return []
    return [Para("What the plan said before the first case, of the questions it could not answer here: "
                 + " ".join(lines))]
