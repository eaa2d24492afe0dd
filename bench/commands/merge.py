"""`python -m bench merge`: the shards of one sweep (`bench run --shard K/N`) as one results file."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.results import ResultsError, read_run, write_atomic
from bench.results.merge import merge_shards

help = "merge the results files of a sharded sweep into one, matching cases by case_id"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shards", nargs="+", type=Path, help="results files of the shards")
    parser.add_argument("--out", type=Path, required=True, help="the merged results file (must not exist)")


def run(args: argparse.Namespace) -> int:
    if args.out.exists():
        raise ResultsError(f"{args.out} exists; merge into a new file")
    docs = [read_run(p) for p in args.shards]
    merged = merge_shards(docs, [str(p) for p in args.shards])
    write_atomic(args.out, merged)
    n = len(merged.entries())
    print(f"{args.out}: {n} cases from {len(docs)} shards" + ("" if merged.meta.complete else
                                                             " (some shard is incomplete)"))
    return 0
