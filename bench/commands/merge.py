"""`python -m bench merge`: the shards of one sweep (`bench run --shard K/N`) as one results file."""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

from bench.results import ResultsError, RunDocument, as_run, read_run, write_atomic

help = "merge the results files of a sharded sweep into one, matching cases by case_id"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shards", nargs="+", type=Path, help="results files of the shards")
    parser.add_argument("--out", type=Path, required=True, help="the merged results file (must not exist)")


def merge_shards(docs: list[RunDocument | dict], labels: list[str]) -> RunDocument:
    """One run from shards of one profile on one kind of machine; a case in two shards must agree."""
    docs = [as_run(d) for d in docs]
    first = docs[0].meta
    merged = copy.deepcopy(docs[0])
    merged.replace_entries([])
    seen: dict[str, str] = {}
    for doc, label in zip(docs, labels, strict=True):
        for key in ("profile", "fingerprint", "axes"):
            if getattr(doc.meta, key) != getattr(first, key):
                raise ResultsError(f"{label}: its {key} differs from {labels[0]}'s; not shards of one sweep")
        for entry in doc.entries():
            case_id = entry["extra_info"]["case_id"]
            if case_id in seen:
                raise ResultsError(f"{label}: case {case_id} is also in {seen[case_id]}")
            seen[case_id] = label
            merged.add(copy.deepcopy(entry))
    merged.meta.complete = all(d.meta.complete for d in docs)
    merged.meta.run_id = f"{first.run_id}-merged{len(docs)}"
    merged.meta.shards = [d.meta.run_id for d in docs]
    merged.meta.sweep_id = None  # the merged case list is no single shard's: --resume works on the shards
    return merged


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
