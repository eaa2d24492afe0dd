"""`python -m bench ab REV`: REV against the working tree on this machine, interleaved; exit 0 / 1 / 2 as compare."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from bench.commands.run import TUNED_MALLOC
from bench.engine import sweeps
from bench.errors import UsageError
from bench.regress.ab import git
from bench.regress.ab.auto import DEFAULT_TIME_S, AutoBlocks, parse_blocks, parse_time
from bench.regress.ab.auto import START as AUTO_START
from bench.regress.ab.auto import STEP as AUTO_STEP
from bench.regress.ab.engine import AbRun, run_ab
from bench.regress.ab.verdict import judge
from bench.regress.compare import METRICS, Comparison, Rule
from bench.regress.noise import parse_threshold
from bench.regress.render import RENDERERS, emit
from bench.results import write_atomic

help = ("A/B: measure REV (a branch, tag or commit) and the working tree alternately on this machine and compare "
        "them case by case; exit 1 on a regression, 2 when unusable")

# Half of compare's 10%: interleaving on one machine removes the run-to-run drift a stored baseline carries, and each
# case is judged by its own blocks. What it catches, and its A/A false alarms: bench.regress.power.
DEFAULT_THRESHOLD = "5%"
SWEEP_OPTIONS = ("profile", "device", "threads")  # bench run's options that shape the sweep (no files, no shards)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("rev", nargs="?", help="the baseline revision: a branch, tag or commit of this repository "
                   "(not with --python-a/-b)")
    p.add_argument("--python-a", metavar="PATH", help="with --python-b: the working tree in two interpreters "
                   "(e.g. two torch versions), A's")
    p.add_argument("--python-b", metavar="PATH", help="B's interpreter (see --python-a)")
    p.add_argument("--profile", help="quick | default | heads | decode | full (default: quick)")
    p.add_argument("--device", choices=["cpu", "cuda"], help="cpu or cuda (default: cuda when present, else cpu)")
    p.add_argument("--threads", default="1",
                   help="torch CPU threads of both sides (default 1: on a shared CPU, a multi-threaded op waits for "
                        "its slowest thread, so one busy core stalls every call)")
    for f in sweeps.axis_fields():
        p.add_argument(f"--{f.metadata['flag']}", dest=f.name, help=f.metadata["help"], default=None)
    p.add_argument("--blocks", default="auto",
                   help="ABBA blocks per case, at least 2 (each side times each case twice per block), or auto "
                        f"(default): {AUTO_START} blocks, then {AUTO_STEP} more at a time for each case whose interval "
                        "straddles the threshold, until it decides or --ab-time is spent")
    p.add_argument("--ab-time", default=f"{DEFAULT_TIME_S:g}",
                   help=f"with --blocks auto: after this long (seconds, or 5m) no more blocks are added (default "
                        f"{DEFAULT_TIME_S:g}); the first blocks of every case are always measured")
    p.add_argument("--seed", type=int, help="seed of the blocks' random order (default: a fresh one, printed)")
    p.add_argument("--malloc", choices=["default", "tuned"], default="tuned",
                   help="allocator of both sides (CPU): tuned (default) keeps large blocks in glibc's heap and puts "
                        "torch's blocks of 2 MiB or more on huge pages, so timings do not flip between processes")
    p.add_argument("--metric", choices=list(METRICS), default="median", help="statistic of the rounds compared")
    p.add_argument("--threshold", default=DEFAULT_THRESHOLD,
                   help="smallest change that counts: 5%% or 0.05 (default 5%%, half of compare's 10%%: both sides run "
                        "interleaved on one machine; a case regresses when its blocks' interval lies above it)")
    p.add_argument("--format", choices=list(RENDERERS), default="text", help="text table, markdown, or json")
    p.add_argument("--output", metavar="FILE", help="also write the report to FILE (e.g. for a CI job summary)")
    p.add_argument("--save", metavar="DIR", type=Path,
                   help="also write both sides' run documents to DIR (ab-base.json, ab-current.json)")
    p.add_argument("--repo", type=Path, default=Path("."),
                   help="the git checkout whose revisions are compared: attnbench's, or your own with "
                   "--backend MODULE:FUNCTION (default: the current one)")


def run(args: argparse.Namespace) -> int:
    rule = Rule(metric=args.metric, threshold=parse_threshold(args.threshold))  # bad input before any work
    blocks = parse_blocks(args.blocks)
    auto = AutoBlocks(time_s=parse_time(args.ab_time)) if blocks is None else None
    values = {name: getattr(args, name) for name in (*SWEEP_OPTIONS, *(f.name for f in sweeps.axis_fields()))}
    values = {k: v for k, v in values.items() if v is not None}
    values.setdefault("profile", "traces" if values.get("workloads") else "quick")  # as `bench run` chooses
    pythons = None
    if args.python_a or args.python_b:
        if not (args.python_a and args.python_b) or args.rev:
            raise UsageError("--python-a and --python-b go together, and without REV (both sides run the working "
                             "tree)")
        pythons = (args.python_a, args.python_b)
    elif not args.rev:
        raise UsageError("give REV (the baseline revision), or --python-a PATH --python-b PATH")
    repo = git.checkout_root(args.repo)
    if not git.is_attnbench(repo) and not values.get("backends"):
        raise UsageError(f"{repo} is not attnbench's checkout, so `bench ab` compares your code in it: name your "
                         "backend with --backend MODULE:FUNCTION (or an attnbench.backends entry point)")
    env = dict(TUNED_MALLOC) if args.malloc == "tuned" else {}
    ab = run_ab(repo, args.rev, values, blocks=blocks or AUTO_START, seed=args.seed, env=env, pythons=pythons,
                rule=rule, auto=auto)
    if args.save:
        write_atomic(args.save / "ab-base.json", ab.base)
        write_atomic(args.save / "ab-current.json", ab.current)
    # each case judged by its own blocks: machine drift hits both sides of a block alike, so no GEMM control
    comparison = with_notes(judge(ab.base, ab.current, rule), ab)
    return emit(comparison, args.format, args.output)


def with_notes(comparison: Comparison, ab: AbRun) -> Comparison:
    """The comparison with what A/B adds: how it was measured, and the cases only one side's sweep has."""
    notes = [f"A/B on one machine: {ab.blocks} randomised ABBA blocks per case (seed {ab.seed}), each block in "
             f"fresh worker processes ({ab.workers} a side in all)"]
    if ab.auto and ab.extended:
        notes.append(f"--blocks auto: {len(ab.extended)} undecided cases got more blocks (up to "
                     f"{max(ab.extended.values())}; --ab-time {ab.auto.time_s:g} s)")
    elif ab.auto and comparison.summary.counts.get("inconclusive"):
        notes.append(f"--blocks auto: no case got more blocks: the first {ab.blocks} blocks of every case took all "
                     f"of --ab-time ({ab.auto.time_s:g} s)")
    elif ab.auto:
        notes.append(f"--blocks auto: every case decided, or failed, within its first {ab.blocks} blocks")
    for side, ids in (("REV", ab.only_base), ("the working tree", ab.only_current)):
        if ids:
            shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
            notes.append(f"{len(ids)} cases only in {side}'s sweep, not measured: {shown}")
    summary = dataclasses.replace(comparison.summary, warnings=(*comparison.summary.warnings, *notes))
    return dataclasses.replace(comparison, summary=summary)
