"""From the two sides' raw slices of one case to what is judged (pure functions): each block's B/A ratio, which
bench.regress.blocks turns into the case's verdict, and the pooled rounds each side's run document keeps.

The block ratios (block_ratios) use each slice's fastest round; a case is judged by one ratio per pair of worker
processes (pair_ratios), since blocks that ran in the same processes share those processes' state. The pooled rounds
of each side's document take two steps, applied to both sides alike, so that a shared machine's interference cancels
instead of deciding:
1. Per slice, the fastest half of its rounds (at least 3). Interference on a busy host only ever adds time to a
   round (a preempted process waits; nothing runs code faster), so a slice's slow rounds measure the host and its
   fast rounds the code. Both sides lose the same share of rounds.
2. Per ABBA block, one common level: every round of block j (both sides) is multiplied by G / sqrt(a_j * b_j),
   with a_j and b_j the sides' medians in that block and G their geometric mean over the blocks. A slow spell that
   spans a block moves both sides' slices of it; this removes it, while each block's ratio b_j / a_j, measured
   side by side, is kept exactly.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Iterable, Mapping

KEEP_AT_LEAST = 3
# the extra_info key of a side's entry that says which of its worker processes (0, 1, ...) ran each slice, in the
# order of its ab_slices (bench.regress.ab.engine writes it, bench.regress.ab.verdict reads it)
WORKERS_KEY = "ab_workers"


def fastest_half(rounds: list[float]) -> list[float]:
    """The fastest half of one slice's rounds, in their order (at least KEEP_AT_LEAST, or all when fewer)."""
    if len(rounds) <= KEEP_AT_LEAST:
        return list(rounds)
    keep = max(KEEP_AT_LEAST, math.ceil(len(rounds) / 2))
    cut = sorted(rounds)[keep - 1]
    out = [x for x in rounds if x < cut]
    return out + [cut] * (keep - len(out))


def _block_medians(slices: list[tuple[int, list[float]]]) -> dict[int, float]:
    by_block: dict[int, list[float]] = {}
    for block, rounds in slices:
        by_block.setdefault(block, []).extend(rounds)
    return {k: statistics.median(v) for k, v in by_block.items() if v}


def judged_rounds(a: list[tuple[int, list[float]]],
                  b: list[tuple[int, list[float]]]) -> tuple[list[float], list[float]]:
    """Each side's pooled rounds for the comparison, from its (block, raw rounds) slices."""
    a = [(k, fastest_half(r)) for k, r in a]
    b = [(k, fastest_half(r)) for k, r in b]
    ma, mb = _block_medians(a), _block_medians(b)
    level = {k: math.sqrt(ma[k] * mb[k]) for k in ma if k in mb and ma[k] > 0 and mb[k] > 0}
    if len(level) >= 2:
        grand = math.exp(statistics.fmean(math.log(v) for v in level.values()))
        a = [(k, [x * grand / level[k] for x in r] if k in level else r) for k, r in a]
        b = [(k, [x * grand / level[k] for x in r] if k in level else r) for k, r in b]
    return [x for _, r in a for x in r], [x for _, r in b for x in r]


def block_ratios(a: list[tuple[int, list[float]]], b: list[tuple[int, list[float]]]) -> list[float]:
    """b_j / a_j of every block both sides timed, in block order: each side's mean over the block's slices of each
    slice's fastest round.

    The fastest round, not the fastest half: on a shared 2-core machine a slice's rounds are two populations, the
    rounds the process had its core to itself and the rounds it shared it (x2.3 slower here), in any proportion; a
    median of any share of them follows the proportion, the fastest round does not (the sd of the log block ratios
    of one case, 44 blocks at load 3-6: 0.24 by the fastest half's median, 0.20 by the fastest round)."""
    return list(_ratios(a, b).values())


def pair_ratios(a: list[tuple[int, list[float]]], b: list[tuple[int, list[float]]],
                pair_of: Mapping[int, Hashable]) -> list[float]:
    """One ratio per pair of worker processes (pair_of: block -> its pair; a block it lacks counts with every other
    such block, as one pair): the geometric median of the block ratios of the blocks that pair ran, in the order of
    their first blocks. What bench.regress.blocks judges a case by.

    The pair is the unit because a process's state (where its buffers landed, what it compiled) lasts for all its
    blocks: a pair whose B process landed 12% slower gives 12% in each of its blocks, so its blocks are one draw of
    the between-process spread, however many. Counted as independent they made an unchanged tree 'regress x1.12'
    from 7 blocks of one pair. Grouping, not widening the blocks' interval by the between-pair spread: from a few
    pairs that spread is barely estimated (at alpha 0.01 a t quantile with 2 degrees of freedom is 6.96), while the
    rank interval over pairs needs no estimate of it, only 7 pairs or more; so bench ab gives each block its own.
    The median keeps a block the host disturbed from moving its pair."""
    by_pair: dict[Hashable, list[float]] = {}
    for block, ratio in _ratios(a, b).items():
        by_pair.setdefault(pair_of.get(block), []).append(math.log(ratio))
    return [math.exp(statistics.median(logs)) for logs in by_pair.values()]


def worker_pairs(a: Iterable[tuple[int, int]], b: Iterable[tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """block -> (A's worker, B's worker) that ran it, from each side's (block, worker) of every slice."""
    wa, wb = dict(a), dict(b)
    return {k: (wa[k], wb[k]) for k in wa if k in wb}


def _ratios(a: list[tuple[int, list[float]]], b: list[tuple[int, list[float]]]) -> dict[int, float]:
    ma = _block_means([(k, min(r)) for k, r in a if r])
    mb = _block_means([(k, min(r)) for k, r in b if r])
    return {k: mb[k] / ma[k] for k in sorted(ma) if k in mb and ma[k] > 0 and mb[k] > 0}


def _block_means(fastest: list[tuple[int, float]]) -> dict[int, float]:
    by_block: dict[int, list[float]] = {}
    for block, value in fastest:
        by_block.setdefault(block, []).append(value)
    return {k: statistics.fmean(v) for k, v in by_block.items()}

