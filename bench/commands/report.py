"""`python -m bench report RESULTS... [--out DIR]`: results files or folders -> a report folder."""

from __future__ import annotations

import argparse
import sys

help = "build a report (index.html, report.md, tidy.csv, claims.csv, figures) from results files or folders"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", metavar="RESULTS",
                        help="results files, or folders searched for *.json (baselines/ skipped)")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="write the report into DIR (default: reports/<run-id>/)")


def run(args: argparse.Namespace) -> int:
    # imported here: pandas and matplotlib load only for this command, not for every `python -m bench`
    from bench.analysis.load import load_results
    from bench.report.render import write_report

    loaded = load_results(args.results)
    for error in loaded.errors:
        print(f"skipped: {error}", file=sys.stderr)
    if not loaded.runs:
        print("error: no results file could be read", file=sys.stderr)
        return 2
    print(write_report(loaded, args.out))
    return 0
