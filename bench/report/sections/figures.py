"""The figures section: the run's figures in catalogue order (bench.report.catalogue) that no claim's section shows
(bench.claims.spec.ClaimSpec.figures), each with its title and the sentence on how to read it; the PNGs are drawn
before the document is built, so this module never imports matplotlib."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from bench.analysis.load import RunInfo
from bench.claims import CLAIMS
from bench.report.blocks import Block, Image, Para
from bench.report.catalogue import FIGURES

if TYPE_CHECKING:
    from bench.report.sections import Report


BESIDE_CLAIMS = {name for spec in CLAIMS for name in spec.figures}  # drawn in the claims' sections


def section(df: pd.DataFrame, run: RunInfo, report: Report) -> list[Block]:
    files = report.figures.get(run.run_id, {})  # figure name -> PNG file, only the figures that had data
    return ([Image(file, FIGURES[name].title, FIGURES[name].how_to_read) for name, file in files.items()
             if name not in BESIDE_CLAIMS] or [Para("No other figure has data in this run.")])
