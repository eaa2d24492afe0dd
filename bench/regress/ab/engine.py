"""Interleaved A/B: the same cases measured by two revisions on one machine, in randomised ABBA blocks.

Each case is timed in `blocks` blocks; a block is ABBA or BAAB (a coin flip), each letter one slice: the side's
Runner checks the case and times it for a share of the case's budget. A slow spell of the machine therefore lands
on both sides alike, and neither side always goes first. ab.rounds turns both sides' slices into the rounds
compared (each slice's fastest half, every block at one level); each side's are pooled into one record, so the two
sides become two ordinary run documents for bench.regress.compare.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.regress.ab import git
from bench.regress.ab.git import AbError
from bench.regress.ab.rounds import judged_rounds
from bench.regress.ab.side import Side, running_attnbench
from bench.results import RunDocument, RunMeta
from bench.results.entry import case_entry, median_of, pooled_entry


def schedule(blocks: int, rng: random.Random) -> list[str]:
    """The order of the slices of one case: `blocks` blocks, each ABBA or BAAB at random ('A': the revision)."""
    return [s for _ in range(blocks) for s in rng.choice(("ABBA", "BAAB"))]


@dataclass
class Slices:
    """What one side measured of one case so far."""

    records: list[dict] = field(default_factory=list)
    samples: list[list[float]] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)  # the ABBA block of each slice

    @property
    def failed(self) -> bool:
        return bool(self.records) and self.records[0].get("status") != "ok"


def pooled(slices: Slices, rounds: list[float] | None = None) -> dict:
    """One results entry from a side's slices of a case: the judged rounds (bench.regress.ab.rounds; default: all
    rounds pooled) as its statistics, the raw slices kept in the record as ab_slices ({"block", "rounds"} each)."""
    record = dict(slices.records[0])
    record["ab_slices"] = [{"block": k, "rounds": r} for k, r in zip(slices.blocks, slices.samples, strict=True)]
    entry = case_entry(record, name=f"ab[{record['case_id']}]", group=None)
    if slices.failed or not any(slices.samples):
        return entry
    rounds = rounds if rounds is not None else [s for part in slices.samples for s in part]
    return pooled_entry(entry, rounds, median_of([r.get("peak_mem_bytes") for r in slices.records]),
                        noisy=any(bool(r.get("noisy")) for r in slices.records))


@dataclass(frozen=True)
class SideInfo:
    label: str
    commit: str | None
    plan: dict  # the worker's answer to "plan"


@dataclass(frozen=True)
class AbRun:
    """Both sides' documents, ready for bench.regress.compare, and what only one side's sweep had."""

    base: RunDocument
    current: RunDocument
    only_base: list[str]
    only_current: list[str]
    seed: int
    blocks: int


def _document(info: SideInfo, entries: list[dict], repo: Path, fingerprint: dict, profile: str | None,
              dirty: bool) -> RunDocument:
    meta = RunMeta(run_id=info.label, profile=profile, complete=True, cases=len(entries),
                   calibration=info.plan["calibration"], fingerprint=fingerprint)
    doc = RunDocument(meta=meta, machine_info={"attnbench": {"git_commit": info.commit, "ab_side": info.label}},
                      commit_info=git.commit_info(repo, info.commit) | ({"dirty": True} if dirty else {}))
    for entry in entries:
        doc.add(entry)
    return doc


def measure_case(case_id: str, sides: dict[str, Side], order: list[str]) -> dict[str, Slices]:
    """Run a case's slices in `order`; once both sides ran it, a side where it is not ok ends the case."""
    got = {name: Slices() for name in sides}
    for i, name in enumerate(order):
        if all(s.records for s in got.values()) and any(s.failed for s in got.values()):
            break  # a status change (or a case unsupported on both sides) needs no timing
        if got[name].failed:
            continue
        answer = sides[name].ask({"cmd": "run", "case": case_id})
        got[name].records.append(answer["record"])
        got[name].samples.append([float(x) for x in answer["samples"]])
        got[name].blocks.append(i // 4)
    return got


def run_ab(repo: Path, rev: str | None, values: dict[str, Any], blocks: int = 3, seed: int | None = None,
           env: dict[str, str] | None = None, say: Callable[[str], None] | None = None,
           pythons: tuple[str, str] | None = None) -> AbRun:
    """Measure the sweep that `values` describe with REV (in a temporary worktree) and with the working tree; with
    `pythons` (A's interpreter, B's), the working tree in both, each side in its own interpreter (rev: None)."""
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    if blocks < 1:
        raise AbError(f"--blocks {blocks}: at least one ABBA block is needed")
    commit = git.resolve(repo, rev or "HEAD")
    seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
    rng = random.Random(seed)
    request = {"cmd": "plan", "values": values, "slices": 2 * blocks}
    # a cancelled CI job gets SIGTERM: end like Ctrl-C, so the workers stop and the worktree is removed
    main_thread = threading.current_thread() is threading.main_thread()  # only it may set signal handlers
    previous = signal.signal(signal.SIGTERM, _interrupt) if main_thread else None
    try:
        return _run_ab(repo, rev or "HEAD", commit, values, blocks, seed, rng, request, env, say, pythons)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def pinned(threads: Any) -> dict[str, str]:
    """Both workers pinned to the same CPUs (the last `threads` this process may use), as ATTNBENCH_AB_CPUS.

    Two processes left to the scheduler can settle on different cores for the whole run, and on a shared machine
    one core can be steadily slower than another (a busy sibling hyperthread, interrupts): a difference no ABBA
    order cancels, which showed up as A/A cases 1.3x apart. On the same cores, the sides only differ in their code.
    Empty when affinity cannot be set or the threads need every CPU anyway."""
    try:
        n, cpus = int(threads), sorted(os.sched_getaffinity(0))
    except (TypeError, ValueError, AttributeError):
        return {}
    return {"ATTNBENCH_AB_CPUS": ",".join(map(str, cpus[-n:]))} if 0 < n < len(cpus) else {}


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _run_ab(repo: Path, rev: str, commit: str, values: dict[str, Any], blocks: int, seed: int, rng: random.Random,
            request: dict, env: dict[str, str] | None, say: Callable[[str], None],
            pythons: tuple[str, str] | None = None) -> AbRun:
    # two interpreters: one tree (the working tree) for both sides, no worktree
    with (contextlib.nullcontext(repo) if pythons else git.worktree(repo, commit)) as tree:
        base_label = f"{rev} ({commit[:12]})" if not commit.startswith(rev) else commit[:12]
        env = {**(env or {}), **pinned(values.get("threads"))}
        # a user's repository: both sides run the running attnbench, each side the user's code of its tree
        bench_from = None if git.is_attnbench(repo) else running_attnbench()
        if pythons:
            base_label, current_label = f"python-a {pythons[0]}", f"python-b {pythons[1]}"
            sides = {"A": Side(base_label, repo, env, bench_from, pythons[0]),
                     "B": Side(current_label, repo, env, bench_from, pythons[1])}
            say(f"A = {pythons[0]}; B = {pythons[1]}; both the working tree of {repo}")
        else:
            current_label = "working tree"
            sides = {"A": Side(base_label, tree, env, bench_from), "B": Side("working tree", repo, env, bench_from)}
            say(f"A = {git.describe(repo, commit)}; B = the working tree of {repo}")
        try:
            plans = {name: side.ask(request) for name, side in sides.items()}
            ids = {name: plan["cases"] for name, plan in plans.items()}
            common = [c for c in ids["B"] if c in set(ids["A"])]
            only_a = [c for c in ids["A"] if c not in set(ids["B"])]
            only_b = [c for c in ids["B"] if c not in set(ids["A"])]
            if not common:
                raise AbError(f"no case in common: {base_label} plans {len(ids['A'])} cases, the working tree "
                              f"{len(ids['B'])}; their case ids differ")
            say(f"{len(common)} cases x {blocks} ABBA blocks (seed {seed}); {len(only_a)} only in A, "
                f"{len(only_b)} only in B")
            entries: dict[str, list[dict]] = {"A": [], "B": []}
            for n, case_id in enumerate(common, 1):
                got = measure_case(case_id, sides, schedule(blocks, rng))
                judged = {"A": None, "B": None}
                if not any(s.failed or not s.samples for s in got.values()):
                    judged["A"], judged["B"] = judged_rounds(*(list(zip(got[n].blocks, got[n].samples, strict=True))
                                                              for n in ("A", "B")))
                for name in sides:
                    entries[name].append(pooled(got[name], judged[name]))
                say(_progress(n, len(common), case_id, entries["A"][-1], entries["B"][-1]))
        finally:
            for side in sides.values():
                side.close()
    head = git.resolve(repo, "HEAD")
    fingerprint = plans["B"]["fingerprint"]  # one machine, one environment: the sides differ only in their code
    profile = values.get("profile") or "custom"
    base = _document(SideInfo(base_label, commit, plans["A"]), entries["A"], repo, fingerprint, profile, False)
    current = _document(SideInfo(current_label, head, plans["B"]), entries["B"], repo, fingerprint, profile,
                        git.is_dirty(repo))
    return AbRun(base, current, only_a, only_b, seed, blocks)


def _progress(n: int, total: int, case_id: str, a: dict, b: dict) -> str:
    def show(entry: dict) -> str:
        rec = entry["extra_info"]
        if rec.get("status") != "ok" or not entry["stats"]:
            return rec.get("status", "?")
        return f"{rec['median_s'] * 1e3:.3f} ms"

    ra, rb = a["extra_info"].get("median_s"), b["extra_info"].get("median_s")
    ratio = f"  x{rb / ra:.2f}" if a["stats"] and b["stats"] and ra and rb and math.isfinite(rb / ra) else ""
    return f"[{n}/{total}] {case_id}  A {show(a)}  B {show(b)}{ratio}"
