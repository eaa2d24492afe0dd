"""What a report is made of: format-free blocks (headings, paragraphs, tables, figures, a fold, two blocks side by
side) and the cell text in them.

The sections (bench.report.sections) write blocks; bench.report.render turns the same blocks into HTML and Markdown,
so both say the same thing. Cells are plain text taken partly from results files (or a Link to a heading of the
report): escaping is the renderer's job, never done (or skipped) here. A table cell says at most a sentence,
CELL_LIMIT characters (tests/test_report.py holds a rendered report to it): what takes longer is a paragraph.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

CELL_LIMIT = 200  # characters of a table cell: a sentence


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2
    anchor: str = ""  # an id a Link can point to (ours: letters, digits and hyphens)


@dataclass(frozen=True)
class Para:
    text: str
    kind: str = "text"  # text | warning | caption | answer (the sentence a claim's section opens with)


@dataclass(frozen=True)
class Link:
    """A cell that links to a heading of the report by its anchor."""

    text: str
    anchor: str


Cell = str | Link


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[Cell]]
    verdict_columns: tuple[int, ...] = ()  # colour these columns' holds / does not hold in HTML, bold in Markdown


@dataclass(frozen=True)
class Image:
    file: str  # PNG file name in the report folder (ours, never from a results file)
    title: str
    caption: str
    heading: bool = True  # its title a heading (the figures section), else a bold line (beside a claim)


@dataclass(frozen=True)
class Fold:
    """Blocks folded away under a one-line summary in HTML (<details>); Markdown shows them as they are."""

    summary: str
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class Beside:
    """Two columns of blocks side by side in HTML (text, and the figure that shows it); one after the other in
    Markdown."""

    main: tuple[Block, ...]
    aside: tuple[Block, ...]


Block = Heading | Para | Table | Image | Fold | Beside


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


def sentence(text: str, limit: int = CELL_LIMIT) -> str:
    """A text's first sentence, cut at a word to `limit` characters ('…' where cut): what a cell says of a longer
    text (an error message, a reason) kept whole elsewhere."""
    first = text.split(". ", 1)[0].strip().rstrip(".")
    if len(first) < limit:
        return first + "."
    return first[:limit - 1].rsplit(" ", 1)[0] + "…"
