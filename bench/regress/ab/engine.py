"""Interleaved A/B: the same cases measured by two revisions on one machine, in randomised ABBA blocks.

Each case is timed in `blocks` blocks; a block is ABBA or BAAB (a coin flip), each letter one slice: the side's
Runner checks the case and times it for a share of the case's budget. A slow spell of the machine therefore lands
on both sides alike, and neither side always goes first. ab.rounds turns both sides' slices into the rounds
compared (each slice's fastest half, every block at one level); each side's are pooled into one record, so the two
sides become two ordinary run documents for bench.regress.compare.

Every block of a case runs in fresh worker processes: the A/B goes in rounds, one block of every case per round,
and both sides' workers are restarted between rounds (--blocks auto: each extra block is a round of its own). A
process's state (where its buffers landed, what it compiled) lasts for all it measures and reads as a change of
code; in fresh processes it is one more part of each block's noise, which the interval then counts. Each slice
records its worker (rounds.WORKERS_KEY), and a case is judged by one ratio per worker pair (ab.verdict). The cost:
a restart per round (the imports; a restarted worker reuses its side's first calibration) and, per case and
round, a slice that runs the whole engine (check, warm-up, compile) instead of only timing again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.regress.ab import git
from bench.regress.ab.auto import AutoBlocks, more, to_extend
from bench.regress.ab.git import AbError
from bench.regress.ab.rounds import WORKERS_KEY, judged_rounds
from bench.regress.ab.side import Side, running_attnbench
from bench.regress.ab.verdict import slice_stats
from bench.regress.blocks import MIN_BLOCKS, BlockStats
from bench.regress.noise import Rule
from bench.results import RunDocument, RunMeta
from bench.results.entry import Entry, Slice, case_entry, median_of, pooled_entry, unknown_fields
from bench.results.meta import Calibration
from bench.results.record import Record

# A slice shorter than this holds a handful of rounds of a millisecond kernel, and each block's ratio then scatters
# with whatever the host did in those few milliseconds; a slice also costs its checks and warm-up (about 0.3 s
# each on a loaded 2-core machine), so a longer timed part adds little to the A/B's time.
MIN_SLICE_S = 0.1


def schedule(blocks: int, rng: random.Random) -> list[str]:
    """The order of the slices of one case: `blocks` blocks, each ABBA or BAAB at random ('A': the revision)."""
    return [s for _ in range(blocks) for s in rng.choice(("ABBA", "BAAB"))]


@dataclass
class Slices:
    """What one side measured of one case so far."""

    records: list[dict] = field(default_factory=list)
    samples: list[list[float]] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)  # the ABBA block of each slice
    workers: list[int] = field(default_factory=list)  # the side's worker process (0, 1, ...) that ran each slice

    @property
    def failed(self) -> bool:
        return bool(self.records) and self.records[0].get("status") != "ok"


def pooled(slices: Slices, rounds: list[float] | None = None) -> Entry:
    """One results entry from a side's slices of a case: the judged rounds (bench.regress.ab.rounds; default: all
    rounds pooled) as its statistics, the raw slices kept as its ab_slices and their workers as WORKERS_KEY. The
    side's record is the first slice's (another revision's fields this one does not know are kept as they came)."""
    first = slices.records[0]
    record = Record.from_dict(first)
    ab = tuple(Slice(k, tuple(r)) for k, r in zip(slices.blocks, slices.samples, strict=True))
    entry = dataclasses.replace(case_entry(record, name=f"ab[{record.case_id}]", group=None, ab_slices=ab),
                                unknown=unknown_fields(first) | {WORKERS_KEY: list(slices.workers)})
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
    blocks: int  # every case's first blocks
    auto: AutoBlocks | None = None  # --blocks auto: how more blocks were added to undecided cases
    extended: dict[str, int] = field(default_factory=dict)  # case -> its blocks, for cases given more than `blocks`
    workers: int = 1  # the worker processes each side started (a fresh pair for every round of blocks)


def _document(info: SideInfo, entries: list[dict], repo: Path, fingerprint: dict, profile: str | None,
              dirty: bool) -> RunDocument:
    meta = RunMeta(run_id=info.label, profile=profile, complete=True, cases=len(entries),
                   calibration=Calibration.from_dict(info.plan["calibration"]),  # as the side's worker sent it
                   fingerprint=fingerprint)
    doc = RunDocument(meta=meta, machine_info={"attnbench": {"git_commit": info.commit, "ab_side": info.label}},
                      commit_info=git.commit_info(repo, info.commit) | ({"dirty": True} if dirty else {}))
    for entry in entries:
        doc.add(entry)
    return doc


def measure_case(case_id: str, sides: dict[str, Side], order: list[str], got: dict[str, Slices] | None = None,
                 first_block: int = 0, retime: bool = False) -> dict[str, Slices]:
    """Run a case's slices in `order` (blocks numbered from first_block, added to `got` when given); once both
    sides ran it, a side where it is not ok ends the case. retime (both workers can): a side's later slices of the
    case only time it again (bench.regress.ab.worker)."""
    got = got if got is not None else {name: Slices() for name in sides}
    for i, name in enumerate(order):
        if _done(got):
            break  # a status change (or a case unsupported on both sides) needs no timing
        if got[name].failed:
            continue
        answer = sides[name].ask({"cmd": "run", "case": case_id, "retime": retime})
        got[name].records.append(answer["record"])
        got[name].samples.append([float(x) for x in answer["samples"]])
        got[name].blocks.append(first_block + i // 4)
        got[name].workers.append(sides[name].worker)
    return got


def measure_rounds(cases: list[str], sides: dict[str, Side], blocks: int, rng: random.Random,
                   fresh: Callable[[], None], say: Callable[[str], None], rule: Rule,
                   retime: bool = False) -> dict[str, dict[str, Slices]]:
    """Every case's first `blocks` blocks, in rounds: each round one block of every case still timed, and fresh()
    (both sides' workers restarted) between rounds, so each block of a case runs in its own pair of processes."""
    got = {case_id: {name: Slices() for name in sides} for case_id in cases}
    for block in range(blocks):
        todo = [(n, case_id) for n, case_id in enumerate(cases, 1) if not _done(got[case_id])]
        if not todo:
            break  # every case failed on a side: nothing left to time
        if block:
            fresh()
        for n, case_id in todo:
            measure_case(case_id, sides, schedule(1, rng), got[case_id], block, retime)
            say(_progress(f"{n}/{len(cases)} block {block + 1}", case_id, got[case_id], rule))
    return got


def fresh_workers(sides: dict[str, Side], request: dict, plans: dict[str, dict]) -> None:
    """Both sides' workers replaced by fresh processes and planned as the first ones were, with the first ones'
    calibration (the same machine; measuring it took a restart 2-3 s). Both start before either is asked, so their
    imports overlap."""
    for side in sides.values():
        side.restart()
    for name, side in sides.items():
        side.ask({**request, "calibration": plans[name]["calibration"]})


def _done(got: dict[str, Slices]) -> bool:
    """Whether a case needs no more blocks: a side where it is not ok (bench.regress.compare judges the status)."""
    return all(s.records for s in got.values()) and any(s.failed for s in got.values())


def run_ab(repo: Path, rev: str | None, values: dict[str, Any], blocks: int = MIN_BLOCKS, seed: int | None = None,
           env: dict[str, str] | None = None, say: Callable[[str], None] | None = None,
           pythons: tuple[str, str] | None = None, rule: Rule | None = None, auto: AutoBlocks | None = None) -> AbRun:
    """Measure the sweep that `values` describe with REV (in a temporary worktree) and with the working tree; with
    `pythons` (A's interpreter, B's), the working tree in both, each side in its own interpreter (rev: None).
    auto: `blocks` is auto.start, and undecided cases (by `rule`) get more blocks (bench.regress.ab.auto)."""
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    rule = rule or Rule()
    blocks = auto.start if auto else blocks
    if blocks < MIN_BLOCKS:
        raise AbError(f"--blocks {blocks}: at least {MIN_BLOCKS} ABBA blocks are needed (fewer give no interval)")
    commit = git.resolve(repo, rev or "HEAD")
    seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
    rng = random.Random(seed)
    request = {"cmd": "plan", "values": values, "slices": 2 * blocks, "min_slice_s": MIN_SLICE_S}
    # a cancelled CI job gets SIGTERM: end like Ctrl-C, so the workers stop and the worktree is removed
    main_thread = threading.current_thread() is threading.main_thread()  # only it may set signal handlers
    previous = signal.signal(signal.SIGTERM, _interrupt) if main_thread else None
    try:
        return _run_ab(repo, rev or "HEAD", commit, values, blocks, seed, rng, request, env, say, pythons, rule, auto)
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
            pythons: tuple[str, str] | None, rule: Rule, auto: AutoBlocks | None) -> AbRun:
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
            say(f"{len(common)} cases x {blocks} ABBA blocks, each block in fresh workers (seed {seed}); "
                f"{len(only_a)} only in A, {len(only_b)} only in B")
            started = time.monotonic()
            retime = all(plan.get("retime") for plan in plans.values())

            def fresh() -> None:
                fresh_workers(sides, request, plans)

            got = measure_rounds(common, sides, blocks, rng, fresh, say, rule, retime)
            if auto:
                _extend(got, sides, rng, rule, auto, started, say, fresh, retime)
            entries: dict[str, list[dict]] = {"A": [], "B": []}
            for case_id in common:
                for name, entry in _entries(got[case_id]).items():
                    entries[name].append(entry)
        finally:
            for side in sides.values():
                side.close()
    head = git.resolve(repo, "HEAD")
    fingerprint = plans["B"]["fingerprint"]  # one machine, one environment: the sides differ only in their code
    profile = values.get("profile") or "custom"
    base = _document(SideInfo(base_label, commit, plans["A"]), entries["A"], repo, fingerprint, profile, False)
    current = _document(SideInfo(current_label, head, plans["B"]), entries["B"], repo, fingerprint, profile,
                        git.is_dirty(repo))
    extended = {cid: len(set(g["A"].blocks)) for cid, g in got.items() if len(set(g["A"].blocks)) > blocks}
    return AbRun(base, current, only_a, only_b, seed, blocks, auto, extended, sides["A"].worker + 1)


def _pairs(slices: Slices) -> list[tuple[int, list[float]]]:
    return list(zip(slices.blocks, slices.samples, strict=True))


def _timed(got: dict[str, Slices]) -> bool:
    return not any(s.failed or not s.samples for s in got.values())


def case_stats(got: dict[str, Slices], rule: Rule) -> BlockStats | None:
    """The statistics of a case measured so far, one ratio per worker pair (bench.regress.ab.verdict.slice_stats);
    None when it is not timed on both sides."""
    if not _timed(got):
        return None
    return slice_stats(_pairs(got["A"]), _pairs(got["B"]), got["A"].workers, got["B"].workers, rule)


def _entries(got: dict[str, Slices]) -> dict[str, Entry]:
    """Each side's results entry of a case: its judged rounds pooled (bench.regress.ab.rounds)."""
    judged: dict[str, list[float] | None] = {"A": None, "B": None}
    if _timed(got):
        judged["A"], judged["B"] = judged_rounds(_pairs(got["A"]), _pairs(got["B"]))
    return {name: pooled(got[name], judged[name]) for name in ("A", "B")}


def _extend(got: dict[str, dict[str, Slices]], sides: dict[str, Side], rng: random.Random, rule: Rule,
            auto: AutoBlocks, started: float, say: Callable[[str], None], fresh: Callable[[], None],
            retime: bool = False) -> None:
    """--blocks auto: more blocks for the undecided cases (bench.regress.ab.auto's stop rule), `step` rounds at a
    time, each round one block of each of them in fresh workers (fresh() restarts both sides)."""
    while True:
        undecided = {cid: len(set(g["A"].blocks)) for cid, g in got.items()
                     if (st := case_stats(g, rule)) is not None and not st.decided}
        todo = to_extend(undecided, time.monotonic() - started, auto)
        if not todo:
            if undecided:
                say(f"--blocks auto: {len(undecided)} cases still inconclusive after "
                    f"{time.monotonic() - started:.0f} s (--ab-time {auto.time_s:g} s, at most {auto.max_blocks} "
                    "blocks a case)")
            return
        for i in range(auto.step):
            batch = [cid for cid in todo if i < more(undecided[cid], auto)]
            if not batch or time.monotonic() - started >= auto.time_s:
                break
            fresh()
            for cid in batch:
                if time.monotonic() - started >= auto.time_s:
                    break
                measure_case(cid, sides, schedule(1, rng), got[cid], first_block=undecided[cid] + i, retime=retime)
                say(_progress(f"+block {undecided[cid] + i + 1}", cid, got[cid], rule))


def _progress(where: str, case_id: str, got: dict[str, Slices], rule: Rule) -> str:
    def show(slices: Slices) -> str:
        if slices.failed or not slices.samples:
            return (slices.records[0].get("status") if slices.records else None) or "?"
        return f"{statistics.median(x for part in slices.samples for x in part) * 1e3:.3f} ms"

    stats = case_stats(got, rule)
    ratio = f"  x{stats.estimate:.2f} ({stats.n} worker pairs: {stats.verdict})" if stats is not None else ""
    return f"[{where}] {case_id}  A {show(got['A'])}  B {show(got['B'])}{ratio}"
