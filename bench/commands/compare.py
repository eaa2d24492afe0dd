"""`python -m bench compare BASELINE CURRENT`: verdict per case; exit 0 no regression, 1 regression, 2 bad input."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.measure.environment import fingerprint_key
from bench.regress.baseline import BaselineError, closest, find, merge_passes
from bench.regress.compare import METRICS, Rule, compare_runs
from bench.regress.noise import parse_threshold
from bench.regress.render import RENDERERS, emit
from bench.results import read_run

help = "compare a run with a baseline case by case; exit 1 on a regression, 2 on unusable input"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("baseline", help="results file of the baseline, or a baseline folder (results/baselines): "
                        "then the baseline of the machine that ran CURRENT (with --normalize: the nearest one)")
    parser.add_argument("current", nargs="+",
                        help="results file(s) of the run to check; several passes of one sweep are pooled, and a "
                             "case then regresses only when every pass is past the threshold")
    parser.add_argument("--metric", choices=list(METRICS), default="median", help="statistic of the rounds compared")
    # parsed in run(), not by argparse: a bad value must give one 'error:' line and exit 2 like other bad input
    parser.add_argument("--threshold", default="10%", help="smallest change that counts: 10%% or 0.1 (default 10%%)")
    parser.add_argument("--format", choices=list(RENDERERS), default="text", help="text table, markdown, or json")
    parser.add_argument("--normalize", action="store_true",
                        help="compare times in GEMM units (time x the run's own GEMM FLOP/s); allows other machines")
    parser.add_argument("--no-control", dest="control", action="store_false",
                        help="compare raw seconds, without the in-run GEMM control (each case's own probe, else the "
                             "run's GEMM; same machine only)")
    parser.add_argument("--output", metavar="FILE", help="also write the report to FILE (e.g. for a CI job summary)")


def run(args: argparse.Namespace) -> int:
    rule = Rule(metric=args.metric, threshold=parse_threshold(args.threshold))
    docs = [read_run(p) for p in args.current]
    current = merge_passes(docs, list(args.current)) if len(docs) > 1 else docs[0]
    base_path = Path(args.baseline)
    if base_path.is_dir():
        fp = current.fingerprint
        found = find(fp, base_path) if fp is not None else None
        if found is None and args.normalize and fp is not None:
            # other machines are acceptable once normalized: take the nearest one (the report lists what differs)
            found = (closest(fp, base_path) or (None,))[0]
        if found is None:
            key = fingerprint_key(fp) if fp is not None else "no fingerprint recorded"
            raise BaselineError(f"{base_path}: no baseline for the machine of {args.current[0]} ({key}); save one with "
                                f"`python -m bench baseline save RESULTS`")
        base_path = found
    comparison = compare_runs(read_run(base_path), current, rule, normalize=args.normalize, control=args.control)
    return emit(comparison, args.format, args.output)
