"""`python -m bench history [RESULTS ...]`: each case's median across commits, change points judged by compare."""

from __future__ import annotations

import argparse
from pathlib import Path

help = ("performance across commits: each case's median per commit (ordered by commit date), change points judged "
        "like `bench compare`, a figure per shape family and a markdown summary")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", nargs="*", default=["results"], metavar="RESULTS",
                   help="results files, or folders searched for *.json, baselines/ skipped (default: results)")
    p.add_argument("--case", metavar="PATTERN", help="only cases whose id matches (a glob, or a part of the id)")
    p.add_argument("--threshold", default="10%", help="smallest change that counts: 10%% or 0.1 (default 10%%)")
    p.add_argument("--out", type=Path, default=Path("reports/history"), metavar="DIR",
                   help="folder for history.md and the figures (default: reports/history)")


def run(args: argparse.Namespace) -> int:
    # imported here: matplotlib loads only for this command
    from bench.regress.compare import Rule
    from bench.regress.history import build_history, markdown
    from bench.regress.noise import parse_threshold
    from bench.report.figures.history import family_figures, slug

    history = build_history(args.results, args.case, Rule(threshold=parse_threshold(args.threshold)))
    args.out.mkdir(parents=True, exist_ok=True)
    figures = {}
    for fam, fig in family_figures(history).items():
        name = f"history-{slug(fam)}.png"
        fig.savefig(args.out / name, dpi=110)
        figures[fam] = name
    text = markdown(history, figures)
    (args.out / "history.md").write_text(text)
    print(text, end="")
    print(f"written: {args.out / 'history.md'}")
    return 0
