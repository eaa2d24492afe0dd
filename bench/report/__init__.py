"""Reports: results files -> tidy DataFrame (load) -> claims and figures -> index.html, report.md, tidy.csv."""

from bench.report.load import COLUMNS, load_results, read_results
from bench.report.render import build_report, write_report

__all__ = ["COLUMNS", "build_report", "load_results", "read_results", "write_report"]
