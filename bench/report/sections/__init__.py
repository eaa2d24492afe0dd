"""The report's sections, in report order: ONE list (SECTIONS) that bench.report.document walks.

Answers first (the summary, the claims' verdicts, the best backends, each kind of case's own section), then how they
were measured (environment, models, figures, kernels), then what did not run and, for several runs, how they compare.

A section is a module here. One that reads a single run is `section(rows, run, report)` -> its blocks, or None when
the run has no such cases (then it adds nothing, not even its heading); per_run gives it every run in turn. One that
reads all runs at once is `section(report)` and is listed as it is. Adding a kind of case's section: one module here
and its name in the kinds' line of SECTIONS (a kind's section writes its own heading).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from bench.report.blocks import Block, Heading
from bench.report.load import RunInfo
from bench.report.sections import (
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
    """What the sections read: the runs (oldest first), all their rows, and run_id -> {figure name: PNG file}."""

    runs: list[RunInfo]
    frame: pd.DataFrame
    figures: dict[str, dict[str, str]]

    @property
    def several(self) -> bool:
        return len(self.runs) > 1


RunSection = Callable[[pd.DataFrame, RunInfo, Report], list[Block] | None]
Section = Callable[[Report], list[Block] | None]


def per_run(*sections: RunSection, heading: str | None = None) -> Section:
    """Run by run, each section's blocks for that run's rows; under `heading` (with the run's id when there are
    several) when given, else under the headings the sections write. Several sections interleave: a run's blocks of
    every section come before the next run's, so each run's kinds of case stay together."""

    def section(report: Report) -> list[Block]:
        blocks: list[Block] = []
        for run in report.runs:
            rows = report.frame[report.frame["run_id"] == run.run_id]
            for write in sections:
                said = write(rows, run, report)
                if said is None:
                    continue
                if heading is not None:
                    blocks.append(Heading(heading + (f": {run.run_id}" if report.several else "")))
                blocks += said
        return blocks

    return section


SECTIONS: tuple[Section, ...] = (
    per_run(summary.section),  # its heading names the machine too
    per_run(claims.section, heading="Claims"),
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
