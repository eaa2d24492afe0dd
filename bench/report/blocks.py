"""What a report is made of: format-free blocks (headings, paragraphs, tables, figures) and the cell text in them.

The sections (bench.report.sections) write blocks; bench.report.render turns the same blocks into HTML and Markdown,
so both say the same thing. Cells are plain text taken partly from results files: escaping is the renderer's job,
never done (or skipped) here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Para:
    text: str
    kind: str = "text"  # text | warning | caption


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]
    verdict_column: int | None = None  # colour this column's holds / does not hold in HTML


@dataclass(frozen=True)
class Image:
    file: str  # PNG file name in the report folder (ours, never from a results file)
    title: str
    caption: str


Block = Heading | Para | Table | Image


def text(value: Any) -> str:
    """A table cell: missing -> an em dash, floats short."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def times(x: float | None) -> str:
    """A ratio as '1.23×'; missing or not finite -> an em dash."""
    return "—" if x is None or not math.isfinite(x) else f"{x:.2f}×"
