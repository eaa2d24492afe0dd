"""Reports: results files -> tidy DataFrame (load) -> claims and figures -> index.html, report.md, tidy.csv.

build_report and write_report are imported on first use: the loader, the claims and the document can be
used without importing matplotlib.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.analysis.load import COLUMNS, load_results, read_results

if TYPE_CHECKING:
    from bench.report.render import build_report, write_report


def __getattr__(name: str) -> Any:
    if name in ("build_report", "write_report"):
        from bench.report import render

        return getattr(render, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["COLUMNS", "build_report", "load_results", "read_results", "write_report"]
