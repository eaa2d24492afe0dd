"""The claims' sections: one per registered claim (bench.claims.CLAIMS), each the sentence that answers it on every
run, its conditions as a table (bench.report.answers), the numbers it reports beside them, why it reads as it does,
what else it says, and the figures that show it beside them; then what each run's plan said it could not answer in
its time budget, and the timings re-measured as suspects."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.analysis.load import RunInfo
from bench.analysis.suspects import note as suspect_note
from bench.analysis.verdict import NOT_MEASURED, Verdict
from bench.claims import CLAIMS, ClaimSpec
from bench.engine.agenda import ABSENT, OVER
from bench.report.answers import answer, conditions_blocks, series_blocks
from bench.report.blocks import Beside, Block, Heading, Image, Para
from bench.report.catalogue import FIGURES

if TYPE_CHECKING:
    from bench.report.sections import Report


def anchor(spec: ClaimSpec) -> str:
    """The id of a claim's heading, that the answers link to."""
    return f"claim-{spec.key}"


def section(report: Report) -> list[Block]:
    blocks: list[Block] = [Heading("Claims")]
    shown: set[str] = set()
    for n, spec in enumerate(CLAIMS):
        judged = [(run, report.verdicts[run.run_id][n]) for run in report.runs]
        blocks += claim_section(spec, judged, report, shown)
    for run in report.runs:
        notes = [*plan_notes(run), *suspect_notes(run)]
        if notes and report.several:
            notes.insert(0, Para(f"{run.run_id}:"))
        blocks += notes
    return blocks


def claim_section(spec: ClaimSpec, judged: list[tuple[RunInfo, Verdict]], report: Report,
                  shown: set[str]) -> list[Block]:
    """One claim: its heading, its answer per run, then its conditions, numbers, why and notes beside its figures."""
    several = len(judged) > 1
    blocks: list[Block] = [Heading(spec.text, 3, anchor(spec))]
    for run, v in judged:
        if v.verdict != NOT_MEASURED:
            blocks.append(Para(f"{run.run_id + ': ' if several else ''}{v.verdict.capitalize()}: {answer(v, spec)}",
                               "answer"))
    unmeasured = [(run, v) for run, v in judged if v.verdict == NOT_MEASURED]
    if unmeasured:  # said once for the runs that did not measure it: what would (the command)
        who = f" in {', '.join(run.run_id for run, _ in unmeasured)}" if several else ""
        blocks.append(Para(f"Not measured{who}: {unmeasured[0][1].numbers}", "answer"))
    rows = [(run.run_id, c) for run, v in judged for c in v.conditions]
    main: list[Block] = [*conditions_blocks(spec, rows, several),
                         *series_blocks([(run.run_id, s) for run, v in judged for s in v.series], several)]
    for run, v in judged:
        who = f"{run.run_id}: " if several else ""
        if v.verdict == NOT_MEASURED:
            continue
        if v.why:
            main.append(Para(f"{who}Why: {v.why}"))
        said = " ".join(p for p in (v.notes, _noisy(v), f"Judged on {v.judged_on}." if v.judged_on else "") if p)
        if said:
            main.append(Para(who + said))
    figures = [Image(file, f"{FIGURES[name].title}" + (f": {run.run_id}" if several else ""),
                     FIGURES[name].how_to_read, heading=False)
               for name in spec.figures if name not in shown for run, _ in judged
               if (file := report.figures.get(run.run_id, {}).get(name))]
    shown.update(spec.figures)
    return [*blocks, Beside(tuple(main), tuple(figures)) if figures else Beside(tuple(main), ())]


def _noisy(v: Verdict) -> str:
    flagged, of = v.noisy
    return f"{flagged} of the {of} timings behind it are flagged noisy." if flagged else ""


def suspect_notes(run: RunInfo) -> list[Block]:
    """The timings that looked stalled or ran in a slow spell of the host, re-measured during the run
    (bench.analysis.suspects), under a heading of their own: they are not the last claim's."""
    text = suspect_note(run.meta.suspects)
    return [Heading("Timings measured again", 3), Para(text)] if text else []


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
