"""The figures section: the run's figures in catalogue order (bench.report.catalogue), each with its title and the
sentence on how to read it; the PNGs are drawn before the document is built, so this module never imports
matplotlib."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from bench.report.blocks import Block, Image, Para
from bench.report.catalogue import FIGURES
from bench.report.load import RunInfo

if TYPE_CHECKING:
    from bench.report.sections import Report


def section(df: pd.DataFrame, run: RunInfo, report: Report) -> list[Block]:
    files = report.figures.get(run.run_id, {})  # figure name -> PNG file, only the figures that had data
    return ([Image(file, FIGURES[name].title, FIGURES[name].how_to_read) for name, file in files.items()]
            or [Para("No figure has data in this run.")])
