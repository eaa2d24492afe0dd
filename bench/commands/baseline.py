"""`python -m bench baseline save|show|path`: the stored run each machine is compared against."""

from __future__ import annotations

import argparse
import sys

from bench.measure.environment import FINGERPRINT_FIELDS, fingerprint_diff, fingerprint_key
from bench.regress import baseline
from bench.results import read_run

help = "save, list or locate the baseline that `compare` checks this machine against"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    save = actions.add_parser("save", help="store results file(s) as the baseline of the machine that ran them")
    save.add_argument("results", nargs="+",
                      help="one run, or several runs of the same sweep to pool (recommended: 3+, see README)")
    show = actions.add_parser("show", help="list stored baselines and which one matches this machine")
    path = actions.add_parser("path", help="print the baseline file of this machine (exit 2 if none)")
    path.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when present, else cpu")
    path.add_argument("--like", metavar="RESULTS",
                      help="the machine that ran this results file instead of this process (same --threads, device)")
    path.add_argument("--closest", action="store_true",
                      help="without an exact match, print the same-device baseline differing least (use --normalize)")
    for sub in (save, show, path):
        sub.add_argument("--dir", default=str(baseline.DEFAULT_DIR), help="baseline folder (default %(default)s)")


def _machines() -> list[dict]:
    devices = ["cpu"] + (["cuda"] if baseline.default_device() == "cuda" else [])
    return [baseline.current_fingerprint(d) for d in devices]


def run(args: argparse.Namespace) -> int:
    if args.action == "save":
        target = baseline.save(args.results, args.dir)
        print(target)
        return 0
    if args.action == "path":
        if args.like:
            fp = read_run(args.like).fingerprint
            if fp is None:
                raise baseline.BaselineError(f"{args.like}: records no machine fingerprint")
        else:
            fp = baseline.current_fingerprint(args.device or baseline.default_device())
        found = baseline.find(fp, args.dir)
        if found is not None:
            print(found)
            return 0
        near = baseline.closest(fp, args.dir) if args.closest else None
        if near is None:
            raise baseline.BaselineError(f"no baseline for this machine ({fingerprint_key(fp)}) in "
                                         f"{args.dir}; save one with `python -m bench baseline save RESULTS`")
        print(f"note: no exact baseline; closest differs in {'; '.join(near[1])} (compare with --normalize)",
              file=sys.stderr)
        print(near[0])
        return 0
    items = baseline.stored(args.dir)
    mine = {fingerprint_key(fp): fp for fp in _machines()}
    if not items:
        print(f"no baselines in {args.dir}; save one with `python -m bench baseline save RESULTS`")
    for item in items:
        if item.error:
            print(f"{item.path}  (unreadable: {item.error})")
            continue
        here = item.fingerprint is not None and any(not fingerprint_diff(item.fingerprint, fp)
                                                    for fp in mine.values())
        print(f"{item.path}{'  <- this machine' if here else ''}")
        print("  " + ", ".join(f"{k} {item.fingerprint.get(k)!r}" for k in FINGERPRINT_FIELDS)
              if item.fingerprint else "  no fingerprint")
        print(f"  profile {item.profile}, {item.n_cases} cases, {item.passes} pass(es): {', '.join(item.run_ids)}"
              + (f", saved {item.saved}" if item.saved else ""))
    for key, fp in mine.items():
        if not any(item.path.stem == key for item in items):
            print(f"this machine ({fp['device']}): {key} has no baseline")
    return 0
