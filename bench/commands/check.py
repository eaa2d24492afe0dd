"""`python -m bench check BACKEND`: a backend against the float64 oracle, one row per case group (bench.conformance):
pass, fail (the worst error against its tolerance) or unsupported (why). Exit 1 when any group fails, else 0."""

from __future__ import annotations

import argparse
import json

import torch

from bench.conformance import VARIANT_HEADS, check
from bench.errors import UsageError
from bench.problem.shapes import DTYPES

help = "check a backend (built-in, MODULE:FUNCTION or an entry point) against the float64 reference"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("backend", help="a backend name, MODULE:FUNCTION, or an attnbench.backends entry point")
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when present, else cpu")
    parser.add_argument("--dtype", default=None, help="comma-separated dtypes (default: the ones it claims)")
    parser.add_argument("--variant", default=None, help=f"comma-separated variants (default: all of "
                                                        f"{', '.join(VARIANT_HEADS)})")
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON object")


def run(args: argparse.Namespace) -> int:
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: torch sees no CUDA device here")
    dtypes = tuple(d.strip() for d in args.dtype.split(",") if d.strip()) if args.dtype else None
    for dt in dtypes or ():
        if dt not in DTYPES:
            raise UsageError(f"--dtype {dt!r}: one of {', '.join(DTYPES)}")
    variants = tuple(v.strip() for v in args.variant.split(",") if v.strip()) if args.variant else None
    for var in variants or ():
        if var not in VARIANT_HEADS:
            raise UsageError(f"--variant {var!r}: one of {', '.join(VARIANT_HEADS)}")
    rows = check(args.backend, device, dtypes, variants)
    failed = sum(r.failed for r in rows)
    if args.json:
        print(json.dumps({"backend": args.backend, "device": device, "failed": failed,
                          "rows": [{"group": r.group.label, "status": r.status, "detail": r.detail} for r in rows]},
                         indent=2))
    else:
        print(f"{args.backend} on {device}: {len(rows)} groups, each square, Sq<Skv and decode shapes")
        width = max(len(r.group.label) for r in rows)
        for r in rows:
            print(f"{r.group.label:<{width}}  {r.status:<11}  {r.detail}")
        counts = {s: sum(r.status == s for r in rows) for s in ("pass", "fail", "error", "unsupported")}
        print(", ".join(f"{n} {s}" for s, n in counts.items() if n))
    return 1 if failed else 0
