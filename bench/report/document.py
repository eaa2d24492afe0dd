"""What the report says, as format-free blocks (bench.report.blocks): a title, then every section of
bench.report.sections.SECTIONS in its order.

The document names no section itself: a section is a module of bench.report.sections and one entry in SECTIONS.
render.py turns the blocks into HTML and Markdown, so both say the same thing.
"""

from __future__ import annotations

from bench.analysis.load import Loaded
from bench.analysis.verdict import Verdict
from bench.claims import verdicts
from bench.report.blocks import Block, Heading, Image, Para, Table
from bench.report.sections import SECTIONS, Report


def judged(loaded: Loaded) -> dict[str, list[Verdict]]:
    """Every run's claims' verdicts, judged once for the report (its sections and claims.csv read these)."""
    return {run.run_id: verdicts(loaded.frame[loaded.frame["run_id"] == run.run_id], run.meta) for run in loaded.runs}


def build(loaded: Loaded, figures: dict[str, dict[str, str]],
          claims: dict[str, list[Verdict]] | None = None) -> list[Block]:
    """The whole report; `figures` maps run_id -> {figure name: PNG file} of the figures drawn for that run, `claims`
    run_id -> its verdicts (judged here when not given)."""
    runs = loaded.runs
    title = runs[0].run_id if len(runs) == 1 else " vs ".join(r.run_id for r in runs)
    blocks: list[Block] = [Heading(f"attnbench report: {title}", 1)]
    if loaded.errors:
        blocks.append(Para("Inputs that could not be read and were left out: " + " | ".join(loaded.errors),
                           "warning"))
    report = Report(runs, loaded.frame, figures, claims if claims is not None else judged(loaded))
    for section in SECTIONS:
        blocks += section(report) or []
    return blocks


__all__ = ["Block", "Heading", "Image", "Para", "Table", "build", "judged"]
