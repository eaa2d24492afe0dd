"""`bench ab`'s verdicts: each case judged by its own ABBA blocks (bench.regress.blocks), the cross-case noise model
kept as a guard where there are enough cases.

compare_runs matches the two sides' cases and judges what needs no timing statistics (status changes, peak memory);
each case timed on both sides is then judged by its blocks' B/A ratios, read from the entries' `ab_slices`, one
ratio per pair of worker processes (the entries' ab_workers; bench.regress.ab.rounds.pair_ratios): a state of a
process that lasts for all its blocks (memory layout, a case that runs in a slow mode in one process) moves them
alike, so they count once. The guard (rule.min_cases cases or more) stays as a second check, for what all of a
side's processes share (its tree's place on disk, its import order): the other cases measure how far cases move
that way, and a case the blocks call regressed or improved must also stand out of them (|l - m| > k sigma,
bench.regress.noise), or lean with a significant group, or the A/B as a whole (the median case, m) must have moved
past the threshold the same way (interleaving cancels the machine's drift, so a move of every case is the code's).
Otherwise it is "noisy". Fewer cases: no guard.
"""

from __future__ import annotations

import dataclasses
import math

from bench.regress.ab.rounds import WORKERS_KEY, block_ratios, pair_ratios, worker_pairs
from bench.regress.blocks import BlockStats, block_stats, describe
from bench.regress.compare import compare_runs
from bench.regress.noise import NoiseModel, Rule, noise_model
from bench.regress.verdicts import VERDICTS, CaseVerdict, Comparison
from bench.results import Entry, RunDocument


def slice_stats(a: list[tuple[int, list[float]]], b: list[tuple[int, list[float]]], workers_a: list[int] | None,
                workers_b: list[int] | None, rule: Rule) -> BlockStats | None:
    """A case's statistics from both sides' (block, raw rounds) slices and the worker process of each slice, one
    ratio per worker pair (bench.regress.ab.rounds.pair_ratios); None when the sides hold no common block. Without a
    side's workers (a file from before they were recorded: one worker a side) its blocks count as one pair."""
    blocks = len(block_ratios(a, b))
    if not blocks:
        return None
    pairs = worker_pairs(_of_blocks(a, workers_a), _of_blocks(b, workers_b))
    return block_stats(pair_ratios(a, b, pairs), rule, blocks)


def _of_blocks(slices: list[tuple[int, list[float]]], workers: list[int] | None) -> list[tuple[int, int]]:
    return list(zip((k for k, _ in slices), workers, strict=True)) if workers is not None else []


def case_blocks(base: Entry, cur: Entry, rule: Rule) -> BlockStats | None:
    """The statistics of one case from both sides' entries (slice_stats), or None when they hold no common block."""
    return slice_stats(_slices(base), _slices(cur), workers(base), workers(cur), rule)


def _slices(entry: Entry) -> list[tuple[int, list[float]]]:
    """(block, raw rounds) of each slice a side's entry keeps (bench.regress.ab.engine.pooled)."""
    return [(s.block, list(s.rounds)) for s in entry.ab_slices]


def workers(entry: Entry) -> list[int] | None:
    """The worker process of each of a side's slices (WORKERS_KEY), None when the entry does not say."""
    got = entry.unknown.get(WORKERS_KEY)
    ok = isinstance(got, list) and len(got) == len(entry.ab_slices) and all(type(w) is int for w in got)
    return got if ok else None


def _stands(stats: BlockStats, noise: NoiseModel, rule: Rule) -> bool:
    """Whether a block verdict survives the cross-case guard (the module docstring)."""
    if noise.kind != "cross-case":
        return True
    l, d = math.log(stats.estimate), 1 if stats.estimate > 1 else -1
    apart = d * (l - noise.center)
    alone = apart > noise.k * noise.sigma
    group = noise.group_shift == d and apart > math.log1p(rule.threshold)
    whole = d * noise.center > math.log1p(rule.threshold)
    return alone or group or whole


def processes(base: Entry, cur: Entry) -> tuple[int, int]:
    """How many worker processes each side (A, B) timed the case in (1 when its entry does not say: one did all)."""
    return len(set(workers(base) or [0])), len(set(workers(cur) or [0]))


def _timed(v: CaseVerdict, stats: BlockStats, noise: NoiseModel, rule: Rule, procs: tuple[int, int]) -> CaseVerdict:
    """v (compare's verdict of a case ok on both sides) with its timing judged by the blocks and the guard."""
    time_v = stats.verdict
    each = f"{procs[0]} worker process{'es' * (procs[0] != 1)} a side" if procs[0] == procs[1] else \
        f"worker processes: A {procs[0]}, B {procs[1]}"
    why = f"{describe(stats, rule)}; {each}"
    if time_v in ("regressed", "improved") and not _stands(stats, noise, rule):
        time_v = "noisy"
        why += (f", but it does not stand out of the other {noise.n_cases - 1} cases (alone it must move "
                f"x{noise.floor_ratio:.2f} from their median x{noise.center_ratio:.2f}; no significant lean)")
    mem = v.mem_ratio
    mem_v = "unchanged"
    if mem is not None and mem > 1 + rule.threshold:
        mem_v, why = "regressed", f"{why}; peak memory +{(mem - 1) * 100:.0f}%"
    elif mem is not None and mem < 1 / (1 + rule.threshold):
        mem_v, why = "improved", f"{why}; peak memory -{(1 - mem) * 100:.0f}%"
    # one verdict per case, as compare: a regression of either kind wins, then doubt, then gains
    order = ("regressed", "noisy", "inconclusive", "improved", "unchanged")
    verdict = min((time_v, mem_v), key=order.index)
    return dataclasses.replace(v, verdict=verdict, failing=verdict == "regressed", reason=why, ratio=stats.estimate,
                               p_value=stats.p, blocks=stats.ratios, interval=(stats.low, stats.high),
                               workers=procs)


def judge(base: RunDocument, current: RunDocument, rule: Rule) -> Comparison:
    """Both sides of an A/B (bench.regress.ab.engine's documents, or the files `bench ab --save` wrote) -> verdicts."""
    cmp = compare_runs(base, current, rule, control=False)
    bcases = {e.case_id: e for e in base.entries()}
    ccases = {e.case_id: e for e in current.entries()}
    stats: dict[str, BlockStats] = {}
    for v in cmp.cases:
        if v.base_status == v.cur_status == "ok":
            s = case_blocks(bcases[v.case_id], ccases[v.case_id], rule)
            if s is not None:
                stats[v.case_id] = s
    logs = [math.log(s.estimate) for s in stats.values()]
    noise = noise_model(logs, [s.verdict in ("regressed", "improved") for s in stats.values()], rule)
    cases = [(_timed(v, stats[v.case_id], noise, rule, processes(bcases[v.case_id], ccases[v.case_id]))
              if v.case_id in stats else v) for v in cmp.cases]
    cases.sort(key=lambda v: (not v.failing, VERDICTS.index(v.verdict), -(v.ratio or 0), v.case_id))
    counts = {name: sum(v.verdict == name for v in cases) for name in VERDICTS}
    n_failing = sum(v.failing for v in cases)
    summary = dataclasses.replace(cmp.summary, noise=noise, counts=counts, n_failing=n_failing,
                                  exit_code=1 if n_failing else 0, method="blocks")
    return Comparison(summary, tuple(cases))
