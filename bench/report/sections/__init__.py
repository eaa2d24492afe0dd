"""The report's sections, in report order: ONE list (SECTIONS) that bench.report.document walks.

Answers first (a line per claim, the summary, each claim's section, the best backends, each kind of case's own
section), then how they were measured (environment, models, figures, kernels), then what did not run and, for
several runs, how they compare.

A section is a module here. One that reads a single run is `section(rows, run, report)` -> its blocks, or None when
the run has no such cases (then it adds nothing, not even its heading); per_run gives it every run in turn. One that
reads all runs at once is `section(report)` and is listed as it is. A report of several runs has each section once:
per_run writes its heading once and each run's blocks under the run's name. Adding a kind of case's section: one
module here and its name in the kinds' line of SECTIONS (a kind's section writes its own heading).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from bench.analysis.load import RunInfo
from bench.analysis.verdict import Verdict
from bench.report.blocks import Block, Heading
from bench.report.sections import (
    answers,
    best,
    claims,
    cold,
    comparison,
    environment,
    figures,
    kernels,
    linear,
    models,
    not_run,
    prefix,
    sparse,
    summary,
    traces,
)


@dataclass(frozen=True)
class Report:
    """What the sections read: the runs (oldest first), all their rows, run_id -> {figure name: PNG file}, and
    run_id -> its claims' verdicts (bench.claims.CLAIMS' order), judged once for the whole report."""

    runs: list[RunInfo]
    frame: pd.DataFrame
    figures: dict[str, dict[str, str]]
    verdicts: dict[str, list[Verdict]]

    @property
    def several(self) -> bool:
        return len(self.runs) > 1


RunSection = Callable[[pd.DataFrame, RunInfo, Report], list[Block] | None]
Section = Callable[[Report], list[Block] | None]


def per_run(*sections: RunSection, heading: str | None = None) -> Section:
    """Each section's blocks for each run's rows, under `heading` when given, else under the heading each section
    writes first. With several runs a heading is written once, each run's blocks under it after the run's name."""

    def section(report: Report) -> list[Block]:
        parts: dict[str | None, list[tuple[RunInfo, list[Block]]]] = {}  # by heading, in the order first written
        for write in sections:
            for run in report.runs:
                said = write(report.frame[report.frame["run_id"] == run.run_id], run, report)
                if said is None:
                    continue
                title = heading
                if title is None and said and isinstance(said[0], Heading) and said[0].level == 2:
                    title, said = said[0].text, said[1:]
                parts.setdefault(title, []).append((run, said))
        blocks: list[Block] = []
        for title, runs in parts.items():
            if title is not None:
                blocks.append(Heading(title))
            for run, said in runs:
                if report.several:
                    blocks.append(Heading(f"{run.run_id} ({run.machine})", 3))
                blocks += said
        return blocks

    return section


SECTIONS: tuple[Section, ...] = (
    answers.section,
    per_run(summary.section, heading="Summary"),
    claims.section,
    per_run(best.section, heading="Best backends"),
    per_run(sparse.section, traces.section, linear.section, prefix.section),  # kinds of case with a section
    environment.section,
    per_run(models.section, heading="Models"),
    per_run(figures.section, heading="Figures"),
    per_run(kernels.section, heading="Kernels"),
    per_run(cold.section, heading="Cold and warm"),
    per_run(not_run.section, heading="Cases that did not run"),
    comparison.section,
)
