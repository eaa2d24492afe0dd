"""`bench ab`'s verdicts: each case judged by its own ABBA blocks (bench.regress.blocks), the cross-case noise model
kept as a guard where there are enough cases.

compare_runs matches the two sides' cases and judges what needs no timing statistics (status changes, peak memory);
each case timed on both sides is then judged by its blocks' B/A ratios, read from the entries' `ab_slices`.
The guard (rule.min_cases cases or more): the blocks of one case share its two worker processes, so a state of a
process that lasts the whole A/B (memory layout, a case that runs in a slow mode in one process) moves every block
alike and looks certain. The other cases measure how far cases move that way: a case the blocks call regressed or
improved must also stand out of them (|l - m| > k sigma, bench.regress.noise), or lean with a significant group, or
the A/B as a whole (the median case, m) must have moved past the threshold the same way (interleaving cancels the
machine's drift, so a move of every case is the code's). Otherwise it is "noisy". Fewer cases: no guard.
"""

from __future__ import annotations

import dataclasses
import math

from bench.regress.ab.rounds import block_ratios
from bench.regress.blocks import BlockStats, block_stats, describe
from bench.regress.compare import compare_runs
from bench.regress.noise import NoiseModel, Rule, noise_model
from bench.regress.verdicts import VERDICTS, CaseVerdict, Comparison
from bench.results import Entry, RunDocument


def case_blocks(base: Entry, cur: Entry, rule: Rule) -> BlockStats | None:
    """The block statistics of one case from both sides' entries, or None when they hold no common block."""
    ratios = block_ratios(_slices(base), _slices(cur))
    return block_stats(ratios, rule) if ratios else None


def _slices(entry: Entry) -> list[tuple[int, list[float]]]:
    """(block, raw rounds) of each slice a side's entry keeps (bench.regress.ab.engine.pooled)."""
    return [(s.block, list(s.rounds)) for s in entry.ab_slices]


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


def _timed(v: CaseVerdict, stats: BlockStats, noise: NoiseModel, rule: Rule) -> CaseVerdict:
    """v (compare's verdict of a case ok on both sides) with its timing judged by the blocks and the guard."""
    time_v, why = stats.verdict, describe(stats, rule)
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
                               p_value=stats.p, blocks=stats.ratios, interval=(stats.low, stats.high))


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
    cases = [(_timed(v, stats[v.case_id], noise, rule) if v.case_id in stats else v) for v in cmp.cases]
    cases.sort(key=lambda v: (not v.failing, VERDICTS.index(v.verdict), -(v.ratio or 0), v.case_id))
    counts = {name: sum(v.verdict == name for v in cases) for name in VERDICTS}
    n_failing = sum(v.failing for v in cases)
    summary = dataclasses.replace(cmp.summary, noise=noise, counts=counts, n_failing=n_failing,
                                  exit_code=1 if n_failing else 0, method="blocks")
    return Comparison(summary, tuple(cases))
